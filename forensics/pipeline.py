"""The whole ingest flow on one page: sources -> detect -> parse -> normalise -> match -> store -> anchor.

    for each source (sources with full dates first, so their dates can anchor year-less ones):
        read batches of lines -> parse each batch with the detected formats -> normalise
        fix times over the whole source (boots, year, zone) -> match the rule packs -> commit to the store
    then anchor dmesg monotonic clocks by pairing kernel lines with the journal, and re-commit those sources.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

import polars as pl

from . import __version__
from .anchor import BootAnchor, apply_anchor, boot_time_anchor, find_anchors
from .detect import Detection, detect
from .formats import FORMATS, JOURNAL_ALL, StructuredFormat
from .normalise import YearAnchor, fix_source_times, normalise_batch
from .parse import ParseContext, parse_lines, parse_structured, resolve
from .schema import EVENT_SCHEMA, RECORD_SCHEMA, TimeSource, empty_events
from .sources import ReadStats, Source, SourceError, expand, head_bytes, open_binary, read_batches
from .store import SourceEntry, Store, write_parquet


@dataclass(frozen=True)
class IngestOptions:
    fmt: str | None = None
    host: str | None = None
    year: int | None = None
    tz: str = "UTC"
    boot_time: datetime | None = None
    force: bool = False
    rules_dirs: tuple[str, ...] = ()


@dataclass
class SourceResult:
    path: str
    status: str                   # ingested, unchanged, failed
    entry: SourceEntry | None = None
    error: str | None = None


@dataclass
class IngestReport:
    results: list[SourceResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)   # inputs that could not even be opened
    anchors: list[BootAnchor] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.errors) or any(r.status == "failed" for r in self.results)


Progress = Callable[[int], None]


def ingest(store: Store, inputs: list[str], opts: IngestOptions,
           progress: Callable[[Source], Progress] | None = None) -> IngestReport:
    store.init()
    report = IngestReport()
    sources, errors = expand(inputs)
    report.errors.extend(errors)
    planned: list[tuple[Source, Detection]] = []
    for src in sources:
        try:
            sample = _sample_lines(src)
            planned.append((src, detect(sample, src.display, forced=opts.fmt)))
        except SourceError as e:
            report.results.append(SourceResult(src.display, "failed", error=str(e)))
    # full-date sources first: their dates anchor the year of year-less sources of the same host
    planned.sort(key=lambda p: (_needs_year(p[1]), sources.index(p[0])))
    rules = _load_rules(opts)
    for src, det in planned:
        try:
            report.results.append(ingest_source(store, src, det, opts, rules, progress))
        except SourceError as e:
            report.results.append(SourceResult(src.display, "failed", error=str(e)))
    report.anchors = anchor_kernel_clocks(store, opts, rules)
    return report


def _needs_year(det: Detection) -> bool:
    return any(FORMATS[f].stamp.value == "syslog_noyear" for f in det.formats)


def _sample_lines(src: Source) -> pl.Series:
    data = head_bytes(src)
    cut = data.rfind(b"\n")
    if cut > 0 and len(data) >= (256 << 10):
        data = data[:cut]
    text = data.replace(b"\x00", b"").decode("utf-8", "replace").replace("\r\n", "\n")
    return pl.Series(text.split("\n")[:4000], dtype=pl.String)


def _load_rules(opts: IngestOptions):  # -> RuleSet | None
    try:
        from .match import match_records  # noqa: F401
        from .rulepacks import load_rules
    except ImportError:
        return None
    from pathlib import Path

    return load_rules([Path(d) for d in opts.rules_dirs])


def match_events(records: pl.DataFrame, rules) -> pl.DataFrame:
    if rules is None or records.height == 0:
        return empty_events()
    from .match import match_records

    return match_records(records, rules)


def fingerprint(src: Source) -> str:
    """Cheap identity of a source's bytes (size, head, tail) to find a possible no-op re-ingest."""
    h = hashlib.sha256()
    if src.real is None:
        h.update(src.stdin_data or b"")
        return h.hexdigest()
    size = src.real.stat().st_size
    h.update(str(size).encode())
    with open(src.real, "rb") as fh:
        h.update(fh.read(1 << 20))
        if size > (2 << 20):
            fh.seek(size - (1 << 20))
            h.update(fh.read())
    return h.hexdigest()


def raw_sha256(src: Source) -> str:
    h = hashlib.sha256()
    if src.real is None:
        h.update(src.stdin_data or b"")
        return h.hexdigest()
    with open(src.real, "rb") as fh:
        while chunk := fh.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def host_anchors(store: Store) -> dict[str, YearAnchor]:
    """A full date per host, from exact or zone-assumed stamps of the sources in the store."""
    out: dict[str, YearAnchor] = {}
    for e in store.sources():
        if e.host and e.last_ts and e.host not in out and (
                e.ts_sources.get(TimeSource.EXACT.value) or e.ts_sources.get(TimeSource.ZONE_ASSUMED.value)):
            out[e.host] = YearAnchor(datetime.fromisoformat(e.last_ts.replace("Z", "+00:00")),
                                     f"the dates in {e.path}")
    return out


def ingest_source(store: Store, src: Source, det: Detection, opts: IngestOptions, rules,
                  progress: Callable[[Source], Progress] | None = None) -> SourceResult:
    fp = fingerprint(src)
    same = store.find_fingerprint(fp)
    replace_ids: tuple[str, ...] = ()
    if same:
        sha = raw_sha256(src)
        hit = [e for e in same if e.sha256 == sha]
        if hit and not opts.force:
            return SourceResult(src.display, "unchanged", hit[0])
        replace_ids = tuple(e.source_id for e in hit)
    stats = ReadStats()
    sid_tmp = hashlib.sha256(f"{src.display}{fp}".encode()).hexdigest()[:16]
    ctx = ParseContext(path=src.display, tz=opts.tz, source_id=sid_tmp)
    formats = resolve(det)
    structured = formats[0] if len(formats) == 1 and isinstance(formats[0], StructuredFormat) else None
    parts: list[pl.DataFrame] = []
    carry = pl.DataFrame(schema={"line": pl.Int64, "text": pl.String})
    tick = progress(src) if progress else None
    for batch in read_batches(src, stats):
        if carry.height:
            batch = pl.concat([carry, batch])
        recs, carry = (parse_structured(structured, batch, ctx, final=False) if structured
                       else parse_lines(batch, formats, ctx, final=False))
        parts.append(normalise_batch(recs))
        if tick:
            tick(stats.bytes)
    if carry.height:
        recs, _ = (parse_structured(structured, carry, ctx, final=True) if structured
                   else parse_lines(carry, formats, ctx, final=True))
        parts.append(normalise_batch(recs))
    sha = stats.sha.hexdigest() if (stats.sha and src.compression is None) else raw_sha256(src)
    sid = sha[:16]
    recs = pl.concat(parts) if parts else pl.DataFrame(schema=RECORD_SCHEMA)
    recs = recs.with_columns(pl.lit(sid).alias("source_id"))
    if opts.host:
        recs = recs.with_columns(pl.coalesce(pl.col("host"), pl.lit(opts.host)).alias("host"))
    fix = fix_source_times(recs, opts.tz, opts.year, host_anchors(store), src.mtime)
    recs = fix.records
    if opts.boot_time is not None:
        boots = recs.filter(pl.col("ts_source") == TimeSource.MONOTONIC_ONLY.value)["boot_id"].drop_nulls()
        if boots.len():
            recs = apply_anchor(recs, boot_time_anchor([boots[-1]], opts.boot_time, opts.host), opts.host)
    events = match_events(recs, rules)
    entry = _entry(src, det, sid, sha, fp, stats, recs, events, fix.anchor, fix.reversed)
    staging = store.staging()
    try:
        write_parquet(recs, staging / "records.parquet", RECORD_SCHEMA)
        write_parquet(events, staging / "events.parquet", EVENT_SCHEMA)
        store.commit(entry, staging / "records.parquet", staging / "events.parquet", replace_ids)
    finally:
        store.cleanup(staging)
    return SourceResult(src.display, "ingested", entry)


def _unparsed(recs: pl.DataFrame, det: Detection) -> int:
    if det.primary == "text":
        return 0
    text = recs.filter(pl.col("format") == "text")
    if text.height == 0:
        return 0
    msg = text["message"]
    benign = (msg.str.strip_chars() == "") | msg.str.contains(r"^-- .* --$") | msg.str.starts_with("$ ")
    return int((~benign).sum())


def _iso(v: datetime | None) -> str | None:
    return None if v is None else v.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _entry(src: Source, det: Detection, sid: str, sha: str, fp: str, stats: ReadStats, recs: pl.DataFrame,
           events: pl.DataFrame, anchor: str, rev: bool) -> SourceEntry:
    hosts = recs["host"].drop_nulls()
    host = hosts.mode().sort()[0] if hosts.len() else None
    ts = recs["ts"].drop_nulls()
    counts = recs.group_by("ts_source").len().sort("ts_source")
    notes = []
    if stats.invalid_utf8:
        notes.append(f"{stats.invalid_utf8} line(s) held invalid UTF-8 (decoded with U+FFFD)")
    if stats.nul_bytes:
        notes.append(f"{stats.nul_bytes} NUL byte(s) replaced with U+FFFD")
    if stats.crlf:
        notes.append(f"{stats.crlf} line(s) ended in CRLF")
    size = src.real.stat().st_size if src.real else len(src.stdin_data or b"")
    return SourceEntry(
        source_id=sid, path=src.display, sha256=sha, size=size, format=det.primary, formats=list(det.formats),
        confidence=det.confidence, host=host, records=recs.height, lines=stats.lines,
        unparsed=_unparsed(recs, det), invalid_utf8=stats.invalid_utf8,
        first_ts=_iso(ts.min()) if ts.len() else None, last_ts=_iso(ts.max()) if ts.len() else None,
        time_anchor=anchor, ts_sources=dict(zip(counts["ts_source"].to_list(), counts["len"].to_list())),
        events=events.height, tool_version=__version__, fingerprint=fp, reversed=rev, notes=notes,
    )


def anchor_kernel_clocks(store: Store, opts: IngestOptions, rules) -> list[BootAnchor]:
    """Pair monotonic-only kernel records with wall-timed kernel records; rewrite the sources anchored."""
    mono_sources = [e for e in store.sources() if e.ts_sources.get(TimeSource.MONOTONIC_ONLY.value)]
    if not mono_sources:
        return []
    walled = (store.records()
              .filter(pl.col("ident") == "kernel", pl.col("ts").is_not_null(),
                      pl.col("ts_source") != TimeSource.BOOT_ANCHORED.value)
              .select("ts", "message", "host").collect())
    if walled.height == 0:
        return []
    found: list[BootAnchor] = []
    for e in mono_sources:
        recs = store.records([e.source_id]).collect()
        mono = recs.filter(pl.col("ts_source") == TimeSource.MONOTONIC_ONLY.value).select(
            "boot_id", "mono", "message", "host")
        anchors = {a.boot_id: a for a in find_anchors(mono, walled)}
        if not anchors:
            continue
        found.extend(anchors.values())
        recs = apply_anchor(recs, anchors, opts.host)
        events = match_events(recs, rules)
        ts = recs["ts"].drop_nulls()
        counts = recs.group_by("ts_source").len().sort("ts_source")
        hosts = recs["host"].drop_nulls()
        how = "; ".join(sorted({a.how for a in anchors.values()}))
        left = recs.filter(pl.col("ts_source") == TimeSource.MONOTONIC_ONLY.value).height
        entry = replace(e, first_ts=_iso(ts.min()) if ts.len() else None, last_ts=_iso(ts.max()) if ts.len() else None,
                        ts_sources=dict(zip(counts["ts_source"].to_list(), counts["len"].to_list())),
                        time_anchor=how + (f"; {left} record(s) of other boots still monotonic only" if left else ""),
                        host=hosts.mode().sort()[0] if hosts.len() else e.host, events=events.height)
        staging = store.staging()
        try:
            write_parquet(recs, staging / "r.parquet", RECORD_SCHEMA)
            write_parquet(events, staging / "e.parquet", EVENT_SCHEMA)
            store.update(entry, staging / "r.parquet", staging / "e.parquet")
        finally:
            store.cleanup(staging)
    return found


def rescan(store: Store, opts: IngestOptions) -> int:
    """Re-apply the rule packs to every stored source; returns the number of events."""
    rules = _load_rules(opts)
    total = 0
    for e in store.sources():
        recs = store.records([e.source_id]).collect()
        events = match_events(recs, rules)
        staging = store.staging()
        try:
            write_parquet(events, staging / "e.parquet", EVENT_SCHEMA)
            store.update(replace(e, events=events.height), None, staging / "e.parquet")
        finally:
            store.cleanup(staging)
        total += events.height
    return total


__all__ = ["ingest", "rescan", "IngestOptions", "IngestReport", "SourceResult", "JOURNAL_ALL", "open_binary"]
