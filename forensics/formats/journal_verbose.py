"""Format `journal-verbose`: journalctl -o verbose, every field of every entry.

An entry is a header line, `Sun 2025-05-25 20:17:19.123456 UTC [s=...;i=...;b=...;m=...;t=...;x=...]` (the display
time with microseconds and the zone's abbreviation, then the cursor), then one line per field, `    NAME=value`
(four spaces). A value with newlines goes on over lines indented to its column (4 + len(NAME) + 1 spaces); one
that is not printable text is shown as `NAME=[1.2K blob data]` (`output_verbose()` in systemd's
src/shared/logs-show.c). The fields become a record as journalctl's JSON does (`journal_json.entry_columns`):
the message, host, identifier, pid, unit, priority, boot; the time is the header's, read as `short-full` reads it.
A line that is neither (a `-- Boot ... --` separator, text before the first entry) is a `text` record of its own.
"""

from __future__ import annotations

import polars as pl

from ..timeparse import stamp_columns
from .base import Continuation, PostContext, Stamp, StructuredFormat, hold_back, no_records, with_text_records
from .journal_json import ENTRY_FIELDS, entry_columns

HEADER = (r"^(?P<stamp>(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) )?(?P<date>\d{4}-\d{2}-\d{2}) "
          r"(?P<time>\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?) (?P<zone>[A-Za-z][A-Za-z0-9+\-/_]*)) \[(?P<cursor>s=[0-9a-f]+;[^\]]*)\]$")
FIELD = r"^ {4}(?P<name>[A-Z_][A-Z0-9_]*)=(?P<value>.*)$"
BLOB = r"^\[[0-9.]+[KMGTPE]?B? blob data\]$"
# the fields a record is made of (the others stay in the source file)
WANTED = ("MESSAGE", "_BOOT_ID", "_SOURCE_MONOTONIC_TIMESTAMP", *ENTRY_FIELDS)


class JournalVerbose(StructuredFormat):
    def detect_score(self, lines: pl.Series) -> float:
        head = lines.head(400)
        headers = head.str.contains(HEADER).sum()
        fields = head.str.contains(FIELD).sum()
        return 1.0 if headers and fields >= headers else 0.0

    def parse_batch(self, lines: pl.DataFrame, ctx: PostContext, final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Whole entries become records; the lines from the batch's last header on wait for the next batch
        (the entry may go on there), unless this is the last."""
        text = pl.col("text")
        marked = lines.with_columns(text.str.contains(HEADER).fill_null(False).alias("_h"),
                                    text.str.contains(FIELD).fill_null(False).alias("_f"))
        marked, carry = hold_back(marked, lines, "_h", final)
        if marked is None or marked.height == 0:
            return no_records(), carry
        # a field's continuation: an indented line that is no field line; anything else is a header or stands alone
        cont = ~pl.col("_h") & ~pl.col("_f") & text.str.starts_with(" ")
        marked = marked.with_columns(cont.alias("_c"))
        alone = ~pl.col("_h") & ~pl.col("_f") & ~pl.col("_c")
        # segments: a header, or a line standing alone, starts one; a segment is an entry when a header starts it
        marked = marked.with_columns((pl.col("_h") | alone).cum_sum().alias("_seg"))
        marked = marked.with_columns(pl.col("_h").first().over("_seg").alias("_entry"))
        entries = marked.filter(pl.col("_entry") & (pl.col("_seg") > 0))
        others = marked.filter(~pl.col("_entry") | (pl.col("_seg") == 0))
        return with_text_records(self._entries(entries, ctx) if entries.height else None, others), carry

    def _entries(self, rows: pl.DataFrame, ctx: PostContext) -> pl.DataFrame:
        heads = rows.filter(pl.col("_h")).select(
            "_seg", "line", pl.col("text").str.extract_groups(HEADER).alias("_g")).unnest("_g")
        body = rows.filter(~pl.col("_h"))
        fields = (body.with_columns(pl.col("_f").cum_sum().alias("_fid"),
                                    pl.col("text").str.extract_groups(FIELD).alias("_g")).unnest("_g")
                  .with_columns(pl.col("name").forward_fill().over("_seg")))
        # a continuation line is indented to its field's value column: take the indent off
        width = pl.col("name").str.len_chars() + 5
        piece = pl.when(pl.col("_f")).then(pl.col("value")).otherwise(pl.col("text").str.slice(width))
        values = (fields.filter(pl.col("_fid") > 0).with_columns(piece.alias("_v"))
                  .group_by("_seg", "_fid", maintain_order=True)
                  .agg(pl.col("name").first(), pl.col("_v").str.join("\n").alias("value")))
        wanted = (values.filter(pl.col("name").is_in(list(WANTED)))
                  .group_by("_seg").agg(*(pl.col("value").filter(pl.col("name") == n).first().alias(n) for n in WANTED)))
        span = rows.group_by("_seg").agg(pl.col("line").max().alias("line_end"))
        df = heads.join(span, on="_seg", how="left").join(wanted, on="_seg", how="left").sort("line")
        times = stamp_columns(Stamp.FULL, df.select("date", "time", "zone"), ctx.tz)
        cursor = pl.col("cursor")
        boot = pl.coalesce(pl.col("_BOOT_ID"), cursor.str.extract(r"(?:^|;)b=([0-9a-f]+)", 1))
        mono_us = pl.coalesce(pl.when(pl.col("_TRANSPORT") == "kernel").then(pl.col("_SOURCE_MONOTONIC_TIMESTAMP")),
                              cursor.str.extract(r"(?:^|;)m=([0-9a-f]+)", 1).str.to_integer(base=16, strict=False)
                              .cast(pl.String))
        msg = pl.col("MESSAGE")
        message = (pl.when(msg.is_null()).then(pl.lit("<entry without a MESSAGE field>"))
                   .when(msg.str.contains(BLOB)).then(pl.lit("<MESSAGE ") + msg + pl.lit(
                       " not printed by journalctl -o verbose: not printable text; export again with "
                       "`journalctl -o verbose --all` or `-o json`>"))
                   .otherwise(msg))
        return df.hstack(times.select("ts", "ts_source")).select(
            "ts", "ts_source", pl.col("stamp").alias("ts_text"), pl.lit(None, dtype=pl.String).alias("ts_anchor"),
            boot.alias("boot_id"), (mono_us.cast(pl.Float64, strict=False) / 1e6).alias("mono"), *entry_columns(),
            pl.lit(None, dtype=pl.String).alias("rank"), message.alias("message"), "line", "line_end",
            pl.lit(self.name).alias("format"))


FORMAT = JournalVerbose(
    name="journal-verbose",
    description="journalctl -o verbose: a `Sun 2025-05-25 20:17:19.123456 UTC [cursor]` header, then `    FIELD=value` "
                "lines",
    pattern=HEADER,
    stamp=Stamp.FULL,
    continuation=Continuation.NONE,
    priority=3,
    example="Sun 2025-05-25 20:17:19.419012 UTC [s=e1b7c3a94d2f4a6b8c0d9e8f7a6b5c4d;i=2f1b3;b=8c1f3a0b6d2e4f5a9b7c0d1e2f3a4b5c;"
            "m=1e4d1a2b3;t=635fb6aa0c3c4;x=9f1e2d3c4b5a6978]\n    _HOSTNAME=gpu-node-1\n    SYSLOG_IDENTIFIER=systemd\n"
            "    MESSAGE=sglang.service: Failed with result 'signal'.",
)
