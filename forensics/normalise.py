"""Records -> normalised records, batch by batch: units named in systemd messages, SGLang ranks inside
journal lines, and tracebacks logged through the journal (one entry per line) made one record again.
Source-wide time fixes (boots, years) are in `timefix.py`.
"""

from __future__ import annotations

import polars as pl

from .formats import JOURNAL_TEXT
from .schema import RECORD_SCHEMA

UNIT_PREFIX = r"^([\w@.\-:\\]+\.(?:service|scope|slice|socket|timer|mount|target|path|device|swap|automount)): "
SGLANG_IN_MSG = r"^\[(\d{4}-\d{2}-\d{2}) \d{2}:\d{2}:\d{2}(?:\.\d+)?((?: (?:DP|PP|TP|EP|ATTN_CP|MOE_DP)\d+)*)\] "
NEW_RECORD = (r"^(\[\d{4}-\d{2}-\d{2} |\[rank\d+\]:|\[?[IWEF]\d{4} \d|INFO:|WARNING:|ERROR:|DEBUG:|CRITICAL:|"
              r"Traceback \(most recent call last\):|Exception raised from )")
BLOCK_START = r"Traceback \(most recent call last\):|^Exception raised from "


def normalise_batch(recs: pl.DataFrame) -> pl.DataFrame:
    """Per-batch fixes that need no knowledge of the rest of the source."""
    if recs.height == 0:
        return recs
    msg = pl.col("message")
    systemd_ident = pl.col("ident").str.starts_with("systemd").fill_null(False)
    recs = recs.with_columns(
        pl.coalesce(pl.col("unit"), pl.when(systemd_ident).then(msg.str.extract(UNIT_PREFIX, 1))).alias("unit"),
        pl.coalesce(pl.col("rank"), msg.str.extract(SGLANG_IN_MSG, 2).str.strip_chars().replace("", None))
        .alias("rank"),
    )
    journal = pl.col("format").is_in(list(JOURNAL_TEXT))
    if recs.select((journal & msg.str.contains(BLOCK_START)).any()).item():
        recs = _merge_journal_blocks(recs)
    return recs


def _merge_journal_blocks(recs: pl.DataFrame) -> pl.DataFrame:
    """A traceback logged through the journal is one entry per line; make it one record again.

    Within one (host, ident, pid), a block starts at `Traceback (most recent call last):` (or c10's
    `Exception raised from`) and takes the following entries of that process until one that starts a new
    log record (an SGLang/glog/uvicorn prefix) or a gap of more than 2 s."""
    key = ["host", "ident", "pid"]
    journal = pl.col("format").is_in(list(JOURNAL_TEXT)) & pl.col("pid").is_not_null()
    df = recs.with_row_index("_i").with_columns(journal.alias("_j"))
    j = df.filter(pl.col("_j"))
    gap = (pl.col("ts") - pl.col("ts").shift(1).over(key)).dt.total_seconds().abs()
    new_rec = (pl.col("message").str.contains(NEW_RECORD) | gap.is_null() | (gap > 2))
    start = pl.col("message").str.contains(BLOCK_START)
    j = j.with_columns(new_rec.alias("_new"), start.alias("_start"))
    j = j.with_columns(pl.when(pl.col("_new")).then(pl.col("_start")).forward_fill().over(key).alias("_in"))
    j = j.with_columns((pl.col("_in") & ~pl.col("_new")).alias("_cont"))
    if not j["_cont"].any():
        return recs
    j = j.with_columns((~pl.col("_cont")).cum_sum().over(key).alias("_blk"))
    cols = [c for c in RECORD_SCHEMA if c not in ("message", "line", "line_end")]
    merged = (j.group_by([*key, "_blk"], maintain_order=True)
              .agg(pl.col("_i").first(), pl.col("line").first(), pl.col("line_end").max(),
                   pl.col("message").str.join("\n"), *[pl.col(c).first() for c in cols if c not in key]))
    others = df.filter(~pl.col("_j"))
    out = pl.concat([others.select(["_i", *RECORD_SCHEMA]), merged.select(["_i", *RECORD_SCHEMA])])
    return out.sort("_i").drop("_i")
