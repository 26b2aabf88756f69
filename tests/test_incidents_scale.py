"""Incidents scale with the significant events, not with the store: 200,000 context events (units starting,
stopping, exiting and failing every few seconds for a week, the same lines over and over) around the seed
incident give the seed incident, in seconds, and only the events near it become Python objects.

Preparing every event (and folding copies pairwise, and firing every correlation at every exit) took minutes
here; the bound is generous because CI machines vary."""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

import forensics.eventview as eventview
from forensics.timeline_fixtures import load_timeline
from forensics.incidents import build_incidents, find_incidents, incident_json
from forensics.schema import EVENT_SCHEMA, RECORD_SCHEMA
from forensics.store import SourceEntry, Store, write_parquet

TIMELINES = Path(__file__).parent / "fixtures" / "timelines"
SEED_ID = "2025-05-25-dflash-train-sglang-k26-eagle3"
HOST = "dflash-train"
N = 200_000
STEP_S = 3.0                                     # a week of events, one every 3 s


def _context() -> pl.DataFrame:
    """Units starting and stopping in turns (and, one time in ten, exiting and failing), from two days before
    the seed incident; none of them is a unit of the incident, none is significant."""
    i = pl.int_range(0, N, eager=True)
    t0 = datetime(2025, 5, 23, 0, 0, 0, tzinfo=timezone.utc)
    kinds = ["service_started", "service_stopped"] * 9 + ["service_exited", "service_failed"]
    roles = {"service_started": "context", "service_stopped": "context", "service_exited": "symptom",
             "service_failed": "symptom"}
    df = pl.DataFrame({"i": i}).with_columns(
        (pl.lit(t0) + pl.duration(milliseconds=pl.col("i") * int(STEP_S * 1000))).alias("ts"),
        pl.format("worker-{}.service", pl.col("i") % 40).alias("unit"),
        pl.col("i").map_elements(lambda x: kinds[x % len(kinds)], return_dtype=pl.String).alias("kind"))
    return df.select(
        pl.col("ts").dt.replace_time_zone("UTC"), pl.lit("year_inferred").alias("ts_source"), "kind",
        pl.format("systemd.{}", pl.col("kind")).alias("rule"),
        pl.when(pl.col("kind").is_in(["service_exited", "service_failed"])).then(pl.lit("warning"))
        .otherwise(pl.lit("info")).alias("severity"),
        pl.col("kind").replace_strict(roles, return_dtype=pl.String).alias("role"),
        pl.lit(HOST).alias("host"), "unit", pl.lit(1).cast(pl.Int64).alias("pid"), pl.col("kind").alias("title"),
        pl.format('{{"unit": "{}"}}', pl.col("unit")).alias("fields"),
        pl.format("{}: {}", pl.col("unit"), pl.col("kind")).alias("message"),
        pl.lit("journal-context.log").alias("path"), (pl.col("i") + 1).cast(pl.Int64).alias("line"),
        (pl.col("i") + 1).cast(pl.Int64).alias("line_end"), pl.lit("journal-short").alias("format"))


def _add(store: Store, name: str, ev: pl.DataFrame) -> None:
    sid = hashlib.sha256(name.encode()).hexdigest()[:16]
    ev = ev.with_columns(pl.lit(sid).alias("source_id"))
    ident = pl.when(pl.col("kind").is_in(list(eventview.KERNEL_KINDS))).then(pl.lit("kernel")) \
        .when(pl.col("kind").is_in(list(eventview.SYSTEMD_KINDS))).then(pl.lit("systemd")).otherwise(pl.lit("python3"))
    recs = ev.with_columns(ident.alias("ident"), pl.col("ts").cast(pl.String).alias("ts_text"))
    staging = store.staging()
    write_parquet(recs, staging / "r.parquet", RECORD_SCHEMA)
    write_parquet(ev, staging / "e.parquet", EVENT_SCHEMA)
    ts = [t for t in ev["ts"].to_list() if t is not None]
    store.commit(SourceEntry(source_id=sid, path=ev["path"][0], sha256=sid * 4, size=1, format="fixture",
                             formats=["fixture"], confidence=1.0, host=HOST, records=ev.height, lines=ev.height,
                             unparsed=0, invalid_utf8=0, first_ts=min(ts).isoformat() if ts else None,
                             last_ts=max(ts).isoformat() if ts else None, time_anchor="fixture times", ts_sources={},
                             events=ev.height, tool_version="test", fingerprint=sid),
                 staging / "r.parquet", staging / "e.parquet")


def _stores(tmp: Path) -> tuple[Store, Store]:
    seed = load_timeline(TIMELINES / "seed_full.yaml").events
    small, big = Store(tmp / "seed"), Store(tmp / "big")
    for s in (small, big):
        s.init()
        for path in sorted(set(seed["path"].to_list())):
            _add(s, path, seed.filter(pl.col("path") == path))
    _add(big, "journal-context.log", _context())
    return small, big


def test_200k_context_events_around_the_seed_incident(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    small, big = _stores(tmp_path)
    made = [0]
    views = eventview.views

    def counting(events, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        out = views(events, *a, **k)
        made[0] += len(out)
        return out

    monkeypatch.setattr("forensics.correlate_store.views", counting)
    t = time.perf_counter()
    incs = build_incidents(big)
    took = time.perf_counter() - t
    assert [i.id for i in incs] == [SEED_ID]
    assert took < 30, f"{took:.1f} s for {N} context events"
    # only the events the correlations look at (exits and failures: a tenth) and those near the incident became
    # Python objects, not every event of the store
    assert made[0] < N * 0.15, made[0]
    # the same conclusions as the seed alone (the coverage statements name the context's units too)
    want = build_incidents(small)[0]
    got = incs[0]
    assert [(c.rule, c.kind, c.confidence, c.unit, c.cause_event, c.explains) for c in got.conclusions] == \
        [(c.rule, c.kind, c.confidence, c.unit, c.cause_event, c.explains) for c in want.conclusions]
    assert (got.start, got.end, got.units, got.symptoms) == (want.start, want.end, want.units, want.symptoms)
    assert [e.id for e in got.events] == [e.id for e in want.events]
    # one incident asked for by id: the same incident
    one = find_incidents(big, [SEED_ID])
    assert json.dumps(incident_json(one[0]), sort_keys=True) == json.dumps(incident_json(got), sort_keys=True)
