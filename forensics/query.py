"""Read-side queries over the store: the merged timeline, with predicate pushdown into the Parquet scans."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

import polars as pl

from . import profile
from .globs import globs_expr
from .record_tables import host_fills, log_class, of_store, unit_fills
from .rowgroups import WindowReader, in_order, untimed_reads, with_order
from .schema import RECORD_SCHEMA, empty_events, empty_records
from .store import SourceEntry, Store, scan_files


def _filtered(store: Store, since: datetime | None, until: datetime | None, keep: pl.Expr | None,
              entries: list[SourceEntry] | None = None, columns: Sequence[str] | None = None) -> pl.LazyFrame:
    """The records of [since, until) that pass `keep` (`_keep`), from the sources of `entries` (one reading of the
    manifest, so that every window of a stream reads the same sources: a source landing meanwhile is in all of
    them or in none), or of the manifest read now; only `columns` of them when given (the others are not read)."""
    lf = scan_files(_files(store, since, until, entries), empty_records())
    if since is not None:
        lf = lf.filter(pl.col("ts") >= since)
    if until is not None:
        lf = lf.filter(pl.col("ts") < until)
    if keep is not None:
        lf = lf.filter(keep)
    return lf if columns is None else lf.select(columns)


def _files(store: Store, since: datetime | None, until: datetime | None,
           entries: list[SourceEntry] | None) -> list[Path]:
    """The records files of the sources (`entries`, or the manifest's now) that may hold a time in [since, until)."""
    entries = store.sources() if entries is None else entries
    chosen = _overlapping(entries, since, until) if since or until else entries
    return [store.file("records", e.source_id, e.records_name) for e in chosen]


_UNIT_TYPES = ("service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope")


def name_filter(col: str | pl.Expr, values: Sequence[str], unit: bool = False, host: bool = False) -> pl.Expr:
    """True where `col` (a column's name, or an expression) is one of `values`, each a name or a glob (`*`, `?`);
    with `unit`, a name without a unit type suffix is also that `.service` (`sglang-k26`, as `journalctl -u` and
    `systemctl` read it). With `host`, a glob of only `*` is every line, those naming no host too: every line was
    written on some host, while not every line was written by a unit (`--unit '*'` keeps those of a unit)."""
    names = [n for v in values
             for n in ([v, f"{v}.service"] if unit and v.rsplit(".", 1)[-1] not in _UNIT_TYPES else [v])]
    return globs_expr(col, names).fill_null(host and any(v and set(v) == {"*"} for v in values))


def name_columns(store: Store, events: bool = False) -> tuple[pl.Expr, pl.Expr]:
    """(host, unit) as `--host` and `--unit` read them, for the records (or, with `events`, the events): a line
    that names none is the host and the unit the incidents take it to be (record_tables.HostFills, UnitFills):
    the store's one host, or the one its file names on other lines; the unit of a `journalctl -u` journal or of
    a file named after it, so that `--unit sglang-k26` shows what `journalctl -u sglang-k26` would, the python3
    lines of its journal included (never the kernel's). The record tables and the events' names are read once
    for both."""
    tables = of_store(store)
    named = scan_files(store.files_of("events"), empty_events()).select(
        *(pl.col(c).drop_nulls().unique().implode() for c in ("host", "unit"))).collect()
    hosts = host_fills(tables, [*named["host"][0], *(e.host for e in store.sources() if e.host)]).filled()
    fills = unit_fills(tables, named["unit"][0])
    if not fills.journal and not fills.file:
        return hosts, pl.col("unit")
    if events:
        from .eventview import KERNEL_KINDS

        return hosts, fills.filled(pl.col("unit").is_null() & ~pl.col("kind").is_in(sorted(KERNEL_KINDS)))
    return hosts, fills.filled(pl.col("unit").is_null() & (log_class() == "service"))


def _keep(host: str | None, unit: str | None, pattern: str | None,
          names: tuple[pl.Expr, pl.Expr] | None = None) -> pl.Expr | None:
    """The filters other than time, as one expression (None: none); `names`: `name_columns`, what `host` and
    `unit` are tested against (the columns when not given)."""
    hosts, units = names if names is not None else (pl.col("host"), pl.col("unit"))
    keep = [name_filter(hosts, [host], host=True)] if host else []
    keep += [name_filter(units, [unit], unit=True)] if unit else []
    keep += [pl.col("message").str.contains(pattern)] if pattern else []
    return pl.all_horizontal(keep) if keep else None


def timeline_frame(store: Store, since: datetime | None = None, until: datetime | None = None,
                   host: str | None = None, unit: str | None = None, pattern: str | None = None,
                   untimed: bool = False, entries: list[SourceEntry] | None = None,
                   columns: Sequence[str] | None = None) -> pl.DataFrame:
    """Records in time order (untimed records last, in file order), filtered. `untimed`: only those without
    a time (the end of a timeline without bounds); `entries`, `columns`: as `_filtered` takes them."""
    keep = _keep(host, unit, pattern, name_columns(store) if host or unit else None)
    lf = _filtered(store, since, until, keep, entries,
                   None if columns is None else with_order(columns))
    if untimed:
        lf = lf.filter(pl.col("ts").is_null())
    return in_order([lf.collect()], columns)


WINDOW = timedelta(hours=1)      # a long timeline is read this much at a time ...
MAX_WINDOWS = 48                 # ... or in this many windows, when that is longer


@dataclass(frozen=True)
class TimelineStream:
    """A timeline read a window at a time: `frames` (in order; their concatenation is `timeline_frame` of the
    whole span). `widths()` reads what a table needs to know first: how many records, the longest host and
    ident (one more pass over the span, only when asked for)."""

    frames: Iterator[pl.DataFrame]
    _whole: pl.LazyFrame
    _store: Store | None = None
    _entries: tuple[SourceEntry, ...] = ()

    def names(self) -> pl.DataFrame | None:
        """Every (host, ident, unit, path) the frames may hold, distinct: the kept profiles of their sources
        (None when one is not kept: the frames' own are then all there is)."""
        if self._store is None:
            return None
        groups = []
        for e in self._entries:
            g = profile.kept_groups(self._store, e.source_id)
            if g is None:
                return None
            groups.append(g.select("host", "ident", "unit", "path"))
        return pl.concat(groups, how="vertical_relaxed") if groups else None

    def widths(self) -> tuple[int, int | None, int | None]:
        """(records, longest host, longest ident) of the whole span."""
        stats = self._whole.select(
            pl.len().alias("n"), *(pl.col(c).cast(pl.String).str.len_chars().max().alias(c) for c in ("host", "ident"))
        ).collect()
        n, h, i = stats.row(0)
        return int(n), None if h is None else int(h), None if i is None else int(i)


def timeline_windows(since: datetime, until: datetime) -> list[tuple[datetime, datetime]]:
    """[since, until) cut into windows of WINDOW, or into MAX_WINDOWS equal ones when that is longer."""
    if until <= since:
        return []
    step = max(WINDOW, (until - since) / MAX_WINDOWS)
    out, t = [], since
    while t < until:
        out.append((t, min(t + step, until)))
        t = out[-1][1]
    return out


def timeline_stream(store: Store, since: datetime | None = None, until: datetime | None = None,
                    host: str | None = None, unit: str | None = None, pattern: str | None = None,
                    columns: Sequence[str] | None = None,
                    prepare: Callable[[pl.DataFrame], pl.DataFrame] | None = None) -> TimelineStream:
    """The timeline of [since, until) a window at a time: records are ordered by time first, so each window's
    records, in order, follow the previous window's (memory holds two windows, the one written and the next
    being read, and the rows of row groups read for windows to come: `rowgroups.WindowReader`; the first rows
    come at once). A bound not given is the first or last time of the records
    (read from the store); with neither, the records without a time follow, as `timeline_frame` puts them.
    The manifest is read once: every window, the span and the widths read the same sources and files (a
    replaced file stays on disk for the manifest's grace period, store.SUPERSEDED_GRACE). `columns`: only these
    are read into the frames (a table needs 7 of the 18); `prepare`: applied to each frame where it is read, in
    the reading thread (work taken off the thread that writes)."""
    entries = store.sources()
    names = name_columns(store) if host or unit else None
    keep = _keep(host, unit, pattern, names)
    whole = _filtered(store, since, until, keep, entries)
    lo, hi = since, until
    if lo is None or hi is None:
        span = _filtered(store, since, until, _keep(host, unit, None, names), entries).select(
            pl.col("ts").min().alias("lo"), pl.col("ts").max().alias("hi")).collect()
        first, last = span.row(0)
        lo = first if lo is None else lo
        hi = (last + timedelta(microseconds=1) if last is not None else None) if hi is None else hi

    def frames() -> Iterator[pl.DataFrame]:
        windows = timeline_windows(lo, hi) if lo is not None and hi is not None else []
        read_columns = columns or list(RECORD_SCHEMA)
        reads: list[Callable[[], pl.DataFrame]] = []
        if windows:  # each row group is decoded once, by the first window it overlaps
            reader = WindowReader(_files(store, lo, hi, entries), windows, keep, read_columns)
            reads += [partial(reader.read, k) for k in range(len(windows))]
        if since is None and until is None:  # the records without a time, a few row groups at a time
            untimed = untimed_reads(_files(store, None, None, entries), keep, read_columns)
            reads += untimed if untimed is not None else [partial(
                timeline_frame, store, None, None, host, unit, pattern, untimed=True, entries=entries, columns=columns)]
        if prepare is not None:
            reads = [partial(_prepared, read, prepare) for read in reads]
        # the next window is read while this one is written (polars reads without holding the interpreter); the
        # reads run one after the other, in order, as the reader needs
        with ThreadPoolExecutor(1, thread_name_prefix="timeline") as pool:
            ahead: Future | None = None
            for k, read in enumerate(reads):
                now = ahead.result() if ahead is not None else read()
                ahead = pool.submit(reads[k + 1]) if k + 1 < len(reads) else None
                yield now

    read = entries if since is None and until is None else _overlapping(entries, lo, hi)  # the sources read
    return TimelineStream(frames=frames(), _whole=whole, _store=store, _entries=tuple(read))


def _prepared(read: Callable[[], pl.DataFrame], prepare: Callable[[pl.DataFrame], pl.DataFrame]) -> pl.DataFrame:
    return prepare(read())


def _overlapping(entries: list[SourceEntry], since: datetime | None, until: datetime | None) -> list[SourceEntry]:
    """The sources whose span (in the manifest) meets [since, until): the others are not even opened."""
    keep = []
    for e in entries:
        first, last = _when(e.first_ts), _when(e.last_ts)
        if first is None or last is None:
            if e.first_ts is not None or e.last_ts is not None:  # a span we cannot read: scan it
                keep.append(e)
            continue  # no timed record at all: none passes a time filter
        if (since is None or last >= since) and (until is None or first < until):
            keep.append(e)
    return keep


def _when(iso: str | None) -> datetime | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:  # beyond Python's datetime range
        return None
