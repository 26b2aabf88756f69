"""vLLM's repeated prefix: its NewLineFormatter prints the whole prefix again on every line of a multi-line
message, so `logger.exception("EngineCore encountered a fatal error.")` reads

    (EngineCore_DP0 pid=413) ERROR 05-25 20:16:40 [core.py:710] EngineCore encountered a fatal error.
    (EngineCore_DP0 pid=413) ERROR 05-25 20:16:40 [core.py:710] Traceback (most recent call last):
    (EngineCore_DP0 pid=413) ERROR 05-25 20:16:40 [core.py:710]   File ".../core.py", line 701, in run_engine_core
    (EngineCore_DP0 pid=413) ERROR 05-25 20:16:40 [core.py:710]     engine_core.run_busy_loop()
    (EngineCore_DP0 pid=413) ERROR 05-25 20:16:40 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. ...

A line whose prefix is that of the last prefixed line before it, and whose text reads as the rest of a message
(a traceback's lines: `Traceback (most recent call last):`, an indented line, the chained-exception lines, the
exception line after an indented one), has the prefix taken off: it is then no record of its own but a line of
the message before it (the `vllm` format's continuation). Lines of one prefix that each start a message (a loop
logging `Route: /docs, Methods: GET` in the same second) stay records. The last prefix is kept across batches.
"""

from __future__ import annotations

import polars as pl

from .formats.vllm import HEAD, PROCESS

PREFIX = "^((?:" + PROCESS + ")?" + HEAD + ")"
# what a message must start with to hold the prefix: a cheap test first
START = r"^(?:\([A-Za-z_][\w.\-]* (?:rank=\d+ )?pid=\d|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d )"
_REST = (r"^(?:\s|Traceback \(most recent call last\):|During handling of the above exception|"
         r"The above exception was the direct cause|$)")
_EXCEPTION = r"^[A-Za-z_][\w.]*(?::|$)"


def continues(pfx: pl.Series, before: pl.Series, rest: pl.Series) -> pl.Series:
    """Which lines continue the message before them: their prefix (`pfx`, null for none) is `before` (the last
    prefix before them) and their text after it (`rest`) reads as the rest of a message."""
    same = pfx.is_not_null() & (pfx == before).fill_null(False)
    part = same & rest.str.contains(_REST)
    indented = (part & rest.str.contains(r"^\s")).shift(1, fill_value=False)   # the exception line after it
    return part | (same & indented & rest.str.contains(_EXCEPTION))


class Repeats:
    """The pass over a stream of (`line`, `text`) batches: `take` each batch before parsing."""

    def __init__(self) -> None:
        self.last: str | None = None     # the prefix of the last prefixed line seen
        self.lines = 0                   # lines whose repeated prefix was taken off

    def take(self, batch: pl.DataFrame) -> pl.DataFrame:
        if batch.height == 0:
            return batch
        text = batch.get_column("text")
        pfx = text.str.extract(PREFIX, 1)
        if pfx.null_count() == pfx.len():
            return batch
        before = pfx.forward_fill().shift(1, fill_value=self.last)
        self.last = pfx.drop_nulls()[-1]
        rest = text.str.slice(pfx.str.len_chars().fill_null(0))
        part = continues(pfx, before, rest)
        n = int(part.sum())
        if n == 0:
            return batch
        self.lines += n
        return batch.with_columns(pl.when(part).then(rest).otherwise(text).alias("text"))
