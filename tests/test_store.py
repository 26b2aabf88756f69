"""Store: idempotent re-ingest, atomic sources under SIGKILL, concurrent ingests."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from forensics.pipeline import IngestOptions, ingest
from forensics.store import Store
from helpers import records

LINES = "".join(f"2025-05-25T20:{i // 60 % 60:02d}:{i % 60:02d}+00:00 h a[{i}]: line {i}\n" for i in range(2000))


def _cli(store: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "forensics.cli", "--store", str(store), *args]


def test_reingest_same_bytes_is_a_noop_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text(LINES)
    store = Store(tmp_path / "s")
    first = ingest(store, [str(tmp_path / "a.log")], IngestOptions())
    again = ingest(store, [str(tmp_path / "a.log")], IngestOptions())
    assert first.results[0].status == "ingested" and again.results[0].status == "unchanged"
    assert len(store.sources()) == 1 and records(store).height == 2000
    forced = ingest(store, [str(tmp_path / "a.log")], IngestOptions(force=True))
    assert forced.results[0].status == "ingested"
    assert len(store.sources()) == 1 and records(store).height == 2000


def test_staging_is_deleted_off_the_ingest_path_and_gone_when_it_returns(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A landed source's staging (its many parts) is deleted on a background thread while the ingest goes on;
    `ingest` and `rescan` wait for it before they return, so no staging is left behind."""
    import threading

    import forensics.store as store_mod
    from forensics.pipeline import rescan

    for k in range(3):
        (tmp_path / f"{k}.log").write_text(LINES.replace(" h ", f" h{k} "))
    where: list[str] = []
    real = store_mod.shutil.rmtree

    def slow_rmtree(d: Path, **kw: object) -> None:  # slow: without the wait, staging would still be there
        where.append(threading.current_thread().name)
        time.sleep(0.2)
        real(d, **kw)

    monkeypatch.setattr(store_mod.shutil, "rmtree", slow_rmtree)
    store = Store(tmp_path / "s")
    report = ingest(store, [str(tmp_path / f"{k}.log") for k in range(3)], IngestOptions())
    assert [r.status for r in report.results] == ["ingested"] * 3
    assert len(where) == 3 and all(n.startswith("store-bin") for n in where)
    assert list((store.path / "tmp").iterdir()) == []
    assert rescan(store, IngestOptions()) == 0 and list((store.path / "tmp").iterdir()) == []
    assert len(where) == 6 and records(store).height == 6000


def test_same_bytes_under_another_name_is_a_noop(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text(LINES)
    (tmp_path / "b.log").write_text(LINES)
    store = Store(tmp_path / "s")
    rep = ingest(store, [str(tmp_path / "a.log"), str(tmp_path / "b.log")], IngestOptions())
    assert [r.status for r in rep.results] == ["ingested", "unchanged"]


def test_sources_json_fields(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text(LINES)
    assert subprocess.run(_cli(tmp_path / "s", "ingest", str(tmp_path / "a.log")), capture_output=True).returncode == 0
    out = subprocess.run(_cli(tmp_path / "s", "sources", "--json"), capture_output=True, text=True)
    rows = json.loads(out.stdout)
    for key in ("path", "sha256", "format", "records", "unparsed", "first_ts", "last_ts"):
        assert key in rows[0]
    assert rows[0]["first_ts"] == "2025-05-25T20:00:00.000000Z"


def test_killed_ingest_leaves_the_store_as_before(tmp_path: Path) -> None:
    small = tmp_path / "small.log"
    small.write_text(LINES)
    big = tmp_path / "big.log"
    with open(big, "w") as fh:
        for _ in range(60):
            fh.write(LINES * 10)
    s = tmp_path / "s"
    assert subprocess.run(_cli(s, "ingest", str(small)), capture_output=True).returncode == 0
    before = (s / "manifest.json").read_text()
    killed = 0  # kills before the commit: the store must be as it was
    for delay in (0.3, 0.8, 1.5):
        p = subprocess.Popen(_cli(s, "ingest", str(big)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()
        if p.returncode == 0:
            break
        store = Store(s)
        if (s / "manifest.json").read_text() != before:
            # killed after its commit, while the process was finishing (the last 0.1 s of a 1.7 s ingest): the
            # source is there whole, never in part
            assert sorted(e.path for e in store.sources()) == sorted([str(small), str(big)])
            assert records(store).height == 2000 + 2000 * 600
            break
        killed += 1
        assert [e.path for e in store.sources()] == [str(small)]
        assert records(store).height == 2000
    assert killed >= 1
    # a re-run completes with exact counts
    assert subprocess.run(_cli(s, "ingest", str(big)), capture_output=True).returncode == 0
    assert records(Store(s)).height == 2000 + 2000 * 600


def test_two_concurrent_ingests_both_land(tmp_path: Path) -> None:
    paths = []
    for k in range(2):
        p = tmp_path / f"f{k}.log"
        p.write_text(LINES.replace("line", f"file{k}") * 20)
        paths.append(p)
    s = tmp_path / "s"
    procs = [subprocess.Popen(_cli(s, "ingest", str(p)), stderr=subprocess.PIPE) for p in paths]
    assert [p.wait() for p in procs] == [0, 0]
    store = Store(s)
    assert sorted(e.path for e in store.sources()) == sorted(str(p) for p in paths)
    df = records(store)
    assert df.height == 2 * 40000
    assert df.filter(pl.col("message").str.starts_with("file0")).height == 40000


def test_a_time_window_opens_only_the_sources_it_meets(tmp_path: Path) -> None:
    """`timeline --since/--until` skips the sources whose manifest span lies outside the window: a damaged file
    of another day is not even read."""
    import shutil
    from datetime import datetime, timezone

    from forensics.query import timeline_frame

    (tmp_path / "a.log").write_text("2025-05-24T10:00:00+00:00 h a[1]: day one\n")
    (tmp_path / "b.log").write_text("2025-05-25T10:00:00+00:00 h a[1]: day two\nno stamp here\n")
    store = Store(tmp_path / "s")
    assert not ingest(store, [str(tmp_path / "a.log"), str(tmp_path / "b.log")], IngestOptions()).failed
    files = {Path(e.path).name: store.records_file(e.source_id) for e in store.sources()}
    day = datetime(2025, 5, 25, tzinfo=timezone.utc)
    for damaged, since, until, want in (("a.log", day, None, ["day two"]), ("b.log", None, day, ["day one"])):
        keep = tmp_path / "keep.parquet"
        shutil.copy(files[damaged], keep)
        files[damaged].write_bytes(b"not parquet")
        assert timeline_frame(store, since, until)["message"].to_list() == want
        shutil.copy(keep, files[damaged])
    assert timeline_frame(store)["message"].to_list() == ["day one", "day two", "no stamp here"]


def test_a_rewrite_lands_under_a_new_name_and_the_old_file_waits_for_readers(tmp_path: Path) -> None:
    from forensics.pipeline import rescan
    from forensics.storecheck import check, repair

    (tmp_path / "a.log").write_text(LINES)
    store = Store(tmp_path / "s")
    assert not ingest(store, [str(tmp_path / "a.log")], IngestOptions()).failed
    (e,) = store.sources()
    assert (e.records_name, e.events_name) == (f"{e.source_id}.parquet", f"{e.source_id}.parquet")
    reader = store.events([e.source_id])         # a reader that listed the files before the rewrite
    rescan(store, IngestOptions())
    (after,) = store.sources()
    assert after.records_name == e.records_name and after.events_name != e.events_name
    assert store.events_file(e.source_id).name == after.events_name
    data = json.loads(store.manifest_path.read_text())
    assert list(data["superseded"]) == [f"events/{e.events_name}"]
    assert (store.path / "events" / e.events_name).exists()   # kept for readers like `reader`
    assert reader.select(pl.len()).collect().item() == e.events
    assert check(store.path, min_age=0).ok                  # a superseded file is no orphan
    fixed = repair(store.path, min_age=0)
    assert fixed.repaired == [f"deleted events/{e.events_name} (replaced by a newer file of its source)"]
    assert not (store.path / "events" / e.events_name).exists() and "superseded" not in json.loads(
        store.manifest_path.read_text())
    assert check(store.path, min_age=0).ok and records(store).height == 2000
    # a forced re-ingest of the same bytes replaces both files the same way
    assert not ingest(store, [str(tmp_path / "a.log")], IngestOptions(force=True)).failed
    (forced,) = store.sources()
    assert forced.records_name not in (e.records_name, "") and check(store.path, min_age=0).ok
    assert records(store).height == 2000


def test_a_version_1_store_is_read_and_migrated(tmp_path: Path) -> None:
    from forensics.storecheck import check, migrate

    (tmp_path / "a.log").write_text(LINES)
    store = Store(tmp_path / "s")
    assert not ingest(store, [str(tmp_path / "a.log")], IngestOptions()).failed
    data = json.loads(store.manifest_path.read_text())
    for entry in data["sources"].values():   # version 1: no file names, always <id>.parquet
        del entry["records_name"], entry["events_name"]
    store.manifest_path.write_text(json.dumps({**data, "store_version": 1}))
    assert records(Store(store.path)).height == 2000
    assert not check(store.path, min_age=0).ok         # "version": run --repair to migrate
    assert migrate(store.path) == 1
    (e,) = Store(store.path).sources()
    assert e.records_name == f"{e.source_id}.parquet" and check(store.path, min_age=0).ok


def test_a_manifest_entry_with_keys_of_a_later_version_is_read(tmp_path: Path) -> None:
    """A store a later version wrote (a key this one does not know on each source) stays readable: the sources
    list, a query reads them; a key it lacks takes its default (year_from, kept since the 27th session)."""
    import json as _json

    from click.testing import CliRunner

    from forensics.cli import main
    from helpers import ingest_text

    store, _ = ingest_text(tmp_path, "j.log", "2025-05-25T20:00:00+00:00 h sshd[1]: hello\n")
    data = _json.loads(store.manifest_path.read_text())
    for v in data["sources"].values():
        v["from_a_later_version"] = {"x": 1}
        del v["year_from"]
    store.manifest_path.write_text(_json.dumps(data))
    (e,) = store.sources()
    assert e.path.endswith("j.log") and e.year_from == ""
    r = CliRunner().invoke(main, ["--store", str(store.path), "timeline", "--format", "jsonl"])
    assert r.exit_code == 0 and '"message":"hello"' in r.output
