"""Journal tracebacks made one record again (`normalise._merge_journal_blocks`): the run-based version (blocks
looked for only in runs of consecutive rows of one process that hold a block start) gives exactly what the
reference gives, the earlier version that looked at every row of every process that logged a block start (with
one difference: a process whose host or identifier is null is a process too; the earlier version's join left
those out, so their tracebacks stayed one record per line)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.formats import JOURNAL_TEXT
from forensics.normalise import _BLOCK_RX, BLOCK_START, KEY, NEW_RECORD, _merge_journal_blocks, merge_blocks

T0 = datetime(2025, 5, 25, 20, 0, tzinfo=timezone.utc)


def reference(recs: pl.DataFrame) -> pl.DataFrame:
    """The earlier version, kept as the reference: every row of each (host, ident, pid) that logged a block start
    in the batch, windows over the process (the merge of the blocks found is `merge_blocks`, shared)."""
    journal = pl.col("format").is_in(list(JOURNAL_TEXT)) & pl.col("pid").is_not_null()
    keys = recs.filter(journal & pl.col("message").str.contains(_BLOCK_RX)).select(KEY).unique()
    if keys.height == 0:
        return recs
    df = recs.with_row_index("_i")
    j = df.filter(journal).join(keys, on=KEY, how="semi", nulls_equal=True)
    gap = (pl.col("ts") - pl.col("ts").shift(1).over(KEY)).dt.total_seconds().abs()
    apart = (pl.col("_i") - pl.col("_i").shift(1).over(KEY)).ne(1).fill_null(True)
    new_rec = (pl.col("message").str.contains(NEW_RECORD) | gap.is_null() | (gap > 2) | apart)
    start = pl.col("message").str.contains(BLOCK_START)
    j = j.with_columns(new_rec.alias("_new"), start.alias("_start"))
    j = j.with_columns(pl.when(pl.col("_new")).then(pl.col("_start")).forward_fill().over(KEY).alias("_in"))
    j = j.with_columns((pl.col("_in") & ~pl.col("_new")).alias("_cont"))
    if not j["_cont"].any():
        return recs
    return merge_blocks(recs, df, j, KEY)  # shared: the property is about which rows form a block


MESSAGES = ["Traceback (most recent call last):", '  File "x.py", line 1, in f', "    raise RuntimeError()",
            "RuntimeError: boom", "Exception raised from c10 at x.cpp:1", "in the middle: Exception raised from x",
            "[2025-05-25 20:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            "INFO:     127.0.0.1 - GET /health", "[rank0]: NCCL error", "E0525 20:00:00.1 x.cc:1] glog", "plain line",
            ""]
PROCS = [("h1", "python3", 7), ("h1", "python3", 8), ("h1", "sglang", 7), ("h2", "python3", 7), (None, "python3", 7),
         ("h1", None, 9), ("h1", "python3", None)]
row = st.tuples(st.sampled_from(PROCS), st.sampled_from(MESSAGES), st.sampled_from([0, 0, 0, 1, 3, None]),
                st.sampled_from(["journal-short-iso", "journal-short", "sglang", None]), st.integers(1, 3))


def frame(rows: list) -> pl.DataFrame:
    t, line, out = T0, 1, []
    for (host, ident, pid), msg, step, fmt, span in rows:
        t = t + timedelta(seconds=step) if step is not None else t
        out.append({"host": host, "ident": ident, "pid": pid, "message": msg, "format": fmt,
                    "ts": None if step is None else t, "line": line, "line_end": line + span - 1, "unit": None})
        line += span
    return pl.DataFrame(out, schema={"host": pl.String, "ident": pl.String, "pid": pl.Int64, "message": pl.String,
                                     "format": pl.String, "ts": pl.Datetime("us", "UTC"), "line": pl.Int64,
                                     "line_end": pl.Int64, "unit": pl.String})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(row, min_size=1, max_size=40))
def test_runs_give_what_every_row_of_the_process_gives(rows: list) -> None:
    recs = frame(rows)
    assert _merge_journal_blocks(recs).equals(reference(recs))


def test_a_block_is_one_record_and_stops_at_another_process_or_a_new_record() -> None:
    """An example the property would find too, spelled out: a traceback of pid 7 (three lines, then an SGLang
    record that starts a new one), interrupted once by pid 8 (which ends it: the rest are records of their own)."""
    p7, p8 = (("h", "python3", 7), ("h", "python3", 8))
    j = "journal-short-iso"
    rows = [(p7, "Traceback (most recent call last):", 0, j, 1), (p7, '  File "x.py", line 1, in f', 0, j, 1),
            (p7, "RuntimeError: boom", 1, j, 1), (p7, "[2025-05-25 20:00:01 TP0] next record", 0, j, 1),
            (p7, "Traceback (most recent call last):", 0, j, 1), (p8, "other process", 0, j, 1),
            (p7, '  File "y.py", line 2, in g', 0, j, 1)]
    out = _merge_journal_blocks(frame(rows))
    assert out["line"].to_list() == [1, 4, 5, 6, 7]
    assert out["line_end"].to_list() == [3, 4, 5, 6, 7]
    assert out["message"][0] == 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nRuntimeError: boom'
    assert out.equals(reference(frame(rows)))


def test_a_line_of_another_format_is_no_part_of_a_journal_block() -> None:
    """A traceback start that is not a journal line (an SGLang log line of the same host, name and pid) starts no
    block, and the journal lines after it are records of their own; the journal's own traceback after them is one."""
    p, j = ("h", "python3", 7), "journal-short-iso"
    rows = [(p, "Traceback (most recent call last):", 0, "sglang", 1), (p, '  File "x.py", line 1, in f', 0, j, 1),
            (p, "RuntimeError: boom", 0, j, 1), (p, "Traceback (most recent call last):", 0, j, 1),
            (p, '  File "y.py", line 2, in g', 0, j, 1)]
    out = _merge_journal_blocks(frame(rows))
    assert out["line_end"].to_list() == [1, 2, 3, 5]
    assert out.equals(reference(frame(rows)))
