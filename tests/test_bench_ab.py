"""`bench/ab.py` runs the command line of the tree it is given, not the installed one (which `PYTHONPATH` would not
override: the editable install's finder comes first)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "ab.py"), *args], capture_output=True, text=True,
                          timeout=120)


def test_the_other_trees_code_runs(tmp_path: Path) -> None:
    tree = tmp_path / "other"
    shutil.copytree(ROOT / "forensics", tree / "forensics", ignore=shutil.ignore_patterns("__pycache__"))
    cli = tree / "forensics" / "cli.py"
    text = cli.read_text()
    assert "read logs off a broken GPU host" in text
    cli.write_text(text.replace("read logs off a broken GPU host", "THE OTHER TREE'S CLI", 1))
    r = _run(str(tree), "--help")
    assert r.returncode == 0, r.stderr
    assert "THE OTHER TREE'S CLI" in r.stdout
    r = _run(str(ROOT), "--help")
    assert r.returncode == 0 and "read logs off a broken GPU host" in r.stdout


def test_a_tree_without_the_package_is_refused(tmp_path: Path) -> None:
    r = _run(str(tmp_path))
    assert r.returncode == 1 and "holds no forensics package" in r.stderr
