"""What incident queries keep in a store's cache gives what computing it again gives: the events' narrow frame,
the tables over the records' profiles, and the rules' texts (tests/test_rulepacks.py); each is named after what
it derives from, so a new source or a changed file is seen, and a broken file is computed again."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from test_incidents import add_timeline, store_from_timeline

from forensics import record_tables
from forensics.correlate_store import NARROW_KEPT
from forensics.incidents import build_incidents, find_incidents, incident_json


def _js(incs: list) -> list[str]:
    return [json.dumps(incident_json(i), sort_keys=True) for i in incs]


def _narrows(store) -> list[Path]:  # noqa: ANN001
    return sorted(store.cache_dir.glob("narrow~*.parquet"))


def test_the_narrow_frame_is_kept_and_read_back(tmp_path: Path) -> None:
    store = store_from_timeline(tmp_path, "seed_full.yaml")
    first = _js(build_incidents(store))
    files = _narrows(store)
    assert len(files) == 1
    again = _js(build_incidents(store))
    assert again == first and _narrows(store) == files
    # one host asked for: the kept frame filtered, the same incident
    inc_id = json.loads(first[0])["id"]
    assert _js(find_incidents(store, [inc_id])) == first[:1]
    # a broken cache file is computed again (and replaced)
    files[0].write_bytes(b"not parquet")
    assert _js(build_incidents(store)) == first
    assert pl.read_parquet(files[0]).height > 0


def test_a_new_source_gets_a_new_narrow_frame(tmp_path: Path) -> None:
    store = store_from_timeline(tmp_path, "seed_full.yaml")
    before = [i.id for i in build_incidents(store)]
    old = _narrows(store)
    # the same store with one more source: its events are seen (the old frame is not reused)
    extra = tmp_path / "extra.yaml"
    extra.write_text("host: other\nevents:\n"
                     "  - {at: '09:00:00', kind: segfault, unit: q.service, path: other.log,"
                     " fields: {pid: 5, process: python3}}\n")
    add_timeline(store, extra)
    after = [i.id for i in build_incidents(store)]
    assert "2025-05-25-other-q" in after and set(before) <= set(after)
    assert set(_narrows(store)) - set(old)


def test_old_narrow_frames_are_dropped(tmp_path: Path) -> None:
    store = store_from_timeline(tmp_path, "seed_full.yaml")
    build_incidents(store)
    for i in range(NARROW_KEPT + 3):
        p = store.cache_dir / f"narrow~{i:032x}.parquet"
        p.write_bytes(b"x")
    extra = tmp_path / "extra.yaml"
    extra.write_text("host: other\nevents:\n  - {at: '09:00:00', kind: segfault, unit: q.service, path: o.log}\n")
    add_timeline(store, extra)
    build_incidents(store)
    assert len(_narrows(store)) == NARROW_KEPT


def _tables(store) -> list[Path]:  # noqa: ANN001
    return sorted(store.cache_dir.glob("tables~*"))


def test_the_record_tables_are_kept_and_read_back(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    store = store_from_timeline(tmp_path, "seed_full.yaml")
    add_timeline(store, _other(tmp_path))
    first = _js(build_incidents(store))
    files = _tables(store)
    assert len(files) == 3                       # hosts, spans, units
    calls = [0]
    compute = record_tables.record_tables

    def counting(st, fn, code=""):  # noqa: ANN001, ANN202
        def wrapped():  # noqa: ANN202
            calls[0] += 1
            return fn()
        return compute(st, wrapped, code)

    monkeypatch.setattr("forensics.prepare.record_tables", counting)
    assert _js(build_incidents(store)) == first and calls[0] == 0      # read back, not computed
    # one host asked for: the kept spans filtered by host, the same incidents as building every one
    for inc in json.loads("[" + ",".join(first) + "]"):
        assert _js(find_incidents(store, [inc["id"]])) == [json.dumps(inc, sort_keys=True)]
    assert calls[0] == 0
    # a broken file: computed again, the same
    files[-1].write_text("{not json")
    assert _js(build_incidents(store)) == first and calls[0] == 1


def _other(tmp: Path) -> Path:
    p = tmp / "other.yaml"
    p.write_text("host: other\nevents:\n  - {at: '09:00:00', kind: segfault, unit: q.service, path: other.log,"
                 " fields: {pid: 5, process: python3}}\n")
    return p


def test_a_new_source_gets_new_record_tables(tmp_path: Path) -> None:
    store = store_from_timeline(tmp_path, "seed_full.yaml")
    before = {i.id for i in build_incidents(store)}
    old = set(_tables(store))
    add_timeline(store, _other(tmp_path))
    after = {i.id for i in build_incidents(store)}
    assert after - before == {"2025-05-25-other-q"}
    assert set(_tables(store)) - old
    assert len({p.name.split(".")[0] for p in _tables(store)}) <= record_tables.KEPT


def test_other_code_does_not_read_the_kept_frames(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The code that computes a cache is part of its name: after an upgrade the old files are not read."""
    import forensics.correlate_store as cs
    import forensics.record_tables as rt

    store = store_from_timeline(tmp_path, "seed_full.yaml")
    first = _js(build_incidents(store))
    narrow, tables = set(_narrows(store)), set(_tables(store))
    monkeypatch.setattr(cs, "_CODE", "another version")
    monkeypatch.setattr(rt, "_CODE", "another version")
    assert _js(build_incidents(store)) == first
    assert set(_narrows(store)) - narrow and set(_tables(store)) - tables


def test_cache_files_are_written_whole_and_pruned_by_generation(tmp_path: Path) -> None:
    import os
    import time

    from forensics.cachefiles import generation, prune, write_atomic

    d = tmp_path / "cache"
    # a writer that fails: nothing is left behind, not even the parts written before it
    def boom(tmp: Path) -> None:
        raise OSError("disk full")

    assert not write_atomic([(d / "t~a.one.parquet", lambda tmp: tmp.write_text("1")), (d / "t~a.two.json", boom)])
    assert list(d.iterdir()) == []
    # generations of several files each: the newest `kept` stay, the current one whatever its time
    for i, key in enumerate("abcdef"):
        assert write_atomic([(d / f"t~{key}.one.parquet", lambda tmp: tmp.write_text("1")),
                             (d / f"t~{key}.two.json", lambda tmp: tmp.write_text("2"))])
        for p in d.glob(f"t~{key}.*"):
            os.utime(p, (time.time() + i, time.time() + i))
    (d / "other~x.parquet").write_text("kept: another family")
    prune(d, "t", "t~a", 3)
    assert sorted({generation(p) for p in d.iterdir()}) == ["other~x", "t~a", "t~e", "t~f"]
    assert generation(d / "t~e.one.parquet") == "t~e"


def test_ingest_keeps_the_rules_texts_a_report_reads(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Ingest loads the packs to match: their texts are kept then, so the first report does not load them again
    (compiling every pattern); with `--rules`, the rules matched are not the report's, and nothing is kept."""
    from helpers import ingest_text

    from forensics.rulepacks import rule_texts

    monkeypatch.delenv("FORENSICS_RULES", raising=False)
    line = "2025-05-25T20:17:19+00:00 host systemd[1]: x.service: Main process exited, code=killed, status=9/KILL\n"
    for d in ("user", "a", "b"):
        (tmp_path / d).mkdir()
    user = tmp_path / "user"
    store, rep = ingest_text(tmp_path / "a", "j.log", line, rules_dirs=[str(user)])
    assert not rep.failed and not list(store.cache_dir.glob("rules~*.json"))
    store, rep = ingest_text(tmp_path / "b", "j.log", line)
    assert not rep.failed and len(list(store.cache_dir.glob("rules~*.json"))) == 1
    monkeypatch.setattr("forensics.rulepacks.load_rules", lambda *a, **k: pytest.fail("loaded the packs again"))
    assert rule_texts(store.cache_dir).get("systemd.main_killed") is not None
