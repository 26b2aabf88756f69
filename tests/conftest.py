"""Shared test options and fixtures. Golden files change only with `pytest --update-golden`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden files from the current output (review the diff!)")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(autouse=True)
def _isolated_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """User state points at a temp dir: no test touches ./.forensics, user rule packs or the user's private cache
    directory (where rule sets are kept between runs)."""
    monkeypatch.setenv("FORENSICS_STORE", str(tmp_path / "store"))
    monkeypatch.delenv("FORENSICS_RULES", raising=False)
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(tmp_path / "private"))


def check_golden(path: Path, actual: str, update: bool) -> None:
    """Compare `actual` with the golden file at `path` (or write it with --update-golden)."""
    if update or not path.exists():
        if not update and os.environ.get("CI"):
            pytest.fail(f"golden file {path} is missing; run `make golden` and commit it")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        return
    expected = path.read_text()
    assert actual == expected, f"{path} differs; if the change is intended run `make golden` and review the diff"
