"""The seed incident end to end: ingest samples/incident, then the report in every format against goldens.

Goldens change only with `pytest --update-golden` (`make golden`), so a reviewer reads the diff."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, check_golden

GOLDEN = ROOT / "tests" / "golden" / "report"


@pytest.fixture(scope="module")
def seed_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("seed") / "store"
    out = subprocess.run([sys.executable, "-m", "forensics.cli", "--store", str(store), "ingest", "samples/incident"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return store


def _report(store: Path, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "forensics.cli", "--store", str(store), "report", "--incident",
                          "2025-05-25", *args], cwd=ROOT, capture_output=True, text=True, env={**os.environ})
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_seed_report_golden(seed_store: Path, fmt: str, update_golden: bool) -> None:
    text = _report(seed_store, "--format", fmt)
    check_golden(GOLDEN / f"samples-2025-05-25.{fmt}", text, update_golden)


def test_seed_report_is_deterministic(seed_store: Path) -> None:
    assert _report(seed_store) == _report(seed_store)


def test_seed_report_says_what_the_seeds_concluded(seed_store: Path) -> None:
    md = _report(seed_store)
    for needle in ("sglang-k26-eagle3.service", "status=9/KILL", "OOM", "confirmed", "sm\\_120",
                   "RTX PRO 6000 Blackwell", "Failed to kill control group", "--mem-fraction-static",
                   "journal-eagle3.log:", "dmesg.log:"):
        assert needle in md, needle
