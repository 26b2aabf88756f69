"""A source's files made final once its records are written: its events given their records' final times, the
summary its manifest entry keeps, a landed source rewritten with moved times, and its profile computed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import polars as pl

from . import profile
from .schema import EVENT_SCHEMA, OUT_OF_RANGE, RECORD_SCHEMA
from .store import SourceEntry, Store, sink_parquet, write_parquet
from .timefix import EXTRA

REWRITE_TRIES = 5  # a source rewritten by another process meanwhile is computed again, up to this many times


def warm_profile(store: Store, sid: str) -> None:
    """Compute the landed source's profile (what the incident queries read instead of its records: its spans
    and ranks; the environment hits, which read every message, are left to the first query) now, while its
    records are in the page cache. Only a cache: a failure here is left to the first query to redo."""
    try:
        profile.of_source(store, sid, env=False)
    except (OSError, pl.exceptions.PolarsError):
        pass


def retime_events(events: pl.DataFrame, records_file: Path, final: pl.DataFrame | None = None) -> pl.DataFrame:
    """Events were matched on provisional times; give them their record's final time, in order (`final`: the
    times of their lines, `final_times`, when already read). An event without a host takes its record's: anchoring
    a kernel clock to a host's journal names the host of the records it anchors."""
    if events.height == 0:
        return events
    if final is None:
        final = final_times(events.get_column("line"), records_file)
    out = events.join(final, on="line", how="left", maintain_order="left")
    return out.with_columns(pl.coalesce(pl.col("_ts"), pl.col("ts")).alias("ts"),
                            pl.coalesce(pl.col("_tss"), pl.col("ts_source")).alias("ts_source"),
                            pl.coalesce(pl.col("host"), pl.col("_host")).alias("host")).drop("_ts", "_tss", "_host")


def final_times(lines: pl.Series, records_file: Path) -> pl.DataFrame:
    """(line, _ts, _tss, _host): the final time (and host) of each of these lines' records."""
    return (pl.scan_parquet(records_file).filter(pl.col("line").is_in(lines.unique().implode()))
            .select("line", pl.col("ts").alias("_ts"), pl.col("ts_source").alias("_tss"), pl.col("host").alias("_host"))
            .collect())


def final_events(parts: list[Path], records_file: Path, sid: str,
                  times: Sequence[pl.Expr] | None) -> pl.LazyFrame:
    """The spilled events parts, streamed, with the source id and their records' final times. `times`: the final
    fix's expressions of the events' time columns, applied to the events themselves, which carry the record
    columns they read (`EXTRA`); none when the fix moves no time (no year inferred). None (a boot anchor), or
    parts without those columns: the times are read from the records file (`_retime_parts`)."""
    have = set(pl.read_parquet_schema(parts[0])) if parts else set()
    alike = all(set(pl.read_parquet_schema(p)) == have for p in parts)  # one scan reads them all
    if times is None or not alike or not all(set(e.meta.root_names()) <= have for e in times):
        return pl.scan_parquet([str(p) for p in _retime_parts(parts, records_file, sid)])
    out = pl.scan_parquet([str(p) for p in parts]).with_columns(pl.lit(sid).alias("source_id"), *times)
    return out.drop([c for c in EXTRA if c in have])


def _retime_parts(parts: list[Path], records_file: Path, sid: str) -> list[Path]:
    """Each spilled events part given its records' final times from the records file and the source id, as a
    new part (both left to the staging's cleanup). A part at a time: a lazy join over all of them buffered
    every event of the source (a 4 GiB journal's 900 k: +220 MB)."""
    final = final_times(pl.scan_parquet([str(p) for p in parts]).select("line").collect().get_column("line"),
                        records_file)
    out = []
    for p in parts:
        ev = pl.read_parquet(p).with_columns(pl.lit(sid).alias("source_id"))
        q = p.with_name("retimed-" + p.name)
        retime_events(ev, records_file, final).drop([c for c in EXTRA if c in ev.columns]).write_parquet(
            q, compression="lz4", statistics=False)
        del ev
        out.append(q)
    return out


def records_summary(records_file: Path) -> dict:
    """Span, record count and time sources of a written records file (formatted by polars: stamps beyond
    Python's datetime range, year 0 or 10000 in UTC, must not crash the ingest)."""
    lf = pl.scan_parquet(records_file)
    fmt = "%Y-%m-%dT%H:%M:%S%.6fZ"
    span = lf.select(pl.col("ts").min().dt.strftime(fmt).alias("a"), pl.col("ts").max().dt.strftime(fmt).alias("b"),
                     pl.len().alias("n")).collect()
    counts = lf.group_by("ts_source").len().sort("ts_source").collect()
    return {"first_ts": span["a"][0], "last_ts": span["b"][0], "records": int(span["n"][0]),
            "ts_sources": dict(zip(counts["ts_source"].to_list(), counts["len"].to_list()))}


def out_of_range_note(records_file: Path) -> list[str]:
    """The note (`line N: ...`, also printed as a warning) on records whose stamp lies outside years 1..9999
    once in UTC (kept with no time; `normalise`); [] when there are none (row groups of no such record are
    skipped by their statistics)."""
    hit = (pl.scan_parquet(records_file).filter(pl.col("ts_anchor") == OUT_OF_RANGE)
           .select(pl.len().alias("n"), pl.col("line").min().alias("first")).collect())
    n, first = hit.row(0)
    if not n:
        return []
    return [f"line {first}: {n} record(s) stamped outside years 1..9999 once in UTC, the first here, are kept "
            f"with no time (ts_source none): the clock that wrote them was wrong; their lines are all stored"]


def rewrite_times(store: Store, e: SourceEntry, records: pl.LazyFrame,
                   entry_for: Callable[[Path, dict], SourceEntry]) -> bool:
    """Replace a listed source's records with `records` (the same, their times moved: a boot anchor, a zone) and its
    events with theirs retimed to match; its entry becomes `entry_for(records file, records_summary of it)`; its profile
    is computed again. False when another process rewrote the source meanwhile (nothing changed then)."""
    staging = store.staging()
    try:
        records_file = staging / "records.parquet"
        try:
            sink_parquet(records, records_file, RECORD_SCHEMA)
            events = retime_events(store.events_of(e).collect(), records_file)
        except FileNotFoundError:
            return False
        write_parquet(events, staging / "events.parquet", EVENT_SCHEMA)
        entry = entry_for(records_file, records_summary(records_file))
        if not store.update(entry, records_file, staging / "events.parquet", based_on=e):
            return False
    finally:
        store.cleanup(staging)
    warm_profile(store, e.source_id)
    return True
