"""Who else held the GPU when CUDA ran out of memory.

    fields = others_fields(oom_fields)              # derived fields of a cuda_oom event (pure)
    view = with_holders(records, events, view)      # the same, with what the store shows of each other pid

PyTorch (2.1 and later) ends its CUDA out-of-memory message with the driver's list of the GPU's processes
(NVML): `Process 48391 has 74.21 GiB memory in use. Including non-PyTorch memory, this process has 19.68 GiB
memory in use.` The entry of the process that failed is marked `this process` when its pid is the one NVML
reports, so every `Process N` entry is another process on the same GPU. Inside a container the pids differ (NVML
reports the host's), no entry is marked, and which entry is this process cannot be told: then nothing is said
about other processes. When the others held enough that the allocation would have fit without them, and a
noticeable share of the GPU, they, not the server's memory flags, are the cause (`held_by_others: yes`, which the
`cuda_oom.held_by_others` correlation reads). The store is then asked who each pid was: lines it logged (and the
unit they belong to), the kernel's OOM reports that list it, and how that unit ended before the OOM (a unit
whose main process died and whose control group systemd failed to kill leaves its other processes running).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import polars as pl

from .correlate import human_seconds
from .eventview import EventView, unit_of_cgroup
from .casts import cast_bytes
from .sizes import human_size

_ENTRY = re.compile(r"(?:Process (\d+)|Including non-PyTorch memory, this process) has "
                    r"([0-9.]+ (?:[KMGTP]iB|bytes)) memory in use\.")
SHARE = 0.05            # the others must hold this share of the GPU at least to be the cause
MAX_PIDS = 3            # the others named, largest first
LOOK_BACK = timedelta(days=2)   # how far back the store is asked about a pid
CLEANUP = timedelta(minutes=1)   # systemd's cleanup of a unit's control group follows its end within this
MAIN_END_KINDS = ("service_killed", "service_exited", "service_core_dumped")
END_KINDS = ("service_killed", "service_exited", "service_core_dumped", "service_failed", "service_stopped")


@dataclass(frozen=True)
class GpuProcess:
    """An entry of PyTorch's list: pid None is the process that ran out of memory."""

    pid: int | None
    used: int


def processes(text: str | None) -> list[GpuProcess]:
    """The entries of the `procs` field (`Process N has X memory in use. ...`), in the order printed."""
    out = []
    for m in _ENTRY.finditer(text or ""):
        used = cast_bytes(m.group(2))
        if used is not None:
            out.append(GpuProcess(int(m.group(1)) if m.group(1) else None, used))
    return out


def others_of(fields: Mapping[str, Any]) -> list[GpuProcess]:
    """The other processes of the GPU, largest first: only when the list marks this process (else none)."""
    procs = processes(fields.get("procs"))
    if not any(p.pid is None for p in procs):
        return []
    return sorted((p for p in procs if p.pid is not None), key=lambda p: (-p.used, p.pid))


def others_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Derived fields of a cuda_oom event: `others_text` (`pid 48391 had 74.21 GiB in use`), `others_pids`,
    `others_gib`, and `held_by_others: yes` when the allocation would have fit without them and they held
    `SHARE` of the GPU at least. Empty when PyTorch's list names no other process."""
    others = others_of(fields)
    if not others:
        return {}
    total = sum(p.used for p in others)
    named = others[:MAX_PIDS]
    if len(others) == 1:
        text = f"pid {named[0].pid} had {human_size(named[0].used)} in use"
    else:
        listed = ", ".join(f"{p.pid} ({human_size(p.used)})" for p in named)
        more = f" and {len(others) - len(named)} more" if len(others) > len(named) else ""
        text = f"pids {listed}{more} had {human_size(total)} in use"
    out: dict[str, Any] = {"others_text": text, "others_pids": ",".join(str(p.pid) for p in named),
                           "others_gib": f"{total / 2**30:.2f}",
                           "holders_text": ""}     # who they were: filled from the store (with_holders)
    tried, free, cap = (fields.get(k) for k in ("tried_bytes", "free_bytes", "total_bytes"))
    if all(isinstance(v, int) for v in (tried, free, cap)) and free + total >= tried and total >= SHARE * cap:
        out["held_by_others"] = "yes"
    return out


# ----------------------------------------------------------------------------------------------------------
# who each other pid was, as the store shows it


@dataclass(frozen=True)
class Listed:
    """A kernel OOM report whose task table lists the pid."""

    t: datetime
    path: str
    line: int
    line_end: int
    name: str                  # the task's name (comm, 15 characters)
    victim: str                # `pid 48213 of sglang-k26-eagle3.service`
    victim_unit: str | None
    memcg_unit: str | None     # a cgroup-limit OOM lists the tasks of that cgroup only: the pid's unit


@dataclass(frozen=True)
class Seen:
    """What the store shows of one pid before the OOM."""

    pid: int
    used: int
    unit: str | None = None                               # its unit, from its lines or a cgroup OOM's task table
    ident: str | None = None
    last: tuple[datetime, str, int] | None = None        # its last line: time, path, line
    listed: Listed | None = None
    ended: tuple[datetime, str, int, str] | None = None   # the unit's end: time, path, line, title
    cgroup: tuple[str, int, str] | None = None            # systemd's `Failed to kill control group`: path, line, error
    restarted: datetime | None = None                     # the unit started again after the pid's last line

    @property
    def suspect(self) -> str | None:
        """The unit the pid may be of, when its own unit is unknown: the unit whose process the OOM report that
        lists it killed (a global OOM lists every task of the host, so this is a lead, not a fact)."""
        return None if self.unit else self.listed.victim_unit if self.listed else None


def _clock(t: datetime) -> str:
    u = t.astimezone(timezone.utc)
    return f"{u.hour:02d}:{u.minute:02d}:{u.second:02d}"


def _where(path: str, line: int, end: int | None = None) -> str:
    return f"`{path.rsplit('/', 1)[-1]}:{line}{f'-{end}' if end and end != line else ''}`"


def _row(pids: Sequence[int]) -> str:
    # a row of the kernel's task table: `[  48391]     0 48391 131620148 ... sglang::schedul`
    alt = "|".join(str(p) for p in pids)
    return rf"^\[\s*({alt})\]\s+\d+\s+({alt})\s"


def look_up(records: pl.LazyFrame, events: pl.LazyFrame, oom: EventView,
            others: Sequence[GpuProcess]) -> list[Seen]:
    """What `records` and `events` (host and unit filled) show of each of `others` on the OOM's host in the
    `LOOK_BACK` before it."""
    pids = [p.pid for p in others if p.pid is not None]
    if oom.ts is None or not pids:
        return []
    host = pl.col("host") == oom.host if oom.host is not None else pl.col("host").is_null()
    timed = pl.col("ts").is_between(pl.lit(oom.ts - LOOK_BACK), pl.lit(oom.ts))
    rows, table, reports = pl.collect_all([
        records.filter(timed & host & pl.col("pid").is_in(pids))
        .group_by("pid").agg(pl.all().sort_by("ts", "line").last())
        .select("pid", "ts", "path", "line", "unit", "ident"),
        records.filter(timed & host & (pl.col("ident") == "kernel")
                       & pl.col("message").fill_null("").str.contains(_row(pids)))
        .select("path", "line", "message").sort("path", "line"),
        events.filter(timed & host & (pl.col("kind") == "oom_kill"))
        .select("ts", "path", "line", "line_end", "unit", "pid", "fields").sort("ts", "line")])
    last = {r["pid"]: r for r in rows.iter_rows(named=True)}
    listed: dict[int, Listed] = {}
    row = re.compile(_row(pids))
    for path, line, message in table.iter_rows():
        m = row.match(message or "")
        rep = next((r for r in reports.iter_rows(named=True)
                    if r["path"] == path and r["line"] <= line <= (r["line_end"] or r["line"])), None)
        if m is None or rep is None:
            continue
        fields = json.loads(rep["fields"] or "{}")
        memcg = fields.get("oom_memcg") if fields.get("constraint") == "memcg" else None
        victim = f"pid {rep['pid']}" + (f" of {rep['unit']}" if rep["unit"] else "")
        listed[int(m.group(1))] = Listed(t=rep["ts"], path=path, line=rep["line"], line_end=rep["line_end"],
                                         name=(message or "").split()[-1], victim=victim, victim_unit=rep["unit"],
                                         memcg_unit=unit_of_cgroup(memcg))
    out = []
    for p in others:
        seen = Seen(pid=p.pid, used=p.used, listed=listed.get(p.pid))  # type: ignore[arg-type]
        r = last.get(p.pid)
        if r is not None:
            seen = replace(seen, unit=r["unit"], ident=r["ident"], last=(r["ts"], r["path"], r["line"]))
        if seen.unit is None and seen.listed is not None and seen.listed.memcg_unit:
            seen = replace(seen, unit=seen.listed.memcg_unit)
        out.append(seen)
    units = sorted({u for s in out for u in (s.unit, s.suspect) if u})
    if units:
        ends = (events.filter(host & pl.col("unit").is_in(units) & timed
                              & pl.col("kind").is_in([*END_KINDS, "cgroup_kill_failed", "service_started"]))
                .select("ts", "kind", "unit", "title", "fields", "path", "line").sort("ts", "line").collect())
        out = [_ended(s, ends) for s in out]
    return out


def _ended(seen: Seen, ends: pl.DataFrame) -> Seen:
    """How the pid's unit (or suspected unit) ended after its last sign: the first end, systemd's failure to kill
    the control group right after it, and a start of the unit again (the pid was an earlier run's)."""
    unit = seen.unit or seen.suspect
    signs = [t for t in (seen.last[0] if seen.last else None, seen.listed.t if seen.listed else None) if t]
    if not unit or not signs:
        return seen
    after = max(signs)
    main_end = False
    for t, kind, u, title, fields, path, line in ends.iter_rows():
        if u != unit or t < after:
            continue
        if kind == "service_started":
            if seen.restarted is None:
                seen = replace(seen, restarted=t)
        elif kind == "cgroup_kill_failed":
            # systemd's cleanup right after the end (the same second, or the next few)
            if seen.cgroup is None and seen.ended is not None and t <= seen.ended[0] + CLEANUP:
                err = json.loads(fields or "{}").get("error") or ""
                seen = replace(seen, cgroup=(path, line, str(err)))
        elif kind in END_KINDS and (seen.ended is None or (t <= seen.ended[0] + CLEANUP and not main_end)):
            # how the main process ended, else the last word of a stop (`Stopping`, `Deactivated`, `Stopped`)
            seen = replace(seen, ended=(t, path, line, title or kind))
            main_end = kind in MAIN_END_KINDS
    return seen


def describe(seen: Sequence[Seen], oom: EventView) -> str:
    """A few sentences per pid: who it was and why it could still hold the GPU."""
    return " ".join(_one(s, oom) for s in seen)


def _one(s: Seen, oom: EventView) -> str:
    who = f"Process {s.pid} ({human_size(s.used)})"
    facts = []
    if s.last is not None:
        t, path, line = s.last
        whose = f" as {s.unit}'s" if s.unit else f" as `{s.ident}`" if s.ident else ""
        facts.append(f"logged{whose} until {_clock(t)} UTC ({_where(path, line)})")
    if s.listed is not None:
        ls = s.listed
        facts.append(f"is listed as `{ls.name}` in the kernel's OOM report at {_clock(ls.t)} "
                     f"({_where(ls.path, ls.line, ls.line_end)}), "
                     + (f"among the tasks of {ls.memcg_unit}'s memory cgroup" if ls.memcg_unit else
                        f"the report in which the OOM killer killed {ls.victim}"))
    if not facts:
        return (f"{who} is in none of the ingested logs of {oom.host or 'this host'}: `ps -o pid,ppid,stat,lstart,"
                f"cgroup,args -p {s.pid}` on the host says what it is, if it still runs.")
    text = f"{who} {' and '.join(facts)}."
    unit = s.unit or s.suspect
    if unit and s.ended is not None:
        t, path, line, title = s.ended
        gap = human_seconds((oom.ts - t).total_seconds()) if oom.ts else "much"
        what = title.split(": ", 1)[1] if title.startswith(unit + ": ") else title
        text += f" {unit} ended at {_clock(t)} ({what[:1].lower() + what[1:]}, {_where(path, line)})"
        if s.cgroup is not None:
            cpath, cline, err = s.cgroup
            text += (f" and systemd failed to kill the rest of its control group ({_where(cpath, cline)}"
                     f"{': ' + err if err else ''})")
            outlived = f"it outlived its unit and still held its GPU memory {gap} later"
        else:
            outlived = (f"it still held GPU memory {gap} later, so it outlived its unit (a process that left the "
                        "unit's control group, `KillMode=process` or `none`, or one stuck in the driver, which even "
                        "SIGKILL cannot end)")
        text += (f": pid {s.pid} {outlived.removeprefix('it ')}." if s.unit else
                 f": if pid {s.pid} was one of its processes (nothing in the logs names its unit), {outlived}.")
    elif s.unit and s.restarted is not None:
        text += f" {s.unit} was started again at {_clock(s.restarted)}: pid {s.pid} was left over from its earlier run."
    elif s.unit and s.unit != oom.entities.get("unit"):
        text += f" Nothing in the logs shows {s.unit} ending: two servers shared the GPU."
    return text


def short(seen: Sequence[Seen]) -> str:
    """The headline's words for the largest other process: `pid 48391 of sglang-k26-eagle3.service`."""
    if not seen:
        return ""
    s = seen[0]
    return f"pid {s.pid} of {s.unit}" if s.unit else f"pid {s.pid}"


def with_holders(records: pl.LazyFrame, events: pl.LazyFrame, oom: EventView) -> EventView:
    """The CUDA OOM view with `holders_text` and `holders_short` when PyTorch's list names other processes."""
    others = others_of(oom.fields)
    if not others or oom.ts is None:
        return oom
    seen = look_up(records, events, oom, others[:MAX_PIDS])
    return replace(oom, fields={**oom.fields, "holders_text": describe(seen, oom), "holders_short": short(seen)})
