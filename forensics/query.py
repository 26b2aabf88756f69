"""Read-side queries over the store: the merged timeline, with predicate pushdown into the Parquet scans."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from .store import Store


def timeline_frame(store: Store, since: datetime | None = None, until: datetime | None = None,
                   host: str | None = None, unit: str | None = None, pattern: str | None = None) -> pl.DataFrame:
    """Records in time order (untimed records last, in file order), filtered."""
    lf = store.records(_overlapping(store, since, until) if since or until else None)
    if since is not None:
        lf = lf.filter(pl.col("ts") >= since)
    if until is not None:
        lf = lf.filter(pl.col("ts") < until)
    if host:
        lf = lf.filter(pl.col("host") == host)
    if unit:
        lf = lf.filter(pl.col("unit") == unit)
    if pattern:
        lf = lf.filter(pl.col("message").str.contains(pattern))
    # sorting the keys and gathering the rows of one contiguous frame is several times faster than sorting the
    # frame of many row-group chunks that the scan returns
    df = lf.collect().rechunk()
    return df[df.select(pl.arg_sort_by(["ts", "path", "line"], nulls_last=True)).to_series()]


def _overlapping(store: Store, since: datetime | None, until: datetime | None) -> list[str]:
    """The sources whose span (in the manifest) meets [since, until): the others are not even opened."""
    keep = []
    for e in store.sources():
        first, last = _when(e.first_ts), _when(e.last_ts)
        if first is None or last is None:
            if e.first_ts is not None or e.last_ts is not None:  # a span we cannot read: scan it
                keep.append(e.source_id)
            continue  # no timed record at all: none passes a time filter
        if (since is None or last >= since) and (until is None or first < until):
            keep.append(e.source_id)
    return keep


def _when(iso: str | None) -> datetime | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:  # beyond Python's datetime range
        return None
