"""Format `systemctl-status`: the output of `systemctl status UNIT` (header block, then journal lines).

The header's `Active: failed (Result: signal) since Sun 2025-05-25 20:17:19 UTC; 14min ago` gives that
record an exact time and dates the year-less journal lines printed under it. `Process:`/`Main PID:` lines
carry the command line and how the process ended. The journal lines below the header are parsed by the
journal format of the same file.
"""

from __future__ import annotations

import polars as pl

from ..timeparse import stamp_exprs
from .base import Continuation, HookedFormat, PostContext, Stamp

KEYS = ("Loaded|Active|Process|Main PID|Tasks|Memory|CPU|CGroup|Docs|Drop-In|Status|TriggeredBy|Triggers|"
        "Invocation|IP|IO|Mem peak|Swap peak|Notify|Listen|Trigger|Condition|Assert|Accepted|Connected|Where|What")
SINCE = (r"since (?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<date>\d{4}-\d{2}-\d{2}) (?P<time>\d{2}:\d{2}:\d{2}(?:\.\d+)?)"
         r" (?P<zone>[A-Za-z][A-Za-z0-9+\-/_]*)")


class SystemctlStatus(HookedFormat):
    def post(self, df: pl.DataFrame, ctx: PostContext) -> pl.DataFrame:
        header_unit = pl.when(pl.col("hunit").is_not_null()).then(pl.col("hunit"))
        since = df.select(pl.col("text").str.extract_groups(SINCE).struct.unnest())
        ts, _, _ = stamp_exprs(Stamp.FULL, set(since.columns), ctx.tz)
        stamped = since.select(ts.alias("_ts"), pl.col("date").is_not_null().alias("_has"),
                               pl.col("zone").is_in(["UTC", "GMT", "Z"]).alias("_utc"))
        return df.with_columns(stamped).with_columns(
            header_unit.forward_fill().alias("unit"),
            pl.col("text").str.strip_chars().alias("msg"),
            pl.when(pl.col("_has")).then(pl.col("_ts")).otherwise(pl.col("ts")).alias("ts"),
            pl.when(pl.col("_has")).then(pl.lit("exact")).otherwise(pl.col("ts_source")).alias("ts_source"),
            pl.when(pl.col("_has")).then(pl.col("text").str.extract(r"since (.+?);", 1)).otherwise(pl.col("ts_text"))
            .alias("ts_text"),
        ).drop("_ts", "_has", "_utc")


FORMAT = SystemctlStatus(
    name="systemctl-status",
    description="`systemctl status UNIT`: the unit header (`Loaded:`, `Active: ... since ...`, `Process:`, "
                "`Main PID: N (code=killed, signal=KILL)`, `CGroup:` tree), then its journal lines",
    pattern=(r"^(?P<msg>(?P<marker>[\x{25CF}\x{00D7}\x{25CB}\x{21BB}*]) (?P<hunit>[^\s]+\.(?:service|socket|timer|mount|"
             r"target|path|slice|scope|swap|device|automount))(?: - (?P<desc>.*))?|\s+(?P<key>" + KEYS +
             r"): (?P<value>.*))$"),
    stamp=Stamp.NONE,
    continuation=Continuation.INDENTED,
    priority=5,
    example="     Main PID: 48213 (code=killed, signal=KILL)",
)
