"""Read-side queries over the store: the merged timeline, with predicate pushdown into the Parquet scans."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from .store import Store


def timeline_frame(store: Store, since: datetime | None = None, until: datetime | None = None,
                   host: str | None = None, unit: str | None = None, pattern: str | None = None) -> pl.DataFrame:
    """Records in time order (untimed records last, in file order), filtered."""
    lf = store.records()
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
    return lf.sort(["ts", "path", "line"], nulls_last=True).collect()
