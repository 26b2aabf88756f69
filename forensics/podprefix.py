"""`kubectl logs --prefix`: `[pod/NAME/CONTAINER] ` before every line, the pod naming the record's host.

`kubectl logs -l app=sglang --all-containers --prefix [--timestamps]` interleaves the lines of several pods,
each behind the name of its pod and container (kubectl's `addPrefixIfNeeded`). The prefix is taken off before
detection and parsing (what follows is a `container` line with `--timestamps`, else the process's own line:
SGLang's, uvicorn's, ...), and the pod becomes the host of the records that start on those lines (unless their
format names one): each pod is a server of its own, so its tracebacks and incidents stay apart from the others'.
"""

from __future__ import annotations

import polars as pl

PREFIX = r"^\[pod/([^/\]\s]+)/([^\]\s]*)\] "
_START = "[pod/"


def strip_series(text: pl.Series) -> pl.Series:
    """A sample's lines without the prefix (detection)."""
    if not text.str.starts_with(_START).any():
        return text
    return text.str.replace(PREFIX, "")


class Pods:
    """The prefix over a stream of (`line`, `text`) batches: `take` each batch before parsing, `name` its
    records after (the pods of lines a parse carries to the next batch are kept until their records come)."""

    def __init__(self) -> None:
        self.pending: pl.DataFrame | None = None   # (line, pod) of lines whose records have not come yet
        self.lines = 0                             # lines that held the prefix

    def take(self, batch: pl.DataFrame) -> pl.DataFrame:
        """The batch with the prefix taken off its lines; their pods kept for `name`."""
        text = batch.get_column("text")
        if not text.str.starts_with(_START).any():
            return batch
        pod = text.str.extract(PREFIX, 1)
        held = pod.is_not_null()
        n = int(held.sum())
        if n == 0:
            return batch
        self.lines += n
        pods = pl.DataFrame({"line": batch.get_column("line"), "_pod": pod}).filter(held)
        self.pending = pods if self.pending is None else pl.concat([self.pending, pods])
        return batch.with_columns(pl.when(held).then(text.str.replace(PREFIX, "")).otherwise(text).alias("text"))

    def name(self, recs: pl.DataFrame) -> pl.DataFrame:
        """The records, each with the pod of its first line as its host when its format named none."""
        if self.pending is None:
            return recs
        return (recs.join(self.pending, on="line", how="left", maintain_order="left")
                .with_columns(pl.coalesce(pl.col("host"), pl.col("_pod")).alias("host")).drop("_pod"))

    def keep_from(self, carry: pl.DataFrame) -> None:
        """Forget the pods of the lines before `carry` (the lines parsed again with the next batch)."""
        if self.pending is not None:
            self.pending = (self.pending.filter(pl.col("line") >= carry.get_column("line").min()) if carry.height
                            else None)
