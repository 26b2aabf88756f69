"""Clustering: an incident's events are the significant ones of a host (an error, a cause, an inference server's
unit exiting non-zero), each within a gap of the last; a stretch is cut where a failed server came back ready and
served before another failure, and clusters are merged when one finding binds events of both or a fallback unit
started after one died in the next."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .correlate import Finding, server_exit
from .eventview import EventView

UNDATED_LINES = 500   # untimed significant events this close in one source: one incident
CONTEXT_KINDS = frozenset({"server_config", "server_ready", "server_start", "service_started", "boot"})


@dataclass
class Cluster:
    """One host's significant events of one incident, in time order (untimed ones in line order)."""

    host: str
    events: list[EventView]

    @property
    def start(self) -> float | None:
        return min((e.t for e in self.events if e.t is not None), default=None)

    @property
    def end(self) -> float | None:
        return max((e.t for e in self.events if e.t is not None), default=None)

    @property
    def units(self) -> list[str]:
        return list(dict.fromkeys(e.entities["unit"] for e in self.events if e.entities.get("unit")))


def significant(e: EventView, timed: bool = True) -> bool:
    """An event that starts or extends an incident (timed, or untimed when `timed` is False): an error, a cause,
    or an inference server's unit exiting non-zero; never a context kind (a start, a launch configuration)."""
    return ((e.t is not None) == timed and e.kind not in CONTEXT_KINDS
            and (e.severity in ("error", "critical") or e.role == "cause"
                 or server_exit(e.kind, e.entities.get("unit"), e.t is not None, e.fields)))


STARTS = ("service_started", "server_start")


UP_S = 180.0   # a server that failed, came back ready and served this long had recovered (see `recovered`)


def _server_back(cur: Sequence[EventView], e: EventView, readies: Sequence[EventView], times: Sequence[float]
                 ) -> bool:
    """Whether a server that failed in `cur` (the same unit; an SGLang log's unit-less lines, the same file) logged
    `server_ready` after `cur`'s last event and then served UP_S or more before `e`. `readies`: the host's timed
    `server_ready` events, in time order, and `times` their times."""
    units = {x.entities.get("unit") for x in cur}
    paths = {x.path for x in cur if x.entities.get("unit") is None}

    def theirs(r: EventView) -> bool:
        u = r.entities.get("unit")
        return (u is not None and u in units) or (u is None and r.path in paths)

    return _served(readies, times, cur[-1].t, e.t, theirs)


def _served(readies: Sequence[EventView], times: Sequence[float], lo: float, hi: float,
            server: Callable[[EventView], bool]) -> bool:
    """Whether a `server_ready` of `readies` (in time order; `times` their times) that `server` takes for the
    server's came after `lo` and UP_S or more before `hi`: the server was back and served UP_S by `hi`."""
    return any(server(r) for r in readies[bisect_right(times, lo):bisect_right(times, hi - UP_S)])


def _causes(evs: Sequence[EventView]) -> set[str]:
    """The kinds of a stretch's causes (its events whose rule calls them a cause), or all its kinds without one."""
    return {e.kind for e in evs if e.role == "cause"} or {e.kind for e in evs}


def recovered(evs: Sequence[EventView], readies: Sequence[EventView]) -> list[list[EventView]]:
    """A host's significant events of one stretch (time order), cut where a server that had failed came back
    ready and served UP_S or more before the next (`_server_back`), unless what follows is the same failure again
    (its causes' kinds are among those before: a failure that recurs stays one incident, "twice")."""
    if not readies:
        return [list(evs)]
    times = [x.t for x in readies]
    parts: list[list[EventView]] = [[evs[0]]]
    for e in evs[1:]:
        if _server_back(parts[-1], e, readies, times):
            parts.append([e])
        else:
            parts[-1].append(e)
    out = [parts[0]]
    for p in parts[1:]:
        if _causes(p) <= _causes(out[-1]):
            out[-1].extend(p)
        else:
            out.append(p)
    return out


def cluster(evs: Sequence[EventView], found: Sequence[Finding], gap_s: float,
            load_starts: Callable[[list[tuple[Cluster, Cluster]]], Sequence[EventView]] | None = None,
            kin: Mapping[str, EventView] | None = None) -> list[Cluster]:
    """Significant events per host, split where `gap_s` passes without one or where a failed server had
    recovered before the next, other failure (`recovered`); then clusters merged when one
    finding binds events of both, or when a unit of the later one was started within the gap after the
    earlier one ended and died within twice the gap of starting (a fallback that dies too), unless it was
    ready and served UP_S or more before dying (it had recovered: another incident).

    `evs` must hold every significant event and `server_ready`; the starts are taken from `evs` too, unless
    `load_starts` gives them: called with the pairs of successive clusters of a host, it returns (at least)
    every start of a unit of the later one on that host within the gap after the earlier one ends. `kin`: views
    of unit-less events with the unit of their process (`pid_kin`), by id: a journal's SGLang ready lines."""
    by_host: dict[str, list[EventView]] = {}
    readies: dict[str, list[EventView]] = {}
    for e in evs:
        if significant(e):
            by_host.setdefault(e.host or "unknown host", []).append(e)
        elif e.kind == "server_ready" and e.t is not None:
            readies.setdefault(e.host or "unknown host", []).append(kin.get(e.id, e) if kin else e)
    for rs in readies.values():
        rs.sort(key=lambda x: (x.t, x.seq))
    clusters: list[Cluster] = []
    for host in sorted(by_host):
        cur: list[EventView] = []
        for e in sorted(by_host[host], key=lambda x: (x.t, x.seq)):
            if cur and e.t - cur[-1].t > gap_s:
                clusters.extend(Cluster(host, p) for p in recovered(cur, readies.get(host, ())))
                cur = []
            cur.append(e)
        if cur:
            clusters.extend(Cluster(host, p) for p in recovered(cur, readies.get(host, ())))
    # union-find over clusters
    parent = list(range(len(clusters)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(a: int, b: int) -> None:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    where = {e.id: i for i, c in enumerate(clusters) for e in c.events}
    for f in found:
        idx = sorted({where[x] for x in f.event_ids if x in where})
        for i in idx[1:]:
            if clusters[i].host == clusters[idx[0]].host:
                union(idx[0], i)
    pairs = [i for i in range(len(clusters) - 1) if clusters[i].host == clusters[i + 1].host]
    if load_starts is None:
        starts = [e for e in evs if e.kind in STARTS and e.t is not None]
    else:
        starts = [e for e in load_starts([(clusters[i], clusters[i + 1]) for i in pairs])
                  if e.kind in STARTS and e.t is not None]
    ready_ts = {h: [r.t for r in rs] for h, rs in readies.items()}
    for i in pairs:
        a, b = clusters[i], clusters[i + 1]
        rs, ts = readies.get(a.host, []), ready_ts.get(a.host, [])
        for s in starts:
            u = s.entities.get("unit")
            if s.host != a.host or u not in b.units or not a.end <= s.t <= a.end + gap_s:
                continue
            died = min(e.t for e in b.events if e.entities.get("unit") == u)   # the restarted unit's death
            if s.t <= died and b.start - s.t <= 2 * gap_s and \
                    not _served(rs, ts, s.t, died, lambda r, u=u: r.entities.get("unit") == u):
                union(i, i + 1)
                break
    merged: dict[int, Cluster] = {}
    for i, c in enumerate(clusters):
        r = root(i)
        if r in merged:
            merged[r].events.extend(c.events)
        else:
            merged[r] = Cluster(c.host, list(c.events))
    out = list(merged.values())
    # untimed significant events (kernel seconds without an anchor, `systemctl status` lines, a job's stderr): bound
    # by a correlation to the events of a timed incident, or with a unit or pid of one of the host, they join it;
    # the others form undated incidents, per source, of events within a few hundred lines of each other
    bound: dict[int, Cluster] = {}
    for f in found:
        homes = sorted({root(where[x]) for x in f.event_ids if x in where})
        if homes:
            for x in f.event_ids:
                if x not in where:
                    bound.setdefault(x, merged[homes[0]])
    undated: list[Cluster] = []
    for e in evs:
        if not significant(e, timed=False):
            continue
        home = bound.get(e.id)
        if home is None or home.host != e.host:
            home = next((c for c in out if c.host == e.host and any(
                ent in ("unit", "pid") and x.entities.get(ent) == v for x in c.events
                for ent, v in e.entities.items())), None)
        if home is not None:
            home.events.append(e)
            continue
        last = next((c for c in reversed(undated) if c.host == e.host and c.events[-1].path == e.path
                     and abs(c.events[-1].line - e.line) <= UNDATED_LINES), None)
        if last is not None:
            last.events.append(e)
        else:
            undated.append(Cluster(e.host or "unknown host", [e]))
    for c in out:
        c.events.sort(key=lambda x: (x.t is None, x.t or 0.0, x.seq))
    return sorted(out, key=lambda c: (c.start, c.host)) + undated
