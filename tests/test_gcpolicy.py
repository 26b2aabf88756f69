"""The console command tunes its process's garbage collector (forensics.gcpolicy); the library does not."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_console_script_is_the_tuned_entry_point() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["forensics"] == "forensics.cli:run"


def test_for_command_raises_the_thresholds_and_freezes_at_exit() -> None:
    out = _python(
        "import atexit, gc\n"
        "from forensics.gcpolicy import THRESHOLDS, for_command\n"
        "atexit.register(lambda: print('frozen at exit', gc.get_freeze_count() > 0))\n"
        "before = gc.get_threshold()\n"
        "for_command()\n"
        "print('default', before[0] < THRESHOLDS[0], 'now', gc.get_threshold() == THRESHOLDS)\n"
        "print('frozen now', gc.get_freeze_count() > 0)\n")
    assert out.splitlines() == ["default True now True", "frozen now False", "frozen at exit True"]


def test_importing_the_library_and_cli_leaves_the_collector_alone() -> None:
    out = _python("import gc\nbefore = gc.get_threshold()\nimport forensics.cli, forensics.pipeline\n"
                  "print(gc.get_threshold() == before, gc.get_freeze_count())")
    assert out.split() == ["True", "0"]


def test_run_tunes_then_runs_the_command() -> None:
    out = _python("import gc, sys\nfrom forensics.cli import run\nsys.argv = ['forensics', '--version']\n"
                  "try:\n    run()\nexcept SystemExit as e:\n    print('exit', e.code, gc.get_threshold()[0])\n")
    assert out.splitlines()[-1] == "exit 0 50000"
