"""`forensics store remove SOURCE...`: sources out of the store by path or sha256 prefix, all or nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.store import SUPERSEDED_GRACE, Store

INCIDENT = Path(__file__).resolve().parent.parent / "samples" / "incident"


def _run(store: Path, *args: str):  # noqa: ANN202 - click's Result
    return CliRunner().invoke(main, ["--store", str(store), *args])


@pytest.fixture
def store(tmp_path: Path) -> Path:
    where = tmp_path / "s"
    assert _run(where, "ingest", "-q", str(INCIDENT)).exit_code == 0
    return where


def _paths(store: Path) -> list[str]:
    return [e.path for e in Store(store).sources()]


def test_remove_by_path_takes_its_records_and_events_out(store: Path) -> None:
    dmesg = str(INCIDENT / "dmesg.log")
    before = Store(store).sources()
    r = _run(store, "store", "remove", dmesg)
    assert r.exit_code == 0, r.output
    gone = next(e for e in before if e.path == dmesg)
    assert f"removed   {dmesg}: {gone.records} records, {gone.events} events" in r.stderr
    assert dmesg not in _paths(store) and len(_paths(store)) == len(before) - 1
    rows = [json.loads(x) for x in _run(store, "timeline", "--format", "jsonl").stdout.splitlines()]
    assert rows and not any(x["path"] == dmesg for x in rows)
    events = json.loads(_run(store, "events", "--json").stdout)
    assert events and not any(e["source"] == dmesg for e in events)
    check = _run(store, "store", "check")
    assert check.exit_code == 0, check.output
    # the files stay for the grace period (a query reading them meanwhile), then go with a later write
    data = json.loads((store / "manifest.json").read_text())
    assert {f"records/{gone.records_name}", f"events/{gone.events_name}"} <= set(data["superseded"])
    assert SUPERSEDED_GRACE > 0


def test_remove_by_sha256_prefix(store: Path) -> None:
    e = Store(store).sources()[0]
    r = _run(store, "store", "remove", e.sha256[:8].upper())
    assert r.exit_code == 0 and e.path not in _paths(store)


@pytest.mark.parametrize("spec, says", [
    ("nosuch.log", "no source 'nosuch.log' in the store"),
    ("abc", "no source 'abc' in the store"),          # too short to be a sha256 prefix
    ("ffffffffffff", "no source 'ffffffffffff' in the store"),
])
def test_an_unknown_source_removes_nothing(store: Path, spec: str, says: str) -> None:
    """All or nothing: one SOURCE that names no source leaves every other one in place too."""
    before = (store / "manifest.json").read_bytes()
    r = _run(store, "store", "remove", str(INCIDENT / "dmesg.log"), spec)
    assert r.exit_code == 2 and says in r.stderr
    assert (store / "manifest.json").read_bytes() == before


def test_an_ambiguous_sha256_prefix_lists_the_sources_it_starts(tmp_path: Path) -> None:
    from forensics.cli_store import pick_sources
    from forensics.store import SourceEntry

    def entry(path: str, sha: str) -> SourceEntry:
        return SourceEntry(source_id=sha[:16], path=path, sha256=sha, size=1, format="text", formats=["text"],
                           confidence=1.0, host=None, records=1, lines=1, unparsed=0, invalid_utf8=0, first_ts=None,
                           last_ts=None, time_anchor="", ts_sources={}, events=0, tool_version="0", fingerprint="")

    both = [entry("a.log", "abcdef12" + "0" * 56), entry("b.log", "abcdef34" + "0" * 56)]
    got = pick_sources(both, "abcdef")
    assert isinstance(got, str) and "is the start of the sha256 of 2 sources (a.log abcdef120000" in got
    assert pick_sources(both, "abcdef3") == [both[1]]
    assert pick_sources([*both, entry("a.log", "9" * 64)], "a.log") == [both[0], entry("a.log", "9" * 64)]


def test_remove_needs_a_store_and_a_source(tmp_path: Path) -> None:
    r = _run(tmp_path / "nowhere", "store", "remove", "x.log")
    assert r.exit_code == 2 and "no store at" in r.stderr
    assert _run(tmp_path / "nowhere", "store", "remove").exit_code == 2  # click: missing argument
