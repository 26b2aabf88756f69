"""A span of stored records read a window at a time, each Parquet row group decoded once.

A timeline of a day is read in windows of an hour (memory holds a window, not the day). Reading each window
with its own filtered scan decodes every row group that overlaps it, and a row group of 65,536 records spans
about an hour of a busy file: on a store of ten million records a day's 24 windows decoded 13.6 M rows to
return 4.2 M. Here each row group is read once, when the first window it overlaps comes; its records of later
windows wait in memory for theirs (a row group or so per file).

Which row groups overlap a window is read from the files' footers (the `ts` column's min and max, which the
store writes); a row group without them is read with the first window. The caller asks for the windows in
order: each one starts where the last ended.

A timeline without bounds ends with the records that have no time, in (path, line) order: `untimed_reads` reads
them a few row groups at a time, file after file in path order (each records file holds one path, in line
order), instead of all at once (a store's dmesg files are untimed until anchored: a million records).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl

ORDER = ("ts", "path", "line")  # a timeline's order: time, then where in which file
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_MICROSECOND = timedelta(microseconds=1)
_UNBOUNDED = (-(2**63), 2**63 - 1)


def micros(t: datetime) -> int:
    """Microseconds since the epoch (an aware datetime)."""
    return (t - _EPOCH) // _ONE_MICROSECOND


@dataclass(frozen=True)
class Group:
    """One row group: its first row in the file, its rows, the span of its times in microseconds (None: no time
    in it at all), how many of its rows have no time (None: unknown), and the one path of its rows (None: not
    known to be one)."""

    first: int
    rows: int
    span: tuple[int, int] | None
    untimed: int | None = None
    path: str | None = None


def groups(path: Path) -> list[Group]:
    """The row groups of a records file, from its footer. A group whose `ts` statistics are missing or in a unit
    other than microseconds is given an unbounded span (it is read with the first window)."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    at = names.index("ts") if "ts" in names else None
    at_path = names.index("path") if "path" in names else None
    micro = at is not None and "MICROS" in str(meta.schema.column(at).logical_type).upper()
    out, first = [], 0
    for k in range(meta.num_row_groups):
        rg = meta.row_group(k)
        stats = rg.column(at).statistics if at is not None else None
        if stats is not None and stats.null_count == rg.num_rows:
            span = None
        elif micro and stats is not None and stats.has_min_max:
            span = (int(stats.min_raw), int(stats.max_raw))
        else:
            span = _UNBOUNDED
        untimed = stats.null_count if stats is not None and stats.has_null_count else None
        out.append(Group(first, rg.num_rows, span, untimed, _one_value(rg.column(at_path).statistics)
                         if at_path is not None else None))
        first += rg.num_rows
    return out


def _one_value(stats) -> str | None:  # noqa: ANN001 - pyarrow's column statistics, or None
    """The value of every row of a string column chunk, when its statistics say there is one (no null)."""
    if stats is None or not stats.has_min_max or not stats.has_null_count or stats.null_count:
        return None
    lo, hi = stats.min, stats.max
    return lo if isinstance(lo, str) and lo == hi else None


UNTIMED_ROWS = 262_144  # rows of row groups read at a time for the untimed end of a timeline


def untimed_reads(paths: Sequence[Path], keep: pl.Expr | None,
                  columns: Sequence[str]) -> list[Callable[[], pl.DataFrame]] | None:
    """The records without a time of the files `paths`, in (path, line) order, as reads of a few row groups each
    (memory holds one read, not every untimed record: a store's dmesg files are untimed until anchored). Each
    records file holds one path, in line order; when the footers do not show that every file has one path, and
    a path of its own, None (the caller reads them all at once and sorts them)."""
    files = []
    for p in paths:
        gs = groups(p)
        if not gs:  # no records at all
            continue
        names = {g.path for g in gs}
        if len(names) != 1 or None in names:
            return None
        files.append((names.pop(), p, gs))
    if len({name for name, _, _ in files}) != len(files):
        return None
    cond = pl.col("ts").is_null() if keep is None else pl.col("ts").is_null() & keep
    reads: list[Callable[[], pl.DataFrame]] = []
    for _, p, gs in sorted(files, key=lambda f: f[0]):
        scan = pl.scan_parquet(str(p))
        for first, rows in _joined([g for g in gs if g.untimed is None or g.untimed > 0], UNTIMED_ROWS):
            reads.append(scan.slice(first, rows).filter(cond).select(list(columns)).collect)
    return reads


def _joined(gs: Sequence[Group], most: int | None = None) -> list[tuple[int, int]]:
    """Row groups (in file order) as runs of consecutive ones, (first row, rows), each of at most `most` rows
    (None: no bound) unless one group alone holds more."""
    runs: list[tuple[int, int]] = []
    for g in gs:
        if runs and runs[-1][0] + runs[-1][1] == g.first and (most is None or runs[-1][1] + g.rows <= most):
            runs[-1] = (runs[-1][0], runs[-1][1] + g.rows)
        else:
            runs.append((g.first, g.rows))
    return runs


@dataclass
class _File:
    path: Path
    groups: list[Group]
    unread: list[bool]
    scan: pl.LazyFrame  # one scan per file: the plans of every window share what polars read of its footer


class WindowReader:
    """Reads `windows` (contiguous, in order) of `paths` one after the other: `read(k)` returns the records of
    window k that pass `keep` (an expression over the records), `columns` of them, in ORDER. Rows read for a
    later window are set aside for it when they are read (each row is looked at once)."""

    def __init__(self, paths: Sequence[Path], windows: Sequence[tuple[datetime, datetime]], keep: pl.Expr | None,
                 columns: Sequence[str]):
        self._files = [_File(p, gs, [True] * len(gs), pl.scan_parquet(str(p))) for p in paths for gs in [groups(p)]]
        self._windows = list(windows)
        self._starts = pl.Series([micros(a) for a, _ in windows], dtype=pl.Int64)
        ts = pl.col("ts")
        span = (ts >= windows[0][0]) & (ts < windows[-1][1]) if windows else pl.lit(False)
        self._in_span = span if keep is None else span & keep
        self._columns = list(columns)
        self._due: dict[int, list[pl.DataFrame]] = {}  # window -> rows read for it ahead of time
        self._next = 0

    def read(self, k: int) -> pl.DataFrame:
        """Window k's records, in order (k is the window after the one read last)."""
        if k != self._next:
            raise ValueError(f"window {k} asked for after window {self._next - 1}: windows are read in order")
        self._next += 1
        a, b = self._windows[k]
        lo, hi = micros(a), micros(b)
        plans = [f.scan.slice(first, rows).filter(self._in_span).select(with_order(self._columns))
                 for f in self._files for first, rows in _runs(f, lo, hi)]
        parts = self._due.pop(k, [])
        for df in pl.collect_all(plans) if plans else []:
            for j, part in self._cut(df, k):
                (parts if j == k else self._due.setdefault(j, [])).append(part)
        if not parts:
            return pl.DataFrame(schema=self._schema())
        return in_order(parts, self._columns)

    def _cut(self, df: pl.DataFrame, k: int) -> list[tuple[int, pl.DataFrame]]:
        """`df` (rows read now, while window k is read) cut into the windows its rows belong to: slices where its
        times are in order, as a log's mostly are."""
        if df.height == 0:
            return []
        us = df.get_column("ts").dt.epoch("us")
        if k + 1 == len(self._starts) or us.max() < self._starts[k + 1]:
            return [(k, df)]
        if us.is_sorted():
            edges = [0, *us.search_sorted(self._starts[k + 1:], "left").to_list(), df.height]
            return [(j, df.slice(s, e - s)) for j, (s, e) in enumerate(zip(edges, edges[1:]), start=k) if e > s]
        at = (self._starts.search_sorted(us, "right") - 1).clip(k)
        return [(j, part.drop("_window")) for (j,), part in
                df.with_columns(at.alias("_window")).partition_by("_window", as_dict=True).items()]

    def _schema(self) -> dict[str, pl.DataType]:
        from .schema import RECORD_SCHEMA

        return {c: RECORD_SCHEMA[c] for c in self._columns}


def with_order(columns: Sequence[str]) -> list[str]:
    """`columns` and the order's columns, which a read needs to sort."""
    return [*columns, *(c for c in ORDER if c not in columns)]


def in_order(parts: Sequence[pl.DataFrame], columns: Sequence[str] | None = None) -> pl.DataFrame:
    """The rows of `parts` in ORDER (untimed last), `columns` of them (None: all). Parts read from files each hold
    one path, in line order, and two parts of a path do not overlap: put in (path, line) order, their rows need
    only a stable sort by time (one integer key, three times faster than the three keys with the paths' text);
    other parts are sorted by the three. Sorting the keys and gathering the rows of one contiguous frame is several
    times faster than sorting a frame of many row-group chunks."""
    ordered = _by_path_and_line(parts)
    if ordered is None:
        df = pl.concat(parts, how="vertical").rechunk()
        df = df[df.select(pl.arg_sort_by(list(ORDER), nulls_last=True)).to_series()]
    else:
        df = (pl.concat(ordered, how="vertical") if len(ordered) > 1 else ordered[0]).rechunk()
        df = df[df.select(pl.arg_sort_by("ts", nulls_last=True, maintain_order=True)).to_series()]
    return df if columns is None or list(columns) == df.columns else df.select(columns)


def _by_path_and_line(parts: Sequence[pl.DataFrame]) -> list[pl.DataFrame] | None:
    """`parts` in (path, line) order, when each holds one path with its lines ascending and the line spans of a
    path's parts do not overlap; else None."""
    spans = []
    for p in parts:
        if p.height == 0:
            continue
        path, line = p.get_column("path"), p.get_column("line")
        if path.null_count() or line.null_count() or not (path == path[0]).all() or not line.is_sorted():
            return None
        spans.append((path[0], line[0], line[-1], p))
    spans.sort(key=lambda s: (s[0], s[1]))
    if any(a[0] == b[0] and b[1] <= a[2] for a, b in zip(spans, spans[1:])):
        return None
    return [s[3] for s in spans] or list(parts[:1])


def _runs(f: _File, lo: int, hi: int) -> list[tuple[int, int]]:
    """The unread row groups of `f` that overlap [lo, hi) (microseconds), marked read, as runs of consecutive
    groups: (first row, rows)."""
    due = []
    for k, g in enumerate(f.groups):
        if not f.unread[k] or g.span is None or g.span[1] < lo or g.span[0] >= hi:
            continue
        f.unread[k] = False
        due.append(g)
    return _joined(due)
