"""Lines -> records, vectorised: each format's pattern runs once over the lines no earlier format claimed.

(The first format, the file's own, extracts its groups from every line, by its fast pattern where it has one;
the later ones first test, together, which of the few lines left their patterns match.)

A record is a first line a format recognises plus the continuation lines that belong to it (indented
journal continuation lines, raw traceback lines under an SGLang record, dmesg's unprefixed lines, a line
after one ending in a backslash). Lines nobody claims become untimed `text` records: nothing is dropped.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache

import polars as pl

from .ansi import strip_lines
from .detect import Detection, detect
from .podprefix import Pods
from .vllmprefix import Repeats
from .formats import FORMATS, TEXT, LineFormat, StructuredFormat
from .formats.base import Continuation, HookedFormat, PostContext, Stamp
from .schema import RECORD_SCHEMA, conform
from .timeparse import stamp_columns, stamp_exprs

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


def _group(cols: frozenset[str], name: str, dtype: pl.DataType = pl.String) -> pl.Expr:
    return pl.col(name).cast(dtype, strict=False) if name in cols else pl.lit(None, dtype=dtype)


TIMES = {"ts": "_ts", "ts_source": "_ts_source", "mono": "_mono"}  # stamp columns, as added next to the groups


@lru_cache(maxsize=512)
def _standard(name: str, ident: str | None, policy: str, cols: frozenset[str]) -> dict[str, pl.Expr]:
    """The working columns (`WORK`, in order) over a format's groups (`cols`) and the stamp columns (`TIMES`)."""
    level = _group(cols, "level")
    if "prio" in cols:
        prio_level = (pl.col("prio").cast(pl.Int64, strict=False) % 8).replace_strict(
            dict(enumerate(LEVELS)), default=None, return_dtype=pl.String)
        level = pl.coalesce(level, prio_level)
    return {
        "line": pl.col("line"), "text": pl.col("text"),
        "ts": pl.col(TIMES["ts"]), "ts_source": pl.col(TIMES["ts_source"]),
        "ts_text": _group(cols, "stamp"),
        "mono": pl.col(TIMES["mono"]),
        "host": _group(cols, "host"),
        "ident": pl.coalesce(_group(cols, "ident"), pl.lit(ident, dtype=pl.String)),
        "pid": _group(cols, "pid", pl.Int64),
        "unit": _group(cols, "unit"),
        "rank": _group(cols, "rank").str.strip_chars().replace("", None),
        "level": level,
        "message": pl.col("msg"),
        "format": pl.lit(name),
        "_policy": pl.lit(policy),
    }


def _standardise(fmt: LineFormat, df: pl.DataFrame, ctx: ParseContext) -> pl.DataFrame:
    """A format's matched rows (named groups + line + text) -> the working columns (`WORK`, in order)."""
    exprs = _standard(fmt.name, fmt.defaults.get("ident"), fmt.continuation.value, frozenset(df.columns))
    if fmt.stamp is Stamp.NONE:  # constant stamp columns
        ts, ts_source, mono = stamp_exprs(fmt.stamp, df.columns, ctx.tz)
        exprs = {**exprs, "ts": ts, "ts_source": ts_source, "mono": pl.lit(None, dtype=pl.Float64)}
    else:
        df = df.hstack(stamp_columns(fmt.stamp, df, ctx.tz).rename(TIMES))
    if isinstance(fmt, HookedFormat):  # the hook sees the groups and the standard columns
        keep = [c for c in WORK if c not in ("message", "format", "_policy")]
        df = fmt.post(df.with_columns(exprs[c].alias(c) for c in keep), ctx.post)
        exprs = {**exprs, **{c: pl.col(c) for c in keep}}
    return df.select(e.alias(c) for c, e in exprs.items())


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
    candidates = [f for f in formats if f is not TEXT]
    if candidates:  # the first format (the file's own) extracts over every line
        first = candidates[0]
        groups = first.extract(rest.get_column("text"))
        misses = groups.get_column("msg").null_count()
        if misses == 0:
            parts.append(_standardise(first, rest.hstack(groups), ctx))
            rest = rest.clear()
        elif misses < rest.height:
            hit = groups.get_column("msg").is_not_null()
            parts.append(_standardise(first, rest.filter(hit).hstack(groups.filter(hit)), ctx))
            rest = rest.filter(~hit)
    others = candidates[1:]
    if rest.height and others:  # the few lines left: which later format's pattern matches each, in one pass
        found = rest.select(pl.col("text").str.contains(f.pattern).alias(str(i)) for i, f in enumerate(others))
        taken = None
        for i, fmt in enumerate(others):
            match = found.to_series(i)
            claim = match if taken is None else match & ~taken
            if claim.any():
                sub = rest.filter(claim)
                parts.append(_standardise(fmt, sub.hstack(fmt.extract(sub.get_column("text"))), ctx))
            taken = match if taken is None else taken | match
        if taken is not None and taken.any():
            rest = rest.filter(~taken)
    if rest.height:
        parts.append(_standardise(TEXT, rest.with_columns(pl.col("text").alias("msg")), ctx))
    return pl.concat(parts, how="vertical_relaxed").sort("line") if len(parts) > 1 else parts[0]


def _continuation(df: pl.DataFrame) -> pl.Series | None:
    """Which rows continue the record before them (`_cont`); None when none does. Only unclaimed lines can: the
    string tests run on those rows alone, each with the line before it and the policy of the last claimed line
    before it."""
    unclaimed = df.get_column("format") == TEXT.name
    if not unclaimed.any():
        return None
    claimed = pl.col("format") != TEXT.name
    rows = df.select(pl.int_range(pl.len()).alias("i"),
                     claimed.cum_sum().alias("seg"),  # claimed lines up to here: rows after one claimed line share it
                     pl.when(claimed).then(pl.col("_policy")).forward_fill().alias("policy"),
                     pl.col("text"), pl.col("text").shift(1).alias("prev")).filter(unclaimed)
    flags = rows.select("i", _cont_rule().alias("_cont"))
    cont = flags.get_column("_cont")
    if not cont.any():
        return None
    return pl.zeros(df.height, dtype=pl.Boolean, eager=True).alias("_cont").scatter(
        flags.get_column("i").filter(cont), True)


@lru_cache(maxsize=1)
def _cont_rule() -> pl.Expr:
    """Over unclaimed rows (`seg`, `policy`, `text`, `prev`ious line): does the row continue a record?"""
    policy = pl.col("policy")
    indented = pl.col("text").str.contains(r"^\s")
    after_backslash = pl.col("prev").str.ends_with("\\").fill_null(False)
    # under INDENTED, a plain (unindented) text line closes the record: later indented lines are not its own
    # (a plain line since the segment's first row: plain lines counted so far exceed the count before it)
    plain = (~indented & ~after_backslash).cast(pl.UInt32)
    seen = plain.cum_sum()
    first = pl.col("seg").ne_missing(pl.col("seg").shift(1)).fill_null(True)
    breaker = seen > pl.when(first).then(seen - plain).forward_fill()
    return policy.is_not_null() & (
        (policy == Continuation.ANY.value)
        | ((policy == Continuation.INDENTED.value) & indented & ~breaker)
        | after_backslash
    )


def _carry_start(df: pl.DataFrame, last: int) -> int:
    """Where the carry starts when the last record starts at row `last`. A text record after a claimed line
    continues under that line's policy (the line after a backslash line joins it), so the carry then starts
    at that claimed line: the next batch sees the same policy whatever the cut."""
    fmt = df.get_column("format")
    if fmt[last] != TEXT.name:
        return last
    claimed = (fmt.slice(0, last) != TEXT.name).arg_true()
    return int(claimed[-1]) if claimed.len() else last


def _assemble(df: pl.DataFrame, ctx: ParseContext, final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    cont = _continuation(df)
    carry = df.clear().select("line", "text")
    if not final and df.height:
        last = int((~cont).arg_true()[-1]) if cont is not None else df.height - 1  # where the last record starts
        start = _carry_start(df, last)
        cut = start if start > 0 or df.height < MAX_CARRY else last  # a stretch of MAX_CARRY lines is cut there
        if cut > 0 or df.height < MAX_CARRY:
            carry = df.slice(cut).select("line", "text")
            df, cont = df.slice(0, cut), (cont.slice(0, cut) if cont is not None else None)
    line_end = pl.col("line")
    if cont is not None and cont.any():
        # a record is its first row; only rows of multi-line records go through the group-by
        df = df.with_columns(cont, (~cont).cum_sum().alias("_rid"))
        multi = pl.col("_cont") | pl.col("_cont").shift(-1).fill_null(False)
        piece = pl.when(pl.col("_cont")).then(pl.col("text")).otherwise(pl.col("message"))
        joined = (df.filter(multi).with_columns(piece.alias("message"))
                  .group_by("_rid", maintain_order=True)
                  .agg(pl.col("line").last().alias("line_end"), pl.col("message").str.join("\n")))
        df = df.filter(~pl.col("_cont"))
        at = (joined.get_column("_rid") - 1).cast(pl.Int64)  # _rid counts records from 1
        line_end = df.get_column("line").clone().scatter(at, joined.get_column("line_end"))
        df = df.with_columns(df.get_column("message").clone().scatter(at, joined.get_column("message")))
    extra = {"line_end": line_end, "ts_anchor": pl.lit(None, dtype=pl.String),
             "boot_id": pl.lit(None, dtype=pl.String), "source_id": pl.lit(ctx.source_id), "path": pl.lit(ctx.path)}
    return df.select((extra[c] if c in extra else pl.col(c)).cast(t).alias(c)
                     for c, t in RECORD_SCHEMA.items()), carry


def parse_structured(fmt: StructuredFormat, lines: pl.DataFrame, ctx: ParseContext,
                     final: bool = True) -> tuple[pl.DataFrame, pl.DataFrame]:
    recs, carry = fmt.parse_batch(lines, ctx.post, final)
    own = pl.coalesce(pl.col("format"), pl.lit(fmt.name)) if "format" in recs.columns else pl.lit(fmt.name)
    recs = recs.with_columns(own.alias("format"), pl.lit(ctx.source_id).alias("source_id"),
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
        pods = Pods()  # kubectl logs --prefix: the pod names the host
        lines = pods.take(strip_lines(lines)[0])
        if any(f.name == "vllm" for f in formats):
            lines = Repeats().take(lines)
        recs = pods.name(parse_lines(lines, formats, ctx, final=True)[0])
    recs = normalise_batch(recs)
    from .timefix import SourceClock, fix_frame

    return fix_frame(recs, SourceClock(tz=tz, year=year, source_id="example"))[0]
