"""Concurrency: four `forensics ingest` processes on one store at once (each with its own files and one file all
four share), while readers run `timeline --json`, `sources --json`, `events --json` and `report --format json`
in a loop: every record lands exactly once, and no reader ever sees part of a source (each source a reader
shows has all its records and events, or is absent).

(test_store.py already covers two concurrent ingests of one file each.)
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from test_hostile import cli, journal_lines

import forensics.pipeline as pipeline
from forensics.pipeline import IngestOptions, ingest, rescan
from forensics.rulepacks import RulePackError
from forensics.slots import WorkSlots
from forensics.store import Store
from forensics.storecheck import check

ROOT = Path(__file__).resolve().parent.parent
WRITERS = 4
ROUNDS = int(os.environ.get("FORENSICS_TEST_CONCURRENT_ROUNDS", "1"))


def _files(d: Path) -> tuple[list[list[Path]], Path]:
    d.mkdir(parents=True, exist_ok=True)
    shared = d / "shared.log"
    shared.write_text(journal_lines(5000, "shared", host="node-shared", oom_every=900))
    per: list[list[Path]] = []
    for w in range(WRITERS):
        mine = []
        for k in range(2):
            p = d / f"w{w}-{k}.log"
            p.write_text(journal_lines(3500 + 500 * k, f"w{w}k{k}", host=f"node-{w}", oom_every=700,
                                       start_minute=60 * (w + 1)))
            mine.append(p)
        per.append(mine)
    return per, shared


READS = {"timeline": ["timeline", "--json"], "sources": ["sources", "--json"], "events": ["events", "--json"],
         "report": ["report", "--incident", "2025-05-25", "--format", "json"]}


class Reader(threading.Thread):
    """Runs read commands in turn until stopped; checks every answer against the reference."""

    def __init__(self, store: Path, kinds: list[str], ref: dict[str, tuple[int, int]]):
        super().__init__(daemon=True)
        self.store, self.kinds, self.ref = store, kinds, ref
        self.stop = threading.Event()
        self.runs: Counter[str] = Counter()
        self.seen_sources: set[int] = set()
        self.errors: list[str] = []

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            self.kind = self.kinds[i % len(self.kinds)]
            i += 1
            r = subprocess.run(cli(self.store, *READS[self.kind]), capture_output=True, text=True)
            self.runs[self.kind] += 1
            try:
                self.check(r)
            except AssertionError as e:
                self.errors.append(f"{self.kind} run {self.runs[self.kind]}: {e}")

    def check(self, r: subprocess.CompletedProcess) -> None:
        assert "Traceback" not in r.stderr, r.stderr[-2000:]
        if self.kind == "report":
            # before the first incident lands: exit 1 and "no incident matches"
            assert r.returncode == 0 or (r.returncode == 1 and "no incident" in r.stderr), r.stderr[-1500:]
            if r.returncode == 0:
                doc = json.loads(r.stdout)
                assert doc["incidents"], "a report without incidents"
                for inc in doc["incidents"]:
                    for s in inc["sources"]:
                        assert (s["records"], ) == (self.ref[s["path"]][0], ), s
            return
        rows = json.loads(r.stdout or "[]")
        # `events` and `timeline` exit 1 when nothing matched (an empty store)
        empty = self.kind in ("events", "timeline") and r.returncode == 1 and not rows
        assert r.returncode == 0 or empty, r.stderr[-1500:]
        if self.kind == "sources":
            for s in rows:
                assert (s["records"], s["events"]) == self.ref[s["path"]], s["path"]
            self.seen_sources.add(len(rows))
        elif self.kind == "timeline":
            per = Counter(row["path"] for row in rows)
            for path, n in per.items():
                assert n == self.ref[path][0], f"{path}: {n} of {self.ref[path][0]} records visible"
            self.seen_sources.add(len(per))
        elif self.kind == "events":
            per = Counter(row["source"] for row in rows)
            for path, n in per.items():
                assert n == self.ref[path][1], f"{path}: {n} of {self.ref[path][1]} events visible"


class LibraryReader(threading.Thread):
    """Reads through the library in a tight loop (what every command does first): the manifest, then the
    records and events of every source it lists, and the whole timeline; each source whole or absent."""

    def __init__(self, store: Path, ref: dict[str, tuple[int, int]]):
        super().__init__(daemon=True)
        self.store, self.ref = Store(store), ref
        self.stop = threading.Event()
        self.runs = 0
        self.seen_sources: set[int] = set()
        self.errors: list[str] = []

    def run(self) -> None:
        from forensics.query import timeline_frame

        while not self.stop.is_set():
            self.runs += 1
            try:
                entries = self.store.sources() if self.store.exists() else []
                for e in entries:
                    assert (e.records, e.events) == self.ref[e.path], e.path
                recs = self.store.records([e.source_id for e in entries]).group_by("path").len().collect()
                evs = self.store.events([e.source_id for e in entries]).group_by("path").len().collect()
                for path, n in recs.iter_rows():
                    assert n == self.ref[path][0], f"{path}: {n} of {self.ref[path][0]} records"
                for path, n in evs.iter_rows():
                    assert n == self.ref[path][1], f"{path}: {n} of {self.ref[path][1]} events"
                tl = timeline_frame(self.store).group_by("path").len()
                for path, n in tl.iter_rows():
                    assert n == self.ref[path][0], f"timeline {path}: {n} of {self.ref[path][0]} records"
                self.seen_sources.add(len(entries))
            except AssertionError as e:
                self.errors.append(f"library read {self.runs}: {e}")
            except Exception as e:  # noqa: BLE001 - a reader must never fail while writers commit
                self.errors.append(f"library read {self.runs}: {type(e).__name__}: {e}")


def test_four_ingests_with_readers(tmp_path: Path) -> None:
    per, shared = _files(tmp_path / "logs")
    everything = [p for mine in per for p in mine] + [shared]
    ref_store = Store(tmp_path / "ref")
    assert not ingest(ref_store, [str(p) for p in everything], IngestOptions()).failed
    ref = {e.path: (e.records, e.events) for e in ref_store.sources()}
    assert len(ref) == len(everything)
    total_records = sum(r for r, _ in ref.values())
    stats = []
    for round_ in range(ROUNDS):
        s = tmp_path / f"s{round_}"
        Store(s).init()
        library = LibraryReader(s, ref)
        readers = [Reader(s, ["timeline", "sources"], ref), Reader(s, ["events", "report"], ref), library]
        for r in readers:
            r.start()
        t0 = time.monotonic()
        writers = [subprocess.Popen(cli(s, "ingest", "--quiet", *map(str, mine), str(shared)),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for mine in per]
        outs = [w.communicate(timeout=600) for w in writers]
        took = time.monotonic() - t0
        time.sleep(0.5)   # one more round of reads after the last commit
        for r in readers:
            r.stop.set()
        for r in readers:
            r.join(timeout=120)
        codes = [w.returncode for w in writers]
        assert codes == [0] * WRITERS, [o[1].decode()[-2000:] for o in outs]
        errors = [e for r in readers for e in r.errors]
        assert not errors, errors[:5]
        store = Store(s)
        got = {e.path: (e.records, e.events) for e in store.sources()}
        assert got == ref
        recs = store.records().select("path", "line").collect()
        assert recs.height == total_records
        assert recs.unique().height == total_records, "a record landed twice"
        assert recs.filter(pl.col("path") == str(shared)).height == ref[str(shared)][0]
        res = check(s, min_age=0)
        assert res.ok, [p.line() for p in res.problems]
        stats.append((took, {**dict(sum((r.runs for r in readers[:2]), Counter())), "library": library.runs},
                      sorted(set().union(*(r.seen_sources for r in readers)))))
    for took, runs, seen in stats:
        print(f"{WRITERS} concurrent ingests ({len(everything)} files, {total_records} records, one file in all four) "
              f"in {took:.1f} s; reads meanwhile: {runs}; source counts seen by readers: {seen}")
    # the readers really overlapped the writes: some saw a store with part of the sources
    assert any(0 < n < len(everything) for _, _, seen in stats for n in seen), stats


def test_rescan_does_not_undo_a_concurrent_anchoring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dmesg, journal = ROOT / "samples" / "incident" / "dmesg.log", ROOT / "samples" / "incident" / "journal-eagle3.log"
    store = Store(tmp_path / "s")
    assert not ingest(store, [str(dmesg)], IngestOptions()).failed
    (before,) = store.sources()
    assert before.first_ts is None and before.ts_sources.get("monotonic_only")
    real = pipeline._rescan_events
    done = []

    def other_process_meanwhile(*a, **k):  # noqa: ANN002, ANN003, ANN202
        if not done:   # while rescan matches dmesg.log, another ingest lands the journal and anchors dmesg.log
            done.append(True)
            assert not ingest(Store(tmp_path / "s"), [str(journal)], IngestOptions()).failed
        return real(*a, **k)

    monkeypatch.setattr(pipeline, "_rescan_events", other_process_meanwhile)
    rescan(store, IngestOptions())
    entry = {e.path: e for e in store.sources()}[str(dmesg)]
    recs = store.records([entry.source_id]).collect()
    assert recs["ts"].drop_nulls().len() > 0, "the anchoring did not happen"
    assert entry.first_ts is not None and entry.ts_sources.get("boot_anchored"), entry
    events = store.events([entry.source_id]).collect()
    assert events["ts"].drop_nulls().len() == events.height, "events of anchored records without times"


@pytest.mark.parametrize("small", [False, True])
def test_end_phases_of_sources_never_overlap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small: bool) -> None:
    """Sources stream on two workers, but one at a time writes its store files or profiles itself (the end
    phases read or write a whole source: two at once doubled the peak memory of a 4 GiB ingest). Only the
    profiles of small sources (at most SMALL_PROFILE_RECORDS records) are computed two at a time."""
    files = []
    for k in range(4):
        p = tmp_path / f"s{k}.log"
        p.write_text(journal_lines(2000 + 300 * k, f"s{k}", host=f"node-{k}", oom_every=500))
        files.append(str(p))
    lock = threading.Lock()
    ends, profiles = [0, 0], [0, 0]   # (running now, most at once) of the end phases, and of the profiles

    def counted(f, *counters):  # noqa: ANN001, ANN002, ANN202
        def run(*a, **k):
            with lock:
                for c in counters:
                    c[0] += 1
                    c[1] = max(c[1], c[0])
            try:
                time.sleep(0.05)  # room for another worker to come in, were it let in
                return f(*a, **k)
            finally:
                with lock:
                    for c in counters:
                        c[0] -= 1
        return run

    monkeypatch.setattr(pipeline, "WORKERS", 2)
    monkeypatch.setattr(pipeline, "HEAVY", WorkSlots(2))
    monkeypatch.setattr(pipeline, "LAND_WEIGHT", 2)
    monkeypatch.setattr(pipeline, "PROFILE_WEIGHT", 2)
    monkeypatch.setattr(pipeline, "SMALL_PROFILE_RECORDS", 10_000 if small else 0)
    monkeypatch.setattr(pipeline, "sink_parquet", counted(pipeline.sink_parquet, ends))
    # a small source's profile may run beside another's, never beside a landing (all have landed by then)
    monkeypatch.setattr(pipeline, "warm_profile",
                        counted(pipeline.warm_profile, profiles) if small else
                        counted(pipeline.warm_profile, profiles, ends))
    streams = []
    real_read = pipeline.read_batches

    def reading(*a, **k):  # the streams themselves do run at once
        streams.append(threading.get_ident())
        yield from real_read(*a, **k)

    monkeypatch.setattr(pipeline, "read_batches", reading)
    store = Store(tmp_path / "store")
    report = ingest(store, files, IngestOptions())
    assert [r.status for r in report.results] == ["ingested"] * 4
    assert ends[1] == 1
    assert profiles[1] == (2 if small else 1)
    assert len(set(streams)) == 2
    assert sum(e.records for e in store.sources()) == sum(2000 + 300 * k for k in range(4))


def _weighted_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slots: int) -> tuple[int, set[str]]:
    """The most weight of heavy phases running at once over an ingest of four sources on two workers, with the
    gate at `slots` (phases slowed, so that any that may overlap do)."""
    from forensics import match
    from forensics.slots import WorkSlots

    tmp_path.mkdir()
    files = []
    for k in range(4):
        p = tmp_path / f"s{k}.log"
        p.write_text(journal_lines(1500 + 200 * k, f"s{k}", host=f"node-{k}", oom_every=40))
        files.append(str(p))
    lock = threading.Lock()
    used, most, seen = [0], [0], set()

    def weighed(name: str, w: int, f):
        def run(*a, **k):
            holding = pipeline.HEAVY.holding
            assert holding == (w > 0), f"{name} {'holds' if holding else 'does not hold'} a slot"
            with lock:
                used[0] += w
                most[0] = max(most[0], used[0])
                seen.add(name)
            try:
                time.sleep(0.01)
                return f(*a, **k)
            finally:
                with lock:
                    used[0] -= w
        return run

    monkeypatch.setattr(pipeline, "WORKERS", 2)
    monkeypatch.setattr(pipeline, "HEAVY", WorkSlots(slots))
    monkeypatch.setattr(pipeline, "SMALL_PROFILE_RECORDS", 0)  # every profile takes both slots, as a big one does
    monkeypatch.setattr(pipeline, "BATCH_BYTES", 16 << 10)
    monkeypatch.setattr(pipeline, "_matcher", lambda rules, budget=None: None if rules is None else
                        match.Matcher(rules, flush_rows=40, budget=budget))
    monkeypatch.setattr(pipeline, "parse_lines", weighed("parse", 1, pipeline.parse_lines))
    monkeypatch.setattr(match.Matcher, "keep", weighed("prefilter", 0, match.Matcher.keep))
    monkeypatch.setattr(match.Matcher, "finish", weighed("flush", 1, match.Matcher.finish))
    monkeypatch.setattr(pipeline, "sink_parquet", weighed("land", 2, pipeline.sink_parquet))
    monkeypatch.setattr(pipeline, "warm_profile", weighed("profile", 2, pipeline.warm_profile))
    store = Store(tmp_path / "store")
    report = ingest(store, files, IngestOptions())
    assert [r.status for r in report.results] == ["ingested"] * 4
    assert sum(e.records for e in store.sources()) == sum(1500 + 200 * k for k in range(4))
    return most[0], seen


def test_heavy_phases_never_hold_more_than_the_slots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parses (with their sink step's staging), flushes, landings and profiles of all sources share two slots (a
    landing's records write or a profile takes both): the peak memory of a long ingest is where four of them met.
    With the gate opened wide the same ingest does overlap them, so the bound is the gate's doing. The prefilter
    runs outside the gate (it keeps a batch's few candidates, no buffer of the batch's size): it never holds a
    slot, and counts for nothing here."""
    most, seen = _weighted_use(tmp_path / "gated", monkeypatch, 2)
    assert seen == {"parse", "prefilter", "flush", "land", "profile"}
    assert most == 2
    wide, _ = _weighted_use(tmp_path / "wide", monkeypatch, 100)
    assert wide > 2


def test_packs_load_while_the_inputs_are_detected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading the packs (every pattern compiled) overlaps the detection of the inputs: the loader here waits for
    the first detection, which a load done before detecting (or after) would never see."""
    log = tmp_path / "a.log"
    log.write_text(journal_lines(200, "a", host="node-a", oom_every=50))
    detected = threading.Event()
    seen: list[bool] = []
    real_detect, real_load = pipeline.detect, pipeline._load_rules

    def detect(*a, **k):
        detected.set()
        return real_detect(*a, **k)

    def load(opts):
        seen.append(detected.wait(timeout=30) and threading.current_thread() is not threading.main_thread())
        return real_load(opts)

    monkeypatch.setattr(pipeline, "detect", detect)
    monkeypatch.setattr(pipeline, "_load_rules", load)
    rep = ingest(Store(tmp_path / "s"), [str(log)], IngestOptions())
    assert seen == [True] and not rep.failed
    assert Store(tmp_path / "s").sources()[0].events > 0


def test_a_bad_pack_fails_the_ingest_before_any_source_lands(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text(journal_lines(200, "a", host="node-a", oom_every=50))
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "bad.yaml").write_text("pack: bad\nrules:\n  - id: b.x\n    kind: oom_kill\n    pattern: '(unclosed'\n")
    store = Store(tmp_path / "s")
    with pytest.raises(RulePackError) as e:
        ingest(store, [str(log)], IngestOptions(rules_dirs=(str(rules),)))
    assert "bad.yaml:" in str(e.value)
    assert store.sources() == [] and not any((tmp_path / "s" / "tmp").iterdir())
