"""Format `systemctl-show`: the output of `systemctl show UNIT...` (and `-p NAME`): one `Name=value` property a line.

What an engineer pastes when asked for `systemctl show sglang.service -p MemoryPeak -p Result` or the whole
property list. Each property is a record of its own, so the evidence cites its line. Several units are printed
one block each, blocks apart by a blank line; a block's unit is its `Id=` (printed near the block's end), else
its first `Names=`, else a unit named in the file's name.

Times, exact where systemd printed them (`format_timestamp`: `Sun 2025-05-25 20:17:19 UTC`, with `.123456` under
`--timestamp=us`, `@1748204239` under `--timestamp=unix`):
- a `...Timestamp=` property is at its value;
- an `Exec...={ path=... ; start_time=[...] ; stop_time=[...] ; pid=N ; code=killed ; status=9/KILL }` property
  (how that command's last run ended, systemd's `bus_print_property` in src/shared/bus-print-properties.c) is at
  its `stop_time`, or its `start_time` while it runs;
- `Result=` (why the last run failed; reset when the unit starts) is at the block's `InactiveEnterTimestamp=`,
  the moment the unit went inactive or failed and its result was set; `ts_anchor` says so.
Other properties have no time. A line that is no property (a shell prompt, a blank line) is a `text` record.
"""

from __future__ import annotations

import polars as pl

from ..schema import TimeSource
from ..timeparse import stamp_columns
from .base import Continuation, PostContext, Stamp, StructuredFormat, hold_back, no_records, with_text_records

PROPERTY = r"^(?P<key>[A-Z][A-Za-z0-9]*)=(?P<value>.*)$"
STAMP = (r"^(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<date>\d{4}-\d{2}-\d{2}) (?P<time>\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)"
         r" (?P<zone>[A-Za-z][A-Za-z0-9+\-/_]*)|@(?P<epoch>\d+(?:\.\d+)?))$")
# properties only a running manager prints (never a unit file's directives): what tells this output from a unit file
RUNTIME = (r"^(?:Id|Names|ActiveState|SubState|LoadState|UnitFileState|MainPID|ControlPID|ExecMainPID|ExecMainCode|"
           r"ExecMainStatus|Result|NRestarts|InvocationID|MemoryCurrent|MemoryPeak|ControlGroup|StatusErrno|"
           r"[A-Za-z]+Timestamp(?:Monotonic)?)=")
SECTION = r"^\[[A-Za-z]+\]$"
MOSTLY = 0.9
UNIT = r"([^/\s]+\.(?:service|socket|timer|mount|target|path|slice|scope|swap|device|automount))"


class SystemctlShow(StructuredFormat):
    def detect_score(self, lines: pl.Series) -> float:
        """The share of property lines, when nearly every line is one (at least MOSTLY): a terminal session that
        also holds `systemctl status` output or journal lines is read line by line by the line formats instead,
        where its properties are unit-file lines and the same rules read them."""
        head = lines.head(400)
        nonblank = head.filter(head.str.strip_chars() != "")
        if nonblank.len() == 0 or not nonblank.str.contains(RUNTIME).any() or nonblank.str.contains(SECTION).any():
            return 0.0
        share = float(nonblank.str.contains(PROPERTY).sum()) / nonblank.len()
        return share if share >= MOSTLY else 0.0

    def parse_batch(self, lines: pl.DataFrame, ctx: PostContext, final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Whole blocks become records; the lines from the batch's last blank line on wait for the next batch (the
        block they begin may go on there, its `Id=` still to come), unless this is the last."""
        text = pl.col("text")
        marked = lines.with_columns(text.str.contains(PROPERTY).fill_null(False).alias("_p"),
                                    (text.str.strip_chars() == "").fill_null(False).alias("_blank"))
        marked, carry = hold_back(marked, lines, "_blank", final)
        if marked is None or marked.height == 0:
            return no_records(), carry
        marked = marked.with_columns(pl.col("_blank").cum_sum().alias("_block"))
        props = marked.filter(pl.col("_p"))
        others = marked.filter(~pl.col("_p"))
        return with_text_records(self._records(props, ctx) if props.height else None, others), carry

    def _records(self, rows: pl.DataFrame, ctx: PostContext) -> pl.DataFrame:
        df = rows.with_columns(pl.col("text").str.extract_groups(PROPERTY).alias("_g")).unnest("_g")
        key, value = pl.col("key"), pl.col("value")

        def block_value(name: str) -> pl.Expr:
            return value.filter(key == name).first().over("_block")

        own = ctx.path.rsplit("/", 1)[-1]
        from_name = pl.Series([own]).str.extract(UNIT, 1)[0]
        unit = pl.coalesce(block_value("Id"), block_value("Names").str.extract(r"^(\S+)", 1),
                           pl.lit(from_name, dtype=pl.String))
        is_exec = key.str.starts_with("Exec") & value.str.starts_with("{ path=")
        ran = [value.str.extract(rf"; {w}_time=\[([^\]]*)\]", 1) for w in ("stop", "start")]
        ran = [pl.when(r.str.contains(STAMP)).then(r) for r in ran]
        inactive = block_value("InactiveEnterTimestamp")
        stamp = (pl.when(key.str.ends_with("Timestamp")).then(value)
                 .when(is_exec).then(pl.coalesce(*ran))
                 .when(key == "Result").then(inactive))
        df = df.with_columns(unit.alias("unit"), pl.when(stamp.str.contains(STAMP)).then(stamp).alias("_stamp"),
                             pl.when(is_exec).then(value.str.extract(r"; pid=([1-9][0-9]*) ;", 1))
                             .cast(pl.Int64, strict=False).alias("pid"),
                             (key == "Result").alias("_borrowed"))
        groups = df.select(pl.col("_stamp").str.extract_groups(STAMP).struct.unnest())
        full = stamp_columns(Stamp.FULL, groups.select("date", "time", "zone"), ctx.tz)
        epoch = stamp_columns(Stamp.EPOCH, groups.select("epoch"), ctx.tz)
        has = pl.col("_stamp").is_not_null()
        ts = pl.when(groups.get_column("epoch").is_not_null()).then(epoch.get_column("ts")).otherwise(full.get_column("ts"))
        src = (pl.when(groups.get_column("epoch").is_not_null()).then(epoch.get_column("ts_source"))
               .otherwise(full.get_column("ts_source")))
        df = df.with_columns(pl.when(has).then(ts).alias("ts"),
                             pl.when(has).then(src).otherwise(pl.lit(TimeSource.NONE.value)).alias("ts_source"))
        anchor = pl.when(pl.col("_borrowed") & has).then(pl.lit(
            "no time of its own: the unit's InactiveEnterTimestamp= (when it went inactive and this result was set)"))
        return df.select(
            "ts", "ts_source", pl.col("_stamp").alias("ts_text"), anchor.cast(pl.String).alias("ts_anchor"),
            pl.lit(None, dtype=pl.String).alias("boot_id"), pl.lit(None, dtype=pl.Float64).alias("mono"),
            pl.lit(None, dtype=pl.String).alias("host"), pl.lit("systemctl").alias("ident"), "pid", "unit",
            pl.lit(None, dtype=pl.String).alias("rank"), pl.lit(None, dtype=pl.String).alias("level"),
            pl.col("text").alias("message"), "line", pl.col("line").alias("line_end"), pl.lit(self.name).alias("format"))


FORMAT = SystemctlShow(
    name="systemctl-show",
    description="`systemctl show UNIT` (or `-p NAME`): `Name=value` properties, e.g. `Result=oom-kill`, "
                "`ExecMainExitTimestamp=Sun 2025-05-25 20:17:19 UTC`, `ExecStart={ ... ; code=killed ; status=9/KILL }`",
    pattern=PROPERTY,
    stamp=Stamp.FULL,
    continuation=Continuation.NONE,
    priority=4,
    example="ExecStart={ path=/opt/sglang/venv/bin/python3 ; argv[]=/opt/sglang/venv/bin/python3 -m sglang.launch_server "
            "--model-path /models/Qwen3-32B --tp-size 2 ; ignore_errors=no ; start_time=[Sun 2025-05-25 20:10:02 UTC] ; "
            "stop_time=[Sun 2025-05-25 20:17:19 UTC] ; pid=48213 ; code=killed ; status=9/KILL }",
)
