"""Format `dmesg-reltime`: dmesg -e (`--reltime`), which `dmesg -H` (`--human`) prints too.

A record whose local time is in a new minute gets that minute, `[May25 20:17] ` (`%b%e %H:%M`: `[May 5 08:01] `
for a one-digit day); the others get the seconds since the record before, `[  +0.000123] ` (`[ %+9.6f] ` from
10 s) (util-linux sys-utils/dmesg.c, `DMESG_TIMEFTM_RELTIME`). So a record's time is its run's minute, plus the
seconds of that minute the first record was printed at, which dmesg does not show, plus the deltas since then.
Those unknown seconds are taken as 0: every time of a run is at most 60 s early (a run never leaves its minute,
so the first record of the next minute comes after it). The year is inferred as for other year-less stamps and
the zone assumed (`--tz`), both marked. Lines without a prefix go on the record before (a multi-line record);
records before the file's first minute stamp have no time.
"""

from __future__ import annotations

import polars as pl

from ..schema import TimeSource
from ..timeparse import MONTHS, stamp_columns
from .base import Continuation, PostContext, Stamp, StructuredFormat, hold_back, no_records, with_text_records

MINUTE = rf"^\[(?P<mon>{'|'.join(MONTHS)}) ?(?P<day>\d{{1,2}}) (?P<hm>\d{{2}}:\d{{2}})\] ?(?P<msg>.*)$"
DELTA = r"^\[ *(?P<delta>[-+]\d+\.\d{6})\] ?(?P<msg>.*)$"
NOTE = ("dmesg -e/-H prints the minute and the seconds since the record before, not the second of each minute's "
        "first record: taken as :00, so times are up to 60 s early")


class DmesgReltime(StructuredFormat):
    def detect_score(self, lines: pl.Series) -> float:
        head = lines.head(400)
        nonblank = head.filter(head.str.strip_chars() != "")
        minutes = nonblank.str.contains(MINUTE)
        if nonblank.len() == 0 or not minutes.any():
            return 0.0
        return float((minutes | nonblank.str.contains(DELTA)).sum()) / nonblank.len()

    def parse_batch(self, lines: pl.DataFrame, ctx: PostContext, final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Whole runs (a minute stamp and the records after it) become records; from the batch's last minute stamp
        on, the lines wait for the next batch, whose first run they begin."""
        text = pl.col("text")
        marked = lines.with_columns(text.str.contains(MINUTE).fill_null(False).alias("_m"),
                                    text.str.contains(DELTA).fill_null(False).alias("_d"))
        marked, carry = hold_back(marked, lines, "_m", final)
        if marked is None or marked.height == 0:
            return no_records(), carry
        marked = marked.with_columns((pl.col("_m") | pl.col("_d")).cum_sum().alias("_rec"),
                                     pl.col("_m").cum_sum().alias("_run"))
        body = marked.filter(pl.col("_rec") > 0)
        before = marked.filter(pl.col("_rec") == 0)   # lines before the first record: not dmesg's
        return with_text_records(self._records(body, ctx) if body.height else None, before), carry

    def _records(self, body: pl.DataFrame, ctx: PostContext) -> pl.DataFrame:
        heads = (body.group_by("_rec", maintain_order=True)
                 .agg(pl.col("line").first(), pl.col("line").max().alias("line_end"), pl.col("_run").first(),
                      pl.col("text").first().alias("_text"), pl.col("text").slice(1).alias("_more")))
        parts = heads.with_columns(pl.col("_text").str.extract_groups(MINUTE).alias("_g")).unnest("_g")
        delta = pl.col("_text").str.extract_groups(DELTA)
        parts = parts.with_columns(delta.struct.field("delta").cast(pl.Float64, strict=False).alias("delta"),
                                   pl.concat_list(pl.coalesce(pl.col("msg"), delta.struct.field("msg")), pl.col("_more"))
                                   .list.join("\n").alias("message"))
        # the run's minute, then the deltas since the run's first record (each delta is since the record before)
        minute = parts.select(pl.col("mon"), pl.col("day"), (pl.col("hm") + ":00").alias("time"))
        base = stamp_columns(Stamp.SYSLOG_NOYEAR, minute, ctx.tz)
        parts = parts.with_columns(base.get_column("ts").alias("_base"), base.get_column("ts_source").alias("_src"))
        since = pl.col("delta").fill_null(0.0).cum_sum().over("_run")
        ts = pl.col("_base").forward_fill().over("_run") + pl.duration(microseconds=(since * 1e6).round(0).cast(pl.Int64))
        timed = pl.col("_run") > 0
        return parts.select(
            pl.when(timed).then(ts).otherwise(None).alias("ts"),
            pl.when(timed).then(pl.col("_src").forward_fill().over("_run")).otherwise(pl.lit(TimeSource.NONE.value))
            .alias("ts_source"),
            pl.col("_text").str.extract(r"^(\[[^\]]*\])", 1).alias("ts_text"),
            pl.when(timed).then(pl.lit(NOTE)).alias("ts_anchor"),
            pl.lit("kernel").alias("ident"), "message", "line", "line_end", pl.lit(self.name).alias("format"))


FORMAT = DmesgReltime(
    name="dmesg-reltime",
    description="dmesg -e / dmesg -H: `[May25 20:17] ` when the minute changes, else `[  +0.000123] ` since the record "
                "before; times to the minute (the seconds of each minute's first record are not printed)",
    pattern=MINUTE,
    stamp=Stamp.SYSLOG_NOYEAR,
    continuation=Continuation.INDENTED,
    priority=26,
    defaults={"ident": "kernel"},
    example="[May25 20:17] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n"
            "[  +0.000123] Memory cgroup out of memory: Killed process 48213 (python3) total-vm:1kB, anon-rss:1kB",
)
