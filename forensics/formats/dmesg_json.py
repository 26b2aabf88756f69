"""Format `dmesg-json`: dmesg -J (`--json`, util-linux 2.38+): the ring buffer as one JSON document.

`{"dmesg": [...]}` printed three spaces an indent, one member per line, each record an object opened by `{` (the
first) or `},{` (the others): `"pri": 6` (facility<<3|level; with `-x`, `"fac": "kern"` and `"pri": "err"`),
`"time":  8123.456801` (seconds since boot, the raw `%5ld.%06ld` text, unquoted), `"caller": "T48213"` (a kernel
with CONFIG_PRINTK_CALLER) and `"msg": "..."` (a JSON string: a multi-line record's lines joined by `\\n`). The
records are raw dmesg's: seconds since boot, anchored as any dmesg is (`--boot-time`, or paired with a journal).
A line that is no member of a record (the document's own brackets) is part of no record and is not counted as
unparsed; anything else is a `text` record of its own.
"""

from __future__ import annotations

import polars as pl

from ..schema import TimeSource
from .base import Continuation, PostContext, Stamp, StructuredFormat, hold_back, no_records, with_text_records

OPEN = r"^\s*(?:\},\s*)?\{$"                      # a record opens: `{`, or `},{` after the one before
MEMBER = r'^\s*"(?P<key>pri|fac|time|caller|msg)"\s*:\s*(?P<value>.*?),?$'
FRAME = r'^\s*(?:\{|\}|\]|\},?|"dmesg"\s*:\s*\[)$'  # the document's own brackets
LEVELS = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")
_LEVEL_NAMES = {"warn": "warning"}


class DmesgJson(StructuredFormat):
    def detect_score(self, lines: pl.Series) -> float:
        head = lines.head(40)
        return 1.0 if head.str.contains(r'^\s*"dmesg"\s*:\s*\[$').any() and head.str.contains(MEMBER).any() else 0.0

    def parse_batch(self, lines: pl.DataFrame, ctx: PostContext, final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Whole records become records; from the batch's last opening on, the lines wait for the next batch."""
        text = pl.col("text")
        marked = lines.with_columns(text.str.contains(OPEN).fill_null(False).alias("_open"),
                                    text.str.contains(MEMBER).fill_null(False).alias("_member"))
        marked, carry = hold_back(marked, lines, "_open", final)
        if marked is None or marked.height == 0:
            return no_records(), carry
        marked = marked.with_columns(pl.col("_open").cum_sum().alias("_obj"))
        members = marked.filter(pl.col("_member") & (pl.col("_obj") > 0))
        others = marked.filter(~pl.col("_member") & ~pl.col("_open") & ~text.str.contains(FRAME).fill_null(False))
        return with_text_records(self._records(members, marked) if members.height else None, others), carry

    def _records(self, members: pl.DataFrame, marked: pl.DataFrame) -> pl.DataFrame:
        kv = members.with_columns(pl.col("text").str.extract_groups(MEMBER).alias("_g")).unnest("_g")
        # an object's span: from its opening line to its last member (the closing `}` is the next one's `},{`)
        objs = (kv.group_by("_obj", maintain_order=True)
                .agg(pl.col("line").max().alias("line_end"),
                     *(pl.col("value").filter(pl.col("key") == k).first().alias(k)
                       for k in ("pri", "fac", "time", "caller", "msg"))))
        starts = marked.filter(pl.col("_open")).select("_obj", pl.col("line"))
        df = objs.join(starts, on="_obj", how="left").sort("line")
        pri = pl.col("pri")
        number = pri.cast(pl.Int64, strict=False)
        named = pri.str.strip_chars('"').replace(_LEVEL_NAMES)
        level = (pl.when(number.is_not_null()).then((number % 8).replace_strict(dict(enumerate(LEVELS)), default=None))
                 .otherwise(named))
        msg = pl.col("msg")
        message = (pl.when(msg.str.starts_with('"')).then(msg.str.json_decode(pl.String)).otherwise(msg)
                   .fill_null(pl.lit("<record without a msg member>")))
        return df.select(
            pl.lit(None, dtype=pl.Datetime("us", "UTC")).alias("ts"),
            pl.when(pl.col("time").is_not_null()).then(pl.lit(TimeSource.MONOTONIC_ONLY.value))
            .otherwise(pl.lit(TimeSource.NONE.value)).alias("ts_source"),
            pl.col("time").alias("ts_text"),
            pl.col("time").cast(pl.Float64, strict=False).alias("mono"),
            pl.lit("kernel").alias("ident"), level.cast(pl.String).alias("level"),
            message.alias("message"), "line", "line_end", pl.lit(self.name).alias("format"))


FORMAT = DmesgJson(
    name="dmesg-json",
    description='dmesg -J (--json): `{"dmesg": [{"pri": 6, "time": 8123.456801, "msg": "..."}, ...]}`, one member per '
                "line; seconds since boot, as raw dmesg",
    pattern=r'^\s*"dmesg"\s*:\s*\[$',
    stamp=Stamp.MONO,
    continuation=Continuation.NONE,
    priority=3,
    defaults={"ident": "kernel"},
    example='{\n   "dmesg": [\n      {\n         "pri": 3,\n         "time":  8123.456801,\n'
            '         "msg": "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."\n      }\n   ]\n}',
)
