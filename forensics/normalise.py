"""Records -> normalised records, batch by batch: units named in systemd messages (or by the shell command a
terminal session's answer follows: `prompts.py`), SGLang ranks inside journal lines, and tracebacks logged through
the journal (one entry per line) made one record again.
Source-wide time fixes (boots, years) are in `timefix.py`.
"""

from __future__ import annotations

import polars as pl

from .formats import JOURNAL_TEXT
from .prompts import prompt_units
from .vllmprefix import PREFIX as VLLM_PREFIX
from .vllmprefix import START as VLLM_START
from .vllmprefix import continues
from .schema import OUT_OF_RANGE, TS_MAX_US, TS_MIN_US

UNIT_PREFIX = r"^([\w@.\-:\\]+\.(?:service|scope|slice|socket|timer|mount|target|path|device|swap|automount)): "
SGLANG_IN_MSG = r"^\[(\d{4}-\d{2}-\d{2}) \d{2}:\d{2}:\d{2}(?:\.\d+)?((?: (?:DP|PP|TP|EP|ATTN_CP|MOE_DP)\d+)*)\] "
NEW_RECORD = (r"^(\[\d{4}-\d{2}-\d{2} |\[rank\d+\]:|\[?[IWEF]\d{4} \d|INFO:|WARNING:|ERROR:|DEBUG:|CRITICAL:|"
              r"Traceback \(most recent call last\):|Exception raised from |" + VLLM_START.removeprefix("^") + ")")
# the kernel's own stamp (seconds since boot) that rsyslog's imklog keeps at the head of a kernel message in
# /var/log/kern.log and /var/log/syslog (its `ParseKernelTimestamp` is off by default): `kernel: [ 8123.356789] ...`
KERNEL_STAMP = r"^\[\s*(\d{1,10}\.\d{1,9})\] ?"
# the caller id a kernel built with CONFIG_PRINTK_CALLER prints after the stamp: the task (`T1234`) or CPU (`C3`)
KERNEL_CALLER = r"^\[\s*[TC]\d{1,10}\] ?"
# klog's multi-line value (`output=<`, then each line of the value after a tab, then ` >`: k8s.io/klog/v2
# textlogger): a kubelet's exec probe's output, one journal entry a line
BLOCK_START = r"Traceback \(most recent call last\):|^Exception raised from |=<$"
BLOCK_LITERALS = ["Traceback (most recent call last):", "Exception raised from ", "=<"]
# one cached regex (`str.contains_any` builds its automaton again on every batch)
_BLOCK_RX = "|".join(pl.escape_regex(x) for x in BLOCK_LITERALS)
KEY = ["host", "ident", "pid"]


def normalise_batch(recs: pl.DataFrame) -> pl.DataFrame:
    """Per-batch fixes that need no knowledge of the rest of the source. Each runs only on the rows it
    can concern (systemd lines, bracketed messages, processes that logged a traceback)."""
    if recs.height == 0:
        return recs
    recs = _outside_years(recs)
    # a stamp naming a day that does not exist (Feb 30) parses to no time: say so
    timed_kinds = ["exact", "zone_assumed", "year_inferred"]
    recs = recs.with_columns(pl.when(pl.col("ts").is_null() & pl.col("ts_source").is_in(timed_kinds))
                             .then(pl.lit("none")).otherwise(pl.col("ts_source")).alias("ts_source"))
    recs = _kernel_stamps(recs)
    msg = pl.col("message")
    recs = _fill(recs, "unit", pl.col("ident").str.starts_with("systemd").fill_null(False) & pl.col("unit").is_null(),
                 msg.str.extract(UNIT_PREFIX, 1))
    recs = _fill(recs, "rank", msg.str.starts_with("[").fill_null(False) & pl.col("rank").is_null(),
                 msg.str.extract(SGLANG_IN_MSG, 2).str.strip_chars().replace("", None))
    recs = prompt_units(recs)
    return _merge_journal_blocks(_vllm_repeats(recs))


def _vllm_repeats(recs: pl.DataFrame) -> pl.DataFrame:
    """vLLM under systemd: each line of a multi-line message is a journal entry that starts with vLLM's prefix
    again (`(EngineCore_DP0 pid=413) ERROR 05-25 20:16:40 [core.py:710]   File ...`). Where an entry's prefix is that
    of the entry before it of the same process and its text reads as the rest of a message (`vllmprefix`), the
    prefix is taken off, so that the traceback is merged as one of SGLang's is; an entry that starts a message
    keeps its prefix (a new record: `NEW_RECORD`)."""
    if "format" not in recs.columns:
        return recs
    idx = recs.select(pl.col("message").str.contains(VLLM_START).fill_null(False).arg_true().alias("i"))["i"]
    if idx.len() < 2:
        return recs
    idx = idx.filter(recs[idx].get_column("format").is_in(list(JOURNAL_TEXT)))
    if idx.len() < 2:
        return recs
    sub = recs[idx]
    same = pl.lit(True)
    for k in KEY:
        same = same & pl.col(k).eq_missing(pl.col(k).shift(1))
    # the entry right before it holds a prefix too, and is of the same process
    prev_ok = (idx.diff() == 1).fill_null(False) & sub.select(same.fill_null(False)).to_series()
    msg = sub.get_column("message")
    pfx = msg.str.extract(VLLM_PREFIX, 1)
    rest = msg.str.slice(pfx.str.len_chars().fill_null(0))
    cont = continues(pfx, pl.select(pl.when(prev_ok).then(pfx.shift(1))).to_series(), rest)
    if not cont.any():
        return recs
    return recs.with_columns(recs["message"].scatter(idx, pl.select(pl.when(cont).then(rest).otherwise(msg))
                                                     .to_series()))


def _kernel_stamps(recs: pl.DataFrame) -> pl.DataFrame:
    """A kernel line a syslog daemon wrote with the kernel's own stamp (`kernel: [ 8123.356789] NVRM: Xid ...`):
    the stamp becomes the record's `mono` (seconds since boot) and the message is the kernel's, as dmesg and the
    journal give it, so that the kernel rules read it and a dmesg of the same boot can be anchored to it. A caller
    id after the stamp (`[  T48213] `, CONFIG_PRINTK_CALLER) is taken off the message too (the journal keeps it
    in a field of its own)."""
    if "ident" not in recs.columns or "mono" not in recs.columns:
        return recs
    mask = ((pl.col("ident") == "kernel") & pl.col("message").str.starts_with("[")).fill_null(False)
    idx = recs.select(mask.arg_true().alias("i"))["i"]
    if idx.len() == 0:
        return recs
    msg = pl.col("message")
    stamp = pl.when(pl.col("mono").is_null()).then(msg.str.extract(KERNEL_STAMP, 1).cast(pl.Float64, strict=False))
    got = recs[idx].select(pl.coalesce(pl.col("mono"), stamp).alias("m"),
                           pl.when(stamp.is_not_null()).then(msg.str.replace(KERNEL_STAMP, "")).otherwise(msg)
                           .str.replace(KERNEL_CALLER, "").alias("msg"))
    return recs.with_columns(recs["mono"].scatter(idx, got["m"]), recs["message"].scatter(idx, got["msg"]))


def _outside_years(recs: pl.DataFrame) -> pl.DataFrame:
    """A stamp past year 9999 or before year 1 once in UTC (`9999-12-31T23:59:59-05:00`) has no time that
    readers can hold: the record keeps its stamp text, loses the time, and says why in `ts_anchor`."""
    us = pl.col("ts").dt.epoch("us")
    lo, hi = recs.select(us.min().alias("lo"), us.max().alias("hi")).row(0)
    if lo is None or (lo >= TS_MIN_US and hi <= TS_MAX_US):
        return recs
    outside = ((us < TS_MIN_US) | (us > TS_MAX_US)).fill_null(False)
    return recs.with_columns(pl.when(outside).then(None).otherwise(pl.col("ts")).alias("ts"),
                             pl.when(outside).then(pl.lit(OUT_OF_RANGE)).otherwise(pl.col("ts_anchor"))
                             .alias("ts_anchor"))


def _fill(recs: pl.DataFrame, col: str, mask: pl.Expr, value: pl.Expr) -> pl.DataFrame:
    """Set `col` to `value` on the rows of `mask`, computing `value` on those rows only."""
    idx = recs.select(mask.arg_true().alias("i"))["i"]
    if idx.len() == 0:
        return recs
    vals = recs[idx].select(value.alias(col))[col]
    return recs.with_columns(recs[col].scatter(idx, vals))


HOLD_MAX = 5_000  # lines of a traceback block still open at a batch's end held back for the next batch, at most


def _runs() -> pl.Expr:
    """Rows that may be part of a block (`_merge_journal_blocks`): a journal process's entries, a container's."""
    return ((pl.col("format").is_in(list(JOURNAL_TEXT)) & pl.col("pid").is_not_null())
            | (pl.col("format") == "container")).fill_null(False)


def open_block(recs: pl.DataFrame) -> int | None:
    """The first line of a traceback block that may go on past the end of this batch (its start, then only
    lines of the same process that start no record of their own, up to the batch's last record), or None. The
    stream parses such a block again with the next batch, so that it is merged whole and not cut at the batch
    boundary (its last line, the exception, would be a record of its own)."""
    tail = recs.tail(HOLD_MAX).select(*KEY, "line", "message", _runs().alias("_j"))
    if tail.height == 0:
        return None
    starts = (tail.get_column("_j") & tail.get_column("message").str.contains(BLOCK_START).fill_null(False)).arg_true()
    if starts.len() == 0:
        return None
    i = int(starts[-1])
    head, rest = tail.row(i, named=True), tail.slice(i + 1)
    same = pl.all_horizontal([pl.col(k).eq_missing(pl.lit(head[k], dtype=recs.schema[k])) for k in KEY])
    goes_on = rest.select((pl.col("_j") & same & ~pl.col("message").str.contains(NEW_RECORD).fill_null(False))
                          .all()).item()
    return int(head["line"]) if goes_on else None


def _merge_journal_blocks(recs: pl.DataFrame) -> pl.DataFrame:
    """A traceback logged through the journal is one entry per line; make it one record again.

    Within one (host, ident, pid), a block starts at `Traceback (most recent call last):` (or c10's
    `Exception raised from`, or a klog line whose last value is a multi-line one: `output=<`) and takes the entries of that process that follow it, line after line, until
    one that starts a new log record (an SGLang/glog/uvicorn prefix), a line of anything else in between (so
    a record's lines are a run: no other record inside its span) or a gap of more than 2 s.

    So a block lies inside a *run*: consecutive journal rows of one process. The runs are found by comparing
    each row with the one before it, and only the runs holding a block start's literal are looked at further
    (a batch holds a hundred thousand lines and a handful of tracebacks)."""
    # a container's output (one process's stream, no pid) is such a run too
    flags = recs.select(_runs().alias("_j"), pl.col("message").str.contains(_BLOCK_RX).fill_null(False).alias("_s"))
    starts = flags["_j"] & flags["_s"]
    if not starts.any():  # most batches: no traceback, no runs to find
        return recs
    same = pl.lit(True)
    for k in KEY:
        same = same & pl.col(k).eq_missing(pl.col(k).shift(1))
    in_run = flags["_j"] & flags["_j"].shift(1, fill_value=False) & recs.select(same.fill_null(False)).to_series()
    run = (~in_run).cum_sum().alias("_run")
    df = recs.with_row_index("_i")
    j = df.with_columns(run).filter(pl.col("_run").is_in(run.filter(starts).unique().implode()))
    # a run's first row has no gap (null): it starts a record
    gap = (pl.col("ts") - pl.col("ts").shift(1).over("_run")).dt.total_seconds().abs()
    new_rec = (pl.col("message").str.contains(NEW_RECORD) | gap.is_null() | (gap > 2))
    start = pl.col("message").str.contains(BLOCK_START)
    j = j.with_columns(new_rec.alias("_new"), start.alias("_start"))
    j = j.with_columns(pl.when(pl.col("_new")).then(pl.col("_start")).forward_fill().over("_run").alias("_in"))
    j = j.with_columns((pl.col("_in") & ~pl.col("_new")).alias("_cont"))
    if not j["_cont"].any():
        return recs
    return merge_blocks(recs, df, j, ["_run"])


def merge_blocks(recs: pl.DataFrame, df: pl.DataFrame, j: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """`recs` with each block of `j` (its rows of `df`, `recs` with a row index `_i`, marked `_cont` where a row
    continues the block before it) made one record: the block's first row keeps its place and takes the block's
    message and last line; the others go. `by`: the columns a block never crosses."""
    j = j.with_columns((~pl.col("_cont")).cum_sum().over(by).alias("_blk"))
    merged = (j.group_by([*by, "_blk"], maintain_order=True)
              .agg(pl.col("_i").first(), pl.col("line_end").max().alias("_end"),
                   pl.col("message").str.join("\n").alias("_msg"), pl.len().alias("_n"))
              .filter(pl.col("_n") > 1).select("_i", "_end", "_msg"))
    gone = j.filter(pl.col("_cont")).get_column("_i")
    out = (df.filter(~pl.col("_i").is_in(gone.implode()))
           .join(merged, on="_i", how="left", maintain_order="left"))
    return out.with_columns(pl.coalesce(pl.col("_msg"), pl.col("message")).alias("message"),
                            pl.coalesce(pl.col("_end"), pl.col("line_end")).alias("line_end")).select(recs.columns)
