"""Formats `journal-json`, `journal-json-pretty`, `journal-json-seq`, `journal-json-sse`: journalctl's JSON output modes.

Fields are read with polars' JSON path matching over whole batches. `MESSAGE` given as an array of byte
values (non-UTF-8 or non-printable text) is decoded with replacement; a `null` field (journalctl omits
values of 4096 bytes or more unless `--all`) is kept as a visible marker, never dropped silently.
"""

from __future__ import annotations

import json

import polars as pl

from ..schema import TS, TimeSource
from .base import Continuation, PostContext, Stamp, StructuredFormat

PRIORITIES = {"0": "emerg", "1": "alert", "2": "crit", "3": "err", "4": "warning", "5": "notice", "6": "info",
              "7": "debug"}
OMITTED = "<MESSAGE omitted by journalctl: 4096 bytes or more; export again with `journalctl -o json --all`>"


def _field(name: str) -> pl.Expr:
    return pl.col("obj").str.json_path_match(f"$.{name}")


def field_text(value: object) -> str:
    """A journal JSON field's decoded value as text: a string; an array of bytes (a value that is not UTF-8 or
    holds control characters) decoded; a repeated field's values, one per line; null as OMITTED."""
    if value is None:
        return OMITTED
    if isinstance(value, list):
        if all(isinstance(i, int) for i in value):
            return bytes(i & 0xFF for i in value).decode("utf-8", "replace")
        return "\n".join(str(i) for i in value)  # a repeated field: all values
    return str(value)


def _decode_message(value: str | None) -> str:
    if value is None or not value.startswith("["):
        return field_text(value)
    try:
        return field_text(json.loads(value))
    except ValueError:
        return value


# the fields that say where an entry comes from, read as journalctl's short output reads them (`output_short()`)
ENTRY_FIELDS = ("_HOSTNAME", "SYSLOG_IDENTIFIER", "_COMM", "_PID", "SYSLOG_PID", "UNIT", "USER_UNIT", "_SYSTEMD_UNIT",
                "_SYSTEMD_USER_UNIT", "PRIORITY", "_TRANSPORT")


def entry_columns() -> list[pl.Expr]:
    """`host`, `ident`, `pid`, `unit`, `level` over a frame holding the ENTRY_FIELDS as columns named after them
    (an entry the kernel logged without an identifier is the kernel's)."""
    kernel = pl.col("_TRANSPORT") == "kernel"
    ident = pl.coalesce(pl.col("SYSLOG_IDENTIFIER"), pl.col("_COMM"))
    return [pl.col("_HOSTNAME").alias("host"),
            pl.when(kernel & ident.is_null()).then(pl.lit("kernel")).otherwise(ident).alias("ident"),
            pl.coalesce(pl.col("_PID"), pl.col("SYSLOG_PID")).cast(pl.Int64, strict=False).alias("pid"),
            pl.coalesce(pl.col("UNIT"), pl.col("USER_UNIT"), pl.col("_SYSTEMD_UNIT"), pl.col("_SYSTEMD_USER_UNIT"))
            .alias("unit"),
            pl.col("PRIORITY").replace_strict(PRIORITIES, default=None).alias("level")]


def records_from_objects(objs: pl.DataFrame) -> pl.DataFrame:
    """Frame of (`line`, `line_end`, `obj` JSON text) -> records (without source columns)."""
    df = objs.with_columns(_field(n).alias(n) for n in RECORD_FIELDS)  # each field read once
    needs_decode = df["MESSAGE"].is_null() | df["MESSAGE"].str.starts_with("[")
    if needs_decode.any():
        fixed = [_decode_message(v) if bad else v for v, bad in zip(df["MESSAGE"].to_list(), needs_decode.to_list())]
        df = df.with_columns(pl.Series("MESSAGE", fixed, dtype=pl.String))
    return records_from_fields(df)


# the fields a record is made of, whatever the serialisation (JSON, export)
RECORD_FIELDS = ("MESSAGE", "__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP", "_SOURCE_MONOTONIC_TIMESTAMP", "_BOOT_ID",
                 *ENTRY_FIELDS)


def records_from_fields(df: pl.DataFrame) -> pl.DataFrame:
    """Frame of (`line`, `line_end`, one String column per RECORD_FIELDS name) -> records (without source
    columns): the time is `__REALTIME_TIMESTAMP` (µs since the epoch); a kernel entry's monotonic time is its
    printk stamp (`_SOURCE_MONOTONIC_TIMESTAMP`)."""
    rt = pl.col("__REALTIME_TIMESTAMP").cast(pl.Int64, strict=False)
    mono_us = (pl.when((pl.col("_TRANSPORT") == "kernel") & pl.col("_SOURCE_MONOTONIC_TIMESTAMP").is_not_null())
               .then(pl.col("_SOURCE_MONOTONIC_TIMESTAMP")).otherwise(pl.col("__MONOTONIC_TIMESTAMP")))
    return df.select(
        rt.cast(TS).alias("ts"),
        pl.when(rt.is_not_null()).then(pl.lit(TimeSource.EXACT.value)).otherwise(pl.lit(TimeSource.NONE.value))
        .alias("ts_source"),
        pl.col("__REALTIME_TIMESTAMP").alias("ts_text"),
        pl.lit(None, dtype=pl.String).alias("ts_anchor"),
        pl.col("_BOOT_ID").alias("boot_id"),
        (mono_us.cast(pl.Float64, strict=False) / 1e6).alias("mono"),
        *entry_columns(),
        pl.lit(None, dtype=pl.String).alias("rank"),
        pl.col("MESSAGE").alias("message"),
        "line",
        "line_end",
    )


class JournalJson(StructuredFormat):
    def detect_score(self, lines: pl.Series) -> float:
        nonblank = lines.filter(lines.str.strip_chars() != "")
        if nonblank.len() == 0:
            return 0.0
        ok = nonblank.str.contains(self.pattern).sum()
        return float(ok) / nonblank.len()

    def parse_batch(self, lines: pl.DataFrame, ctx: PostContext, final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Objects become records; a blank line or a line that is no journal object (a half-written last
        line) is kept as an untimed `text` record with its text, never dropped."""
        text = self.object_text()
        is_obj = text.str.starts_with("{") & text.str.json_path_match("$.__REALTIME_TIMESTAMP").is_not_null()
        marked = lines.with_columns(is_obj.fill_null(False).alias("_obj"))
        objs = marked.filter(pl.col("_obj")).select("line", pl.col("line").alias("line_end"), text.alias("obj"))
        recs = records_from_objects(objs).with_columns(pl.lit(self.name).alias("format"))
        other = marked.filter(~pl.col("_obj"))
        if other.height == 0:
            return recs, lines.clear()
        rest = other.select("line", pl.col("line").alias("line_end"), pl.col("text").alias("message"),
                            pl.lit(TimeSource.NONE.value).alias("ts_source"), pl.lit("text").alias("format"))
        return pl.concat([recs, rest], how="diagonal_relaxed").sort("line"), lines.clear()


    def object_text(self) -> pl.Expr:
        """A line's JSON object (json-seq's record separator taken off)."""
        return pl.col("text").str.strip_chars_start("\x1e")


class JournalJsonSse(JournalJson):
    """json-sse (server-sent events): `data: {...}`, then a blank line, which ends the event and is part of its
    record (`line_end`); an object at the end of a batch waits for the next one, which holds its blank line."""

    def object_text(self) -> pl.Expr:
        return pl.col("text").str.strip_prefix("data: ")

    def parse_batch(self, lines: pl.DataFrame, ctx: PostContext, final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
        event = pl.col("text").str.starts_with("data: ")
        carry = lines.clear()
        if not final and lines.height and lines.select(event.last()).item():
            lines, carry = lines.head(lines.height - 1), lines.tail(1)
        ends = lines.filter((pl.col("text") == "") & event.shift(1).fill_null(False)).get_column("line")
        recs, _ = super().parse_batch(lines.filter(~pl.col("line").is_in(ends.implode())), ctx, final)
        closed = pl.col("line").is_in((ends - 1).implode()) & (pl.col("format") == self.name)
        return recs.with_columns(pl.when(closed).then(pl.col("line") + 1).otherwise(pl.col("line_end"))
                                 .alias("line_end")), carry


class JournalJsonPretty(StructuredFormat):
    """Indented objects: `{` alone on a line opens one, `}` alone closes it."""

    def detect_score(self, lines: pl.Series) -> float:
        head = lines.head(200)
        opens = (head == "{").sum()
        has_rt = head.str.contains(r'^\s+"__REALTIME_TIMESTAMP" : ').any()
        return 1.0 if opens and has_rt else 0.0

    def parse_batch(self, lines: pl.DataFrame, ctx: PostContext, final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
        closes = lines.filter(pl.col("text") == "}")
        if closes.height == 0:
            return records_from_objects(_no_objs()), lines
        last_close = closes["line"].max()
        done = lines.filter(pl.col("line") <= last_close)
        carry = lines.filter(pl.col("line") > last_close)
        grouped = (done.with_columns((pl.col("text") == "{").cum_sum().alias("_obj"))
                   .filter(pl.col("_obj") > 0)
                   .group_by("_obj", maintain_order=True)
                   .agg(pl.col("line").min().alias("line"), pl.col("line").max().alias("line_end"),
                        pl.col("text").str.join("\n").alias("obj")))
        return records_from_objects(grouped.drop("_obj")), carry


def _no_objs() -> pl.DataFrame:
    return pl.DataFrame(schema={"line": pl.Int64, "line_end": pl.Int64, "obj": pl.String})


FORMATS = (
    JournalJson(
        name="journal-json",
        description="journalctl -o json: one JSON object per line (all values strings; MESSAGE may be a byte array)",
        pattern=r'^\{.*"__REALTIME_TIMESTAMP"',
        stamp=Stamp.EPOCH,
        continuation=Continuation.NONE,
        priority=1,
        example='{"__REALTIME_TIMESTAMP":"1748204239000000","_HOSTNAME":"dflash-train","SYSLOG_IDENTIFIER":"systemd",'
                '"_PID":"1","MESSAGE":"sglang.service: Failed with result \'signal\'."}',
    ),
    JournalJsonPretty(
        name="journal-json-pretty",
        description="journalctl -o json-pretty: indented JSON objects",
        pattern=r"^\{$",
        stamp=Stamp.EPOCH,
        continuation=Continuation.NONE,
        priority=2,
        example='{\n\t"__REALTIME_TIMESTAMP" : "1748204239000000",\n\t"MESSAGE" : "..."\n}',
    ),
    JournalJson(
        name="journal-json-seq",
        description="journalctl -o json-seq (RFC 7464): each object preceded by the RS byte 0x1E",
        pattern='^\x1e\\{.*"__REALTIME_TIMESTAMP"',
        stamp=Stamp.EPOCH,
        continuation=Continuation.NONE,
        priority=0,
        example='\\x1e{"__REALTIME_TIMESTAMP":"1748204239000000","MESSAGE":"..."}',
    ),
    JournalJsonSse(
        name="journal-json-sse",
        description="journalctl -o json-sse (server-sent events): `data: {...}` then a blank line",
        pattern='^data: \\{.*"__REALTIME_TIMESTAMP"',
        stamp=Stamp.EPOCH,
        continuation=Continuation.NONE,
        priority=0,
        example='data: {"__REALTIME_TIMESTAMP":"1748204239000000","MESSAGE":"..."}',
    ),
)
