"""A pasted terminal session: the unit a shell command names is the unit of the answers printed under it.

`$ ssh host "systemctl is-active sglang-k26.service; grep ExecStart /etc/systemd/system/sglang-k26.service"`
is followed by `failed` (a `systemctl-is-active` record) and `ExecStart=...` (a `unit-file` record): neither line
names its unit, the command above them does. Each prompt line (`$ cmd`, `user@host:~$ cmd`, `root@host:~# cmd`)
sets the unit of the records after it, up to the next prompt, when its command names exactly one unit
(`systemctl is-active|is-failed|status|show|cat|start|stop|restart UNIT`, `journalctl -u UNIT`, a unit file's
path); a prompt that names none or several sets none. Only the records of formats that cannot name their unit
themselves take it. Within one batch of the source (4 MiB): a prompt cut from its answers by a batch's end leaves
them without a unit, as before.
"""

from __future__ import annotations

import polars as pl
import regex

PROMPT = r"^(?:\$|[\w.\-]+@[\w.\-]+(?::\S*)?[$#]) \S"
# the answers a command prints that name no unit themselves
TAKERS = ("systemctl-is-active", "unit-file")
_UNIT = r"[\w@.\-:\\]+"
_NAMES = regex.compile(
    r"\bsystemctl\s+(?:--?[\w-]+(?:=\S+)?\s+)*(?:is-active|is-failed|status|show|cat|start|stop|restart)"
    rf"(?P<u>(?:\s+(?!-){_UNIT}(?=[\s;&|\"')]|$))+)"
    rf"|\bjournalctl\b[^;&|\"']*?(?:\s-u\s*|\s--unit[= ])(?P<j>{_UNIT})"
    rf"|/(?:etc|lib|usr/lib|run)/systemd/system/(?P<f>{_UNIT}\.(?:service|socket|timer|mount|target|path))")
_TYPES = (".service", ".socket", ".timer", ".mount", ".target", ".path", ".slice", ".scope", ".swap", ".device",
          ".automount")


def _full(name: str) -> str:
    return name if name.endswith(_TYPES) else name + ".service"


def command_unit(command: str) -> str | None:
    """The one unit a shell command names, or None (none, or several)."""
    units: set[str] = set()
    for m in _NAMES.finditer(command):
        if m.group("u"):
            units.update(_full(x) for x in m.group("u").split())
        for g in ("j", "f"):
            if m.group(g):
                units.add(_full(m.group(g)))
    return units.pop() if len(units) == 1 else None


def prompt_units(recs: pl.DataFrame) -> pl.DataFrame:
    """Give the unit-less answers of a terminal session the unit of the command above them (module doc)."""
    if "format" not in recs.columns or recs.height == 0:
        return recs
    text = recs.select((pl.col("format") == "text").arg_true().alias("i"))["i"]   # few rows: the pattern on those
    hits = recs[text].get_column("message").str.contains(PROMPT).fill_null(False)
    if not hits.any():
        return recs
    if "line" in recs.columns and not recs.get_column("line").is_sorted():   # the fill runs in line order
        return prompt_units(recs.with_row_index("_pr").sort("line")).sort("_pr").drop("_pr")
    take = recs.select((pl.col("unit").is_null() & pl.col("format").is_in(TAKERS)).alias("t"))["t"]
    if not take.any():
        return recs
    idx = text.filter(hits)
    cmds = recs[idx]["message"].to_list()
    # "" where a prompt names no unit, so that the fill stops there
    marks = pl.repeat(None, recs.height, dtype=pl.String, eager=True).scatter(
        idx, pl.Series([command_unit(c) or "" for c in cmds], dtype=pl.String))
    unit = marks.fill_null(strategy="forward").replace("", None)
    return recs.with_columns(pl.when(take).then(unit).otherwise(pl.col("unit")).alias("unit"))
