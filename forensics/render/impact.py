"""Impact: for each unit of an incident, when it went down, whether it came back, and for how long."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePath

from forensics.model import Event, Incident
from forensics.render.timefmt import parse_ts

DOWN_KINDS = frozenset({"service_killed", "service_exited", "service_core_dumped", "service_failed",
                        "service_start_failed", "start_limit_hit", "unit_oom_killed", "oomd_kill"})
START_KINDS = frozenset({"service_started"})
READY_KINDS = frozenset({"server_ready"})


@dataclass(frozen=True)
class Run:
    """One start of a unit: when it started, became ready, and went down (each may be unknown)."""

    started: datetime | None
    ready: datetime | None
    down: datetime | None
    down_title: str = ""        # the event that shows it going down


@dataclass(frozen=True)
class Outage:
    unit: str
    host: str | None
    down: datetime
    down_title: str
    back: datetime | None        # the next start, or None: not back within the logs
    logs_end: datetime | None    # the last time the incident's sources cover

    @property
    def seconds(self) -> float | None:
        end = self.back or self.logs_end
        return None if end is None else max(0.0, (end - self.down).total_seconds())


@dataclass(frozen=True)
class UnitImpact:
    unit: str
    runs: tuple[Run, ...]
    outages: tuple[Outage, ...]


def logs_end(incident: Incident) -> datetime | None:
    ends = [parse_ts(s.last_ts) for s in incident.sources if s.last_ts]
    if incident.end:
        ends.append(parse_ts(incident.end))
    return max((e for e in ends if e is not None), default=None)


# An SGLang log's own server (no systemd unit names it): it starts loading (`Load weight begin` of rank 0; not its
# `server_args` dump, which an incident cites from hours before, without the lines around it), is ready at `The
# server is fired up and ready to roll!`, and goes down when the launcher receives SIGQUIT from a failed child
# (`Received sigquit from a child process`: it then kills the whole process tree).
SERVER_START_KINDS = frozenset({"server_start"})
SERVER_DOWN_KINDS = frozenset({"child_failed"})


def server_label(path: str) -> str:
    """How the impact names the SGLang server of a log that names no unit."""
    return f"SGLang server ({PurePath(path).name})"


def _runs(events: list[Event], starts: frozenset[str] = START_KINDS, downs: frozenset[str] = DOWN_KINDS
          ) -> list[Run]:
    runs: list[dict[str, object]] = []
    for e in events:
        ts = parse_ts(e.ts)
        if e.kind in starts:
            last = runs[-1] if runs else None
            if last is not None and last.get("started") and not last.get("ready") and not last.get("down"):
                continue          # `Starting X...` then `Started X.`: one start
            runs.append({"started": ts})
            continue
        if not runs:
            runs.append({"started": None})
        run = runs[-1]
        if e.kind in READY_KINDS and not run.get("ready") and not run.get("down"):
            run["ready"] = ts
        elif e.kind in downs and not run.get("down"):
            run["down"] = ts
            run["down_title"] = e.title
    return [Run(r.get("started"), r.get("ready"), r.get("down"), str(r.get("down_title", "")))  # type: ignore[arg-type]
            for r in runs]


def unit_impacts(incident: Incident) -> tuple[UnitImpact, ...]:
    """Each unit's runs and outages; then, for an SGLang log that names no unit, its server's, under
    `server_label` (when the server went down in the incident)."""
    end = logs_end(incident)
    groups: list[tuple[str, list[Event], frozenset[str], frozenset[str]]] = [
        (unit, [e for e in incident.events if e.unit == unit and e.ts], START_KINDS, DOWN_KINDS)
        for unit in incident.units]
    own = [e for e in incident.events if e.unit is None and e.format == "sglang" and e.ts]
    for path in sorted({e.path for e in own if e.kind in SERVER_DOWN_KINDS}):
        groups.append((server_label(path), [e for e in own if e.path == path], SERVER_START_KINDS, SERVER_DOWN_KINDS))
    out: list[UnitImpact] = []
    for unit, evs, starts, downs in groups:
        host = next((e.host for e in evs if e.host), None)
        runs = [r for r in _runs(evs, starts, downs) if r.started or r.ready or r.down]
        outages = []
        for i, r in enumerate(runs):
            if r.down is None:
                continue
            back = next((n.started for n in runs[i + 1:] if n.started), None)
            outages.append(Outage(unit, host, r.down, r.down_title, back, end))
        out.append(UnitImpact(unit, tuple(runs), tuple(outages)))
    return tuple(out)
