"""Impact: for each unit of an incident, when it went down, whether it came back, and for how long."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePath

from forensics.kubepods import container_id_of
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
    back: datetime | None        # the next start (a server's: when it was ready again), or None: not back in the logs
    logs_end: datetime | None    # the last time the incident's sources cover
    failed_restarts: int = 0     # a server's starts before `back` that went down before they were ready

    @property
    def seconds(self) -> float | None:
        end = self.back or self.logs_end
        return None if end is None else max(0.0, (end - self.down).total_seconds())


@dataclass(frozen=True)
class UnitImpact:
    unit: str
    runs: tuple[Run, ...]
    outages: tuple[Outage, ...]
    gave_up: datetime | None = None   # systemd stopped restarting it (`Start request repeated too quickly.`)


def logs_end(incident: Incident) -> datetime | None:
    ends = [parse_ts(s.last_ts) for s in incident.sources if s.last_ts]
    if incident.end:
        ends.append(parse_ts(incident.end))
    return max((e for e in ends if e is not None), default=None)


# A server's own log that names no unit (a plain SGLang or vLLM log): its server is named by the file, and its own
# lines say when it started, was ready and went down.
# - SGLang: it starts loading (`Load weight begin` of rank 0; not its `server_args` dump, which an incident cites
#   from hours before, without the lines around it), is ready at `The server is fired up and ready to roll!`, and
#   goes down when the launcher receives SIGQUIT from a failed child (`Received sigquit from a child process`: it
#   then kills the whole process tree).
# - vLLM: it starts at `vLLM API server version X`, is ready at `Starting vLLM API server on ADDRESS`, and goes down
#   when its engine core dies (`EngineCore encountered a fatal error.`, `EngineCore failed to start.`): the API
#   server then fails every request with EngineDeadError and shuts itself down (vllm/entrypoints/launcher.py). A
#   worker's exception (`WorkerProc hit an exception.`) takes the engine core down with it, which says so.
SERVER_START_KINDS = frozenset({"server_start"})


def _sglang_down(e: Event) -> bool:
    return e.kind == "child_failed"


def _vllm_down(e: Event) -> bool:
    return e.rule == "vllm.process_died" and str(e.fields.get("component") or "").endswith("EngineCore")


SERVERS: dict[str, tuple[str, Callable[[Event], bool]]] = {"sglang": ("SGLang", _sglang_down),
                                                           "vllm": ("vLLM", _vllm_down)}


def server_label(path: str, fmt: str) -> str:
    """How the impact names the server of a log (of format `fmt`) that names no unit."""
    return f"{SERVERS[fmt][0]} server ({PurePath(path).name})"


# A torchrun job's own log that names no unit: the job goes down when the agent reports its first failed worker
# (`failed (exitcode: -9) local_rank: 3 (pid: 48214) of binary: ...`: it then stops the other workers and exits).
def _job_down(e: Event) -> bool:
    return e.kind == "worker_failed"


def job_label(path: str) -> str:
    """How the impact names the torchrun job of a log that names no unit."""
    return f"torchrun job ({PurePath(path).name})"


def _unit_down(e: Event) -> bool:
    return e.kind in DOWN_KINDS


def _runs(events: list[Event], starts: frozenset[str] = START_KINDS, down: Callable[[Event], bool] = _unit_down,
          ready: frozenset[str] = READY_KINDS) -> list[Run]:
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
        if e.kind in ready and not run.get("ready") and not run.get("down"):
            run["ready"] = ts
        elif down(e) and not run.get("down"):
            run["down"] = ts
            run["down_title"] = e.title
    return [Run(r.get("started"), r.get("ready"), r.get("down"), str(r.get("down_title", "")))  # type: ignore[arg-type]
            for r in runs]


# A Kubernetes pod, as the kubelet tells it: a container of it started (`ContainerStarted`), the pod ready (its
# readiness probe succeeded), a container died (`ContainerDied`). Its containers' scopes are new on every restart,
# so the pod is what goes down and comes back; it is back when it is ready again, not when a container starts
# (a server in it loads its model first).
POD_KINDS = frozenset({"container_started", "container_ready", "container_died"})


def _container_down(e: Event) -> bool:
    return e.kind == "container_died"


def _pod_groups(incident: Incident) -> dict[str, list[Event]]:
    """The kubelet's lines of each pod whose container's death a conclusion explains, by `pod NAMESPACE/NAME` (a
    pod of another workload whose container ended in the window, a finished job's, is no outage of this one)."""
    pods: dict[str, list[Event]] = {}
    for e in incident.events:
        if e.kind in POD_KINDS and e.ts and e.fields.get("pod"):
            ns = e.fields.get("namespace")
            pods.setdefault(f"pod {ns + '/' if ns else ''}{e.fields['pod']}", []).append(e)
    explained = set(incident.symptoms)
    return {p: evs for p, evs in sorted(pods.items()) if any(_container_down(e) and e.id in explained for e in evs)}


def unit_impacts(incident: Incident) -> tuple[UnitImpact, ...]:
    """Each unit's runs and outages; then, for an SGLang or vLLM log that names no unit, its server's, under
    `server_label` (when the server went down in the incident); a torchrun job's that names no unit, under
    `job_label` (when a worker failed); then each Kubernetes pod's that lost a container
    (its outages last until it is ready again)."""
    end = logs_end(incident)
    pods = _pod_groups(incident)
    # a pod's container is told as the pod: its scope (systemd's `A process of this unit has been killed by the
    # OOM killer`) is no service of its own
    in_pods = {e.fields.get("container_id") for evs in pods.values() for e in evs if _container_down(e)} - {None}
    groups: list[tuple[str, list[Event], frozenset[str], Callable[[Event], bool], frozenset[str]]] = [
        (unit, [e for e in incident.events if e.unit == unit and e.ts], START_KINDS, _unit_down, READY_KINDS)
        for unit in incident.units if container_id_of(unit) not in in_pods]
    for fmt, (_, down) in SERVERS.items():
        own = [e for e in incident.events if e.unit is None and e.format == fmt and e.ts]
        for path in sorted({e.path for e in own if down(e)}):
            groups.append((server_label(path, fmt), [e for e in own if e.path == path], SERVER_START_KINDS, down,
                           READY_KINDS))
    jobs = [e for e in incident.events if e.unit is None and e.ts and _job_down(e)]
    for path in sorted({e.path for e in jobs}):
        groups.append((job_label(path), [e for e in jobs if e.path == path], frozenset(), _job_down, frozenset()))
    for pod, evs in pods.items():
        groups.append((pod, evs, frozenset({"container_started"}), _container_down, frozenset({"container_ready"})))
    out: list[UnitImpact] = []
    for unit, evs, starts, down, ready in groups:
        host = next((e.host for e in evs if e.host), None)
        runs = [r for r in _runs(evs, starts, down, ready) if r.started or r.ready or r.down]
        served = _tells_ready(evs) or unit.startswith("pod ")
        outages = _served_outages(unit, host, runs, end) if served else _outages(unit, host, runs, end)
        gave_up = next((parse_ts(e.ts) for e in evs if e.kind == "start_limit_hit"), None)
        out.append(UnitImpact(unit, tuple(runs), tuple(outages), gave_up))
    return tuple(out)


def _tells_ready(evs: list[Event]) -> bool:
    """Whether the unit's lines in the incident would show it ready again: a readiness line, or the server's own
    output (SGLang's or vLLM's start, its launch arguments as it logs them). A unit file's `ExecStart=` says
    nothing of what was ingested, so it does not count."""
    return any(e.kind in READY_KINDS or e.kind in SERVER_START_KINDS
               or (e.kind == "server_config" and (e.rule or "").startswith(("sglang.", "vllm."))) for e in evs)


def _outages(unit: str, host: str | None, runs: list[Run], end: datetime | None) -> list[Outage]:
    """Each down, back at the next start."""
    out = []
    for i, r in enumerate(runs):
        if r.down is not None:
            back = next((n.started for n in runs[i + 1:] if n.started), None)
            out.append(Outage(unit, host, r.down, r.down_title, back, end))
    return out


def _served_outages(unit: str, host: str | None, runs: list[Run], end: datetime | None) -> list[Outage]:
    """A server's outages: from a down to the next time it was ready (a restart that went down before it was
    ready is part of the outage, counted), or to the end of the logs."""
    out = []
    i = 0
    while i < len(runs):
        r = runs[i]
        if r.down is None:
            i += 1
            continue
        j = next((k for k in range(i + 1, len(runs)) if runs[k].ready), None)
        last = j if j is not None else len(runs)
        failed = sum(1 for k in range(i + 1, last) if runs[k].down)
        out.append(Outage(unit, host, r.down, r.down_title, runs[j].ready if j is not None else None, end, failed))
        i = last
    return out
