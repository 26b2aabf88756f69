"""Lines -> records, vectorised: each format's pattern runs once over the lines no earlier format claimed.

A record is a first line a format recognises plus the continuation lines that belong to it (indented
journal continuation lines, raw traceback lines under an SGLang record, dmesg's unprefixed lines, a line
after one ending in a backslash). Lines nobody claims become untimed `text` records: nothing is dropped.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import polars as pl

from .detect import Detection, detect
from .formats import FORMATS, TEXT, LineFormat, StructuredFormat
from .formats.base import Continuation, HookedFormat, PostContext
from .schema import RECORD_SCHEMA, TimeSource, conform
from .timeparse import stamp_columns

LEVELS = ("emerg", "alert", "crit", "err", "warning", "notice", "info", "debug")
# columns a format frame carries between parsing and record assembly
MAX_CARRY = 1_000_000
WORK = ("line", "text", "ts", "ts_source", "ts_text", "mono", "host", "ident", "pid", "unit", "rank", "level",
        "message", "format", "_policy")


@dataclass(frozen=True)
class ParseContext:
    path: str
    tz: str = "UTC"
    source_id: str = ""

    @property
    def post(self) -> PostContext:
        return PostContext(path=self.path, tz=self.tz)


def _group(df: pl.DataFrame, name: str, dtype: pl.DataType = pl.String) -> pl.Expr:
    return pl.col(name).cast(dtype, strict=False) if name in df.columns else pl.lit(None, dtype=dtype)


def _standardise(fmt: LineFormat, df: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    """A format's matched rows (named groups + line + text) -> the working columns."""
    times = stamp_columns(fmt.stamp, df, ctx.tz)
    level = _group(df, "level")
    if "prio" in df.columns:
        prio_level = (pl.col("prio").cast(pl.Int64, strict=False) % 8).replace_strict(
            dict(enumerate(LEVELS)), default=None, return_dtype=pl.String)
        level = pl.coalesce(level, prio_level)
    df = df.with_columns(times).with_columns(
        _group(df, "stamp").alias("ts_text"),
        pl.coalesce(_group(df, "ident"), pl.lit(fmt.defaults.get("ident"), dtype=pl.String)).alias("ident"),
        _group(df, "pid", pl.Int64).alias("pid"),
        _group(df, "unit").alias("unit"),
        _group(df, "rank").str.strip_chars().replace("", None).alias("rank"),
        level.alias("level"),
        _group(df, "host").alias("host"),
    )
    if isinstance(fmt, HookedFormat):
        df = fmt.post(df, ctx.post)
    return df.select(
        "line", "text", "ts", "ts_source", "ts_text", "mono", "host", "ident", "pid", "unit", "rank", "level",
        pl.col("msg").alias("message"),
        pl.lit(fmt.name).alias("format"),
        pl.lit(fmt.continuation.value).alias("_policy"),
    )


def parse_lines(lines: pl.DataFrame, formats: list[LineFormat], ctx: ParseContext,
                final: bool = True) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Parse a batch of (`line`, `text`) rows. Returns (records, carry): `carry` holds the trailing lines of a
    record that may continue in the next batch (empty when `final`)."""
    if lines.height == 0:
        return conform(pl.DataFrame(), RECORD_SCHEMA), lines.select("line", "text")
    pool = _pool() if lines.height >= PARALLEL_ROWS else None
    if pool is None:
        df = _claim(lines, formats, ctx)
    else:  # each line is claimed on its own: the halves of a batch go to two threads (polars frees the GIL)
        half = lines.height // 2
        df = pl.concat(list(pool.map(lambda part: _claim(part, formats, ctx),
                                     (lines.slice(0, half), lines.slice(half)))), how="vertical_relaxed")
    return _assemble(df, ctx, final)


PARALLEL_ROWS = 1 << 16  # batches from this many lines on are split over two threads
_POOL: list[ThreadPoolExecutor | None] = []


def _pool() -> ThreadPoolExecutor | None:
    if not _POOL:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        _POOL.append(ThreadPoolExecutor(2, thread_name_prefix="parse") if cpus > 1 else None)
    return _POOL[0]


def _claim(lines: pl.DataFrame, formats: list[LineFormat], ctx: ParseContext) -> pl.DataFrame:
    """Each line to the first format whose pattern matches it (`text` when none does), standardised, in order."""
    parts: list[pl.DataFrame] = []
    rest = lines
    for fmt in formats:
        if rest.height == 0:
            break
        if fmt is TEXT:
            continue
        groups = fmt.extract(rest.get_column("text"))
        hit = groups.get_column("msg").is_not_null()
        hits = int(hit.sum())
        if hits == rest.height:
            parts.append(_standardise(fmt, pl.concat([rest, groups], how="horizontal"), ctx))
            rest = rest.clear()
        elif hits:
            matched = pl.concat([rest.filter(hit), groups.filter(hit)], how="horizontal")
            parts.append(_standardise(fmt, matched, ctx))
            rest = rest.filter(~hit)
    if rest.height:
        parts.append(_standardise(TEXT, rest.with_columns(pl.col("text").alias("msg")), ctx))
    return pl.concat(parts, how="vertical_relaxed").sort("line") if len(parts) > 1 else parts[0]


def _continuation(df: pl.DataFrame) -> pl.Series:
    """Which rows continue the record before them (`_cont`). Only lines no format claimed can: the work runs
    over those rows alone, each with the line before it and the policy of the last claimed line before it."""
    cont = pl.repeat(False, df.height, dtype=pl.Boolean, eager=True).alias("_cont")
    text_rows = (df.get_column("format") == TEXT.name)
    idx = text_rows.arg_true().cast(pl.Int64)
    if idx.len() == 0:
        return cont
    real_pos = (~text_rows).arg_true().cast(pl.Int64)
    seg = idx - pl.int_range(0, idx.len(), eager=True, dtype=pl.Int64)  # claimed lines before the row
    text = df.get_column("text")
    policies = df.get_column("_policy")
    sub = pl.DataFrame({
        "i": idx,
        "seg": seg,
        "t": text.gather(idx),
        "prev": text.gather((idx - 1).clip(0)),
        "policy": policies.gather(real_pos.gather((seg - 1).clip(0))) if real_pos.len()
        else pl.repeat(None, idx.len(), dtype=policies.dtype, eager=True),
    })
    indented = pl.col("t").str.contains(r"^\s")
    after_backslash = pl.when(pl.col("i") > 0).then(pl.col("prev").str.ends_with("\\")).otherwise(False)
    policy = pl.when(pl.col("seg") > 0).then(pl.col("policy"))
    sub = sub.with_columns(after_backslash.alias("bs"), indented.alias("ind"))
    bs, ind = pl.col("bs"), pl.col("ind")
    # under INDENTED, a plain (unindented) text line closes the record: later indented lines are not its own
    breaker = (~ind & ~bs).cast(pl.Int8).cum_max().over("seg") > 0
    flags = sub.select((policy.is_not_null() & (
        (policy == Continuation.ANY.value)
        | ((policy == Continuation.INDENTED.value) & ind & ~breaker)
        | bs
    )).alias("_cont")).get_column("_cont")
    return cont.scatter(idx, flags)


def _assemble(df: pl.DataFrame, ctx: ParseContext, final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    cont = _continuation(df)
    carry = df.clear().select("line", "text")
    if not final and df.height:
        last = int((~cont).arg_true()[-1])  # where the last record starts
        if last > 0 or df.height < MAX_CARRY:  # a record of MAX_CARRY lines is cut there
            carry = df.slice(last).select("line", "text")
            df, cont = df.slice(0, last), cont.slice(0, last)
    if cont.any():
        # a record is its first row; only rows of multi-line records go through the group-by
        df = df.with_columns(cont, (~cont).cum_sum().alias("_rid"))
        multi = pl.col("_cont") | pl.col("_cont").shift(-1).fill_null(False)
        piece = pl.when(pl.col("_cont")).then(pl.col("text")).otherwise(pl.col("message"))
        joined = (df.filter(multi).with_columns(piece.alias("message"))
                  .group_by("_rid", maintain_order=True)
                  .agg(pl.col("line").last().alias("line_end"), pl.col("message").str.join("\n")))
        starts = df.filter(~pl.col("_cont")).with_columns(pl.col("line").alias("line_end"))
        at = (joined.get_column("_rid") - 1).cast(pl.Int64)  # _rid counts records from 1
        df = starts.with_columns(starts.get_column("line_end").scatter(at, joined.get_column("line_end")),
                                 starts.get_column("message").scatter(at, joined.get_column("message")))
    else:
        df = df.with_columns(pl.col("line").alias("line_end"))
    out = df.with_columns(
        pl.lit(None, dtype=pl.String).alias("ts_anchor"),
        pl.lit(None, dtype=pl.String).alias("boot_id"),
        pl.lit(ctx.source_id).alias("source_id"),
        pl.lit(ctx.path).alias("path"),
    )
    return conform(out, RECORD_SCHEMA), carry


def parse_structured(fmt: StructuredFormat, lines: pl.DataFrame, ctx: ParseContext,
                     final: bool = True) -> tuple[pl.DataFrame, pl.DataFrame]:
    recs, carry = fmt.parse_batch(lines, ctx.post, final)
    recs = recs.with_columns(pl.lit(fmt.name).alias("format"), pl.lit(ctx.source_id).alias("source_id"),
                             pl.lit(ctx.path).alias("path"))
    if final and carry.height:  # an unterminated object at the end: keep its lines as text records
        tail, _ = parse_lines(carry, [TEXT], ctx, final=True)
        recs = pl.concat([conform(recs, RECORD_SCHEMA), tail])
        carry = carry.clear()
    return conform(recs, RECORD_SCHEMA), carry


def resolve(detection: Detection) -> list[LineFormat]:
    return [FORMATS[name] for name in detection.formats]


def parse_text(text: str, fmt: str | None = None, path: str = "<example>", tz: str = "UTC",
               year: int | None = None) -> pl.DataFrame:
    """Parse a string holding log lines (any supported format) into records. For examples, tests, `explain`."""
    from .normalise import normalise_batch

    raw = text[:-1] if text.endswith("\n") else text
    lines = pl.DataFrame({"line": pl.int_range(1, raw.count("\n") + 2, eager=True, dtype=pl.Int64),
                          "text": pl.Series(raw.split("\n"), dtype=pl.String)})
    detection = detect(lines["text"], path, forced=fmt)
    ctx = ParseContext(path=path, tz=tz, source_id="example")
    formats = resolve(detection)
    if len(formats) == 1 and isinstance(formats[0], StructuredFormat):
        recs, _ = parse_structured(formats[0], lines, ctx, final=True)
    else:
        recs, _ = parse_lines(lines, formats, ctx, final=True)
    recs = normalise_batch(recs)
    from .timefix import SourceClock, fix_frame

    return fix_frame(recs, SourceClock(tz=tz, year=year, source_id="example"))[0]


def time_source_is_inferred(ts_source: str) -> bool:
    return ts_source not in (TimeSource.EXACT.value, TimeSource.NONE.value)
