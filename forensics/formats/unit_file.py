"""Format `unit-file`: systemd unit files, `systemctl cat` output and `grep ExecStart` output.

`# /etc/systemd/system/x.service` (systemctl cat), a `path:` prefix (grep over several files) or the
file's own name gives the unit. A line ending in a backslash continues on the next line.
"""

from __future__ import annotations

import polars as pl

from .base import Continuation, HookedFormat, PostContext, Stamp

SUFFIX = r"(?:service|socket|timer|mount|target|path|slice|scope)"


class UnitFile(HookedFormat):
    def post(self, df: pl.DataFrame, ctx: PostContext) -> pl.DataFrame:
        name = ctx.path.rsplit("/", 1)[-1]
        own = name if pl.Series([name]).str.contains(r"\." + SUFFIX + "$")[0] else None
        from_comment = pl.col("msg").str.extract(r"^# /\S*/([^/\s]+\." + SUFFIX + ")", 1)
        from_grep = pl.col("file").str.extract(r"([^/\s]+\." + SUFFIX + ")$", 1)
        unit = pl.coalesce(from_grep, from_comment.forward_fill(), pl.lit(own, dtype=pl.String))
        return df.with_columns(unit.alias("unit"), pl.lit("systemd-unit").alias("ident"))


FORMAT = UnitFile(
    name="unit-file",
    description="systemd unit file, `systemctl cat UNIT` or `grep ExecStart /etc/systemd/system/*.service` "
                "output (`[Service]`, `ExecStart=...`, `# /etc/systemd/system/x.service`)",
    pattern=(r"^(?:(?P<file>/\S+?\." + SUFFIX + r"):)?(?P<msg>\[(?:Unit|Service|Install|Socket|Timer|Mount|Path|"
             r"Slice|Scope|Automount|Swap)\]|[A-Z]+[a-z][A-Za-z0-9]*=.*|# /\S+\." + SUFFIX + r"(?: \(.*\))?)$"),
    stamp=Stamp.NONE,
    continuation=Continuation.NONE,
    priority=35,
    detect_weight=0.8,
    example="ExecStart=/root/venv_sglang211/bin/python -m sglang.launch_server --model-path /root/models/Kimi-K2.6 "
            "--tp-size 8 --mem-fraction-static 0.90",
)
