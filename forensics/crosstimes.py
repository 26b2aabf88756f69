"""Times fixed across sources once they have landed: the zone of stamps that print none, read off the lines a
source with exact times also holds (`zonefix`), and dmesg's monotonic clocks anchored to wall time by pairing
kernel lines with the journal (`anchor`); each source so moved is rewritten."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import polars as pl

from .anchor import BootAnchor, apply_anchor, find_anchors
from .ingestoptions import IngestOptions, given_options, read_with_of
from .landed import REWRITE_TRIES, rewrite_times
from .schema import TimeSource
from .store import SourceEntry, Store, StoreError
from .zonefix import (KERNEL, MARK as ZONE_MARK, ZoneFinding, disagreement, find_offset, key_step, keyed, sampled,
                      source_key, unique_pairs, zone_note)

@dataclass(frozen=True)
class ZoneResult:
    path: str
    said: str          # the source's new time note, or why its zone stays assumed
    moved: bool        # its times were moved by the offset found
    warning: bool      # pairs were found but do not settle the zone


_ASSUMED_ZONE = (TimeSource.ZONE_ASSUMED.value, TimeSource.YEAR_INFERRED.value)


def _zone_candidate(e: SourceEntry) -> bool:
    """A source whose stamps print no zone, read with the default UTC, whose zone was not read off other lines
    before."""
    return (any(e.ts_sources.get(k) for k in _ASSUMED_ZONE) and read_with_of(e)["tz"] == "UTC"
            and ZONE_MARK not in e.time_anchor)


def infer_zones(store: Store, opts: IngestOptions) -> list[ZoneResult]:
    """Read the zone of sources whose stamps print none (an SGLang log, `dmesg -T`) off the lines a source with exact
    times also holds (the journal: `zonefix`); move their times when it is not UTC. Not when --tz was given."""
    if "tz" in given_options(opts):
        return []
    entries = store.sources()
    todo = [e for e in entries if _zone_candidate(e)]
    exact = [e for e in entries if e.ts_sources.get(TimeSource.EXACT.value)]
    if not todo or not exact:
        return []
    try:  # the keys and lines alone of the lines that can pair, streamed: a 4 GiB corpus's journal holds 1.5 M of
        # them, whose times, paths and hosts kept too took the ingest's peak 90 MiB up (to 428 MiB)
        step = key_step(sum(x.records for x in exact))
        keys = pl.concat([_exact_lines(store, x).select("_h", "line", pl.lit(i, pl.UInt16).alias("_x"))
                          .filter(sampled(step)) for i, x in enumerate(exact)]).collect(engine="streaming")
    except FileNotFoundError:   # another process replaced a source meanwhile: its next ingest reads the zones
        return []
    out: list[ZoneResult] = []
    if keys.is_empty():
        return out
    for e in todo:
        for _ in range(REWRITE_TRIES):
            done = _zone_source(store, e, exact, keys, step)
            if done is not False:
                if done is not None:
                    out.append(done)
                break
            e = store.entry(e.source_id)
            if e is None or not _zone_candidate(e):
                break
    return out


def _exact_lines(store: Store, e: SourceEntry) -> pl.LazyFrame:
    """The records of `e` with exact times that can pair (the kernel's lines, those that begin as an SGLang line
    does), with their key `_h`."""
    return keyed(store.records_of(e).filter(pl.col("ts_source") == TimeSource.EXACT.value))


def _zone_source(store: Store, e: SourceEntry, exact: Sequence[SourceEntry], keys: pl.DataFrame,
                 step: int) -> ZoneResult | None | bool:
    """One source's zone from the lines of the `exact` sources (`keys`: the key, line and index in `exact` of
    theirs, 1 in `step` of them): the result, None when no line pairs, False when another process rewrote a source
    meanwhile (nothing changed then)."""
    try:
        src = store.records_of(e)
        assumed = pl.col("ts_source").is_in(_ASSUMED_ZONE)
        mine = (src.filter(assumed, pl.col("ts").is_not_null(), KERNEL | pl.col("ts_text").str.starts_with("["))
                .select(source_key(), "ts").filter(sampled(step), pl.col("_h").is_in(keys.get_column("_h").implode()))
                .collect(engine="streaming"))
        if mine.is_empty():
            return None
        theirs = keys.filter(pl.col("_h").is_in(mine.get_column("_h").implode()))
        held = pl.concat([  # the few lines paired, read by their line numbers (not their text again)
            store.records_of(exact[i]).filter(pl.col("line").is_in(part.get_column("line").implode()))
            .select(pl.col("ts").alias("ts_exact"), "path", "line", "host").collect()
            .join(part.select("_h", "line"), on="line")
            for (i,), part in theirs.group_by("_x", maintain_order=True)])
        held = held.select("_h", "ts_exact", "path", "line", "host")
        if e.host is not None:  # a source that names its host pairs with that host's lines only
            held = held.filter(pl.col("host").is_null() | (pl.col("host") == e.host))
        pairs = unique_pairs(mine, held)
    except FileNotFoundError:
        return False
    f: ZoneFinding | None = find_offset(pairs)
    if f is None:
        return None
    if f.offset is None:
        return ZoneResult(e.path, disagreement(f), moved=False, warning=True)
    note = zone_note(e.time_anchor, f, _holders(pairs))
    if f.offset == 0:
        ok = store.update(replace(e, time_anchor=note), based_on=e)
        return ZoneResult(e.path, note, moved=False, warning=False) if ok else False
    moved = pl.when(assumed).then(pl.col("ts") - pl.duration(seconds=f.offset)).otherwise(pl.col("ts"))
    if not rewrite_times(store, e, src.with_columns(moved.alias("ts")),
                          lambda _, summary: replace(e, first_ts=summary["first_ts"], last_ts=summary["last_ts"],
                                                     time_anchor=note)):
        return False
    return ZoneResult(e.path, note, moved=True, warning=False)


def _holders(pairs: pl.DataFrame) -> str:
    """`journal-k26.log`, or `a.log and b.log`, or `a.log and 2 other sources`: the sources of the exact lines."""
    paths = sorted(set(pairs.get_column("path").to_list()))
    if len(paths) == 1:
        return paths[0]
    return f"{paths[0]} and {paths[1]}" if len(paths) == 2 else f"{paths[0]} and {len(paths) - 1} other sources"


def anchor_kernel_clocks(store: Store, opts: IngestOptions, rules) -> list[BootAnchor]:
    """Pair monotonic-only kernel records with wall-timed kernel records; rewrite the sources anchored."""
    mono_sources = [e for e in store.sources() if e.ts_sources.get(TimeSource.MONOTONIC_ONLY.value)]
    found: list[BootAnchor] = []
    for e in mono_sources:
        for _ in range(REWRITE_TRIES):
            anchors = _anchor_source(store, e, opts)
            if anchors is not None:
                found.extend(anchors)
                break
            e = store.entry(e.source_id)  # another process rewrote the source meanwhile: from what it wrote
            if e is None or not e.ts_sources.get(TimeSource.MONOTONIC_ONLY.value):
                break
        else:
            raise StoreError(f"{e.path}: its store files kept changing while its dmesg clock was anchored "
                             f"({REWRITE_TRIES} tries); run the ingest again once the other writers are done")
    return found


def anchored_note(anchors: Mapping[str, BootAnchor], ts_sources: Mapping[str, int], which: str = "") -> str:
    """A source's time note once boots of it are anchored: how (`which` boots, when not all), and how many
    records of other boots are still monotonic only."""
    left = ts_sources.get(TimeSource.MONOTONIC_ONLY.value, 0)
    how = "; ".join(sorted({a.how for a in anchors.values()}))
    return how + (f"{which}; {left} record(s) of other boots still monotonic only" if left else "")


def kernel_timestamp_anchor(store: Store, mono: pl.LazyFrame, host: str | None) -> dict[str, BootAnchor]:
    """The boot time `systemctl show` printed (`KernelTimestamp=`, the manager's property: when the kernel
    started) for a source whose unanchored records (`mono`) are of one boot (a raw dmesg is the current boot's ring
    buffer, the boot `systemctl show` describes when both were copied off the box together). Only when the store's
    `systemctl show` outputs name one such time; {} otherwise. The source's boots are read only when the store
    holds a `systemctl show` output."""
    shows = [e for e in store.sources() if "systemctl-show" in (e.formats or [e.format])]
    if not shows:
        return {}
    boots = mono.select(pl.col("boot_id").unique()).collect().get_column("boot_id").to_list()
    if len(boots) != 1:
        return {}
    found: dict[datetime, str] = {}
    for e in shows:
        try:
            rows = (store.records_of(e).filter(pl.col("message").str.starts_with("KernelTimestamp="),
                                               pl.col("ts").is_not_null())
                    .select("ts", "path", "line").collect())
        except FileNotFoundError:
            continue
        for ts, path, line in rows.iter_rows():
            found.setdefault(ts, f"{path}:{line}")
    if len(found) != 1:
        return {}
    (bt, where), = found.items()
    how = (f"boot time {bt.strftime('%Y-%m-%d %H:%M:%S')} UTC from systemctl show's KernelTimestamp= ({where}), "
           f"read as the boot of this dmesg (the current one when both were copied)")
    return {boots[0]: BootAnchor(boots[0], host, bt, 0, 0.0, how)}


def _anchor_source(store: Store, e: SourceEntry, opts: IngestOptions) -> list[BootAnchor] | None:
    """Anchor one source's monotonic-only records (its files as `e` lists them). The anchors applied, or
    None when another process rewrote the source's files meanwhile (nothing changed then)."""
    try:
        src = store.records_of(e)
        mono_only = pl.col("ts_source") == TimeSource.MONOTONIC_ONLY.value
        # the messages in both are found by their hashes first (8 bytes each, not the text of every kernel line),
        # then the few that share a hash are compared whole
        h = pl.col("message").hash(seed=0)
        mono_h = src.filter(mono_only).select(h.alias("_h")).unique().collect(engine="streaming")
        walled = (store.records()
                  .filter(pl.col("ident") == "kernel", pl.col("ts").is_not_null(),
                          pl.col("ts_source") != TimeSource.BOOT_ANCHORED.value,
                          h.is_in(mono_h.get_column("_h").implode()))
                  .select("ts", "message", "host").collect(engine="streaming"))
        anchors: dict[str, BootAnchor] = {}
        if walled.height:
            walled_h = walled.select(h.alias("_h")).unique().get_column("_h")
            mono = (src.filter(mono_only, h.is_in(walled_h.implode())).select("boot_id", "mono", "message", "host")
                    .collect(engine="streaming"))
            walled = walled.join(mono.select("message").unique(), on="message", how="semi", maintain_order="left")
            mono = mono.join(walled.select("message").unique(), on="message", how="semi", maintain_order="left")
            anchors = {a.boot_id: a for a in find_anchors(mono, walled)}
        if not anchors:
            anchors = kernel_timestamp_anchor(store, src.filter(mono_only), opts.host)
    except FileNotFoundError:
        return None  # its files were replaced (and the old ones deleted) since `e` was read
    if not anchors:
        return []
    def anchored(records_file: Path, summary: dict) -> SourceEntry:
        hosts = pl.scan_parquet(records_file).select(pl.col("host").drop_nulls().mode().sort().first()).collect()
        return replace(e, first_ts=summary["first_ts"], last_ts=summary["last_ts"], ts_sources=summary["ts_sources"],
                       host=hosts.item() or e.host, time_anchor=anchored_note(anchors, summary["ts_sources"]))

    if not rewrite_times(store, e, apply_anchor(src, anchors, opts.host), anchored):
        return None
    return list(anchors.values())
