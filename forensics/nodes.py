"""The nodes of a multi-node server: the hosts launched with the same `--dist-init-addr`, and which failed first.

    group = node_group(incident, launches, incidents_near)      # None: not a multi-node server's incident

An SGLang server over several machines is one launch per node (`--nnodes N --node-rank R --dist-init-addr ADDR`,
the address of node 0's rendezvous); the ranks of all nodes take part in every collective, so when one node fails
(a GPU off the bus, an OOM kill, a crash) the collectives of the others wait for it until their NCCL watchdog
gives up, minutes later, on hosts whose logs hold no trace of the cause. Incidents are per host: for an incident
of such a server this module finds the launches of the same address on the other hosts (their `server_config`
events, `launches`), their incidents around it, and the node ranks that no ingested log launched (what the logs
do not show). The order of the nodes' first signs says which failed first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import PurePath
from typing import Any

import polars as pl

from .configreview import flags_of
from .correlate import is_server_unit, iso
from .eventview import UNKNOWN_HOST
from .model import Evidence, Gap, Incident, Node, NodeGroup
from .schema import empty_events
from .store import scan_files

ADDRESS_FLAGS = ("--dist-init-addr", "--nccl-init-addr")   # SGLang's (and its 0.1-0.2 name)
SAME_LAUNCH_S = 3600.0     # another node's launch belongs to this run when logged this close to this node's
BEFORE_S = 3600.0          # another node's failure before this one's is looked for at most this long before it
                           # began: a node that fails stops the others' next collective, which times out after the
                           # process group's timeout (at most 30 min)
AFTER_S = 2100.0           # another node's failure after this one's is looked for this long after it ends: NCCL's
                           # watchdog gives up after the process group's timeout (10 min by default, 30 min in older
                           # PyTorch), and the process goes down within a few seconds of it


@dataclass(frozen=True)
class Launch:
    """A node's launch configuration, as the store holds it."""

    part: str                 # the host its incidents are grouped under
    address: str
    node_rank: int | None
    unit: str | None
    t: float | None
    evidence: Evidence


@dataclass(frozen=True)
class Near:
    """Another host's incident (a skeleton's id, start and headline, and the line of its first sign)."""

    id: str
    start: str | None
    headline: str
    kind: str
    first: Evidence | None
    units: tuple[str, ...] = ()


# root causes that take a whole host's GPUs or kernel down, whichever unit they name
HOST_WIDE = frozenset({"gpu_xid", "gpu_fallen_off_bus", "gpu_driver_mismatch", "kernel_panic", "cpu_lockup",
                       "hung_task"})


def relevant(n: Near, unit: str | None) -> bool:
    """Whether another host's incident can be its node's failure: it names no unit, or the node's server unit (its
    launch's, or one named as an inference server), or its root cause takes the host's GPUs down; not a user
    session's OOM kill on that host."""
    return (not n.units or n.kind in HOST_WIDE or (unit is not None and unit in n.units)
            or any(is_server_unit(u) for u in n.units))


def _int(v: str | None) -> int | None:
    try:
        return int(str(v).strip()) if v is not None else None
    except ValueError:
        return None


def _rank(flags: dict[str, str]) -> int | None:
    """`--node-rank` (SGLang's default, 0, when the launch gives none)."""
    return _int(flags.get("--node-rank")) if "--node-rank" in flags else 0


def _address(flags: dict[str, str]) -> str | None:
    for f in ADDRESS_FLAGS:
        v = (flags.get(f) or "").strip().strip("'\"")
        if v and v.lower() != "none":
            return v
    return None


def group_of(inc: Incident) -> tuple[str, int, int | None, float | None] | None:
    """(address, nnodes, this node's rank, when it was launched) of the incident's multi-node server: the first of
    its launch configurations with `--nnodes` above 1 and a rendezvous address; None when it has none."""
    for c in inc.configs:
        flags = {f.name: f.value for f in c.flags}
        nnodes, addr = _int(flags.get("--nnodes")), _address(flags)
        if addr and nnodes is not None and nnodes > 1:
            t = _seconds(c.evidence.ts)
            return addr, nnodes, _rank(flags), t
    return None


def _seconds(ts: str | None) -> float | None:
    if not ts:
        return None
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def launches(store, addresses: Sequence[str]) -> list[Launch]:  # noqa: ANN001
    """Every launch configuration in the store that names one of `addresses` (one scan of the events, filtered on
    the kind and the address's text first). A file that names no host is its own `unknown host (<file>)`."""
    if not addresses:
        return []
    text = pl.col("fields").fill_null("") + pl.col("message").fill_null("")
    has = pl.lit(False)
    for a in sorted(set(addresses)):
        has = has | text.str.contains(a, literal=True)
    df = (scan_files(store.files_of("events"), empty_events())
          .filter((pl.col("kind") == "server_config") & has)
          .select("host", "unit", "ts", "ts_source", "fields", "message", "path", "line", "line_end", "source_id")
          .collect())
    out: list[Launch] = []
    for r in df.iter_rows(named=True):
        try:
            fields: dict[str, Any] = json.loads(r["fields"] or "{}")
        except ValueError:
            fields = {}
        flags = flags_of(fields, r["message"] or "")
        addr = _address(flags)
        if addr not in addresses:
            continue
        ts = r["ts"]
        part = r["host"] or f"{UNKNOWN_HOST} ({PurePath(r['path']).name})"
        out.append(Launch(part=part, address=addr, node_rank=_rank(flags), unit=r["unit"],
                          t=ts.timestamp() if ts is not None else None,
                          evidence=Evidence(path=r["path"], line=r["line"], line_end=r["line_end"] or r["line"],
                                            ts=iso(ts), ts_source=r["ts_source"] or "", text=r["message"] or "",
                                            note="its launch configuration", source_id=r["source_id"] or "")))
    out.sort(key=lambda x: (x.t is None, x.t or 0.0, x.part, x.evidence.path, x.evidence.line))
    return out


def window(inc: Incident, launched: float | None) -> tuple[float, float] | None:
    """Where the other nodes' failures of this run are looked for: from this node's launch, but no more than
    BEFORE_S before the incident began, to AFTER_S after it ended."""
    t0, t1 = _seconds(inc.start), _seconds(inc.end)
    if t0 is None or t1 is None:
        return None
    lo = max(launched, t0 - BEFORE_S) if launched is not None and launched <= t0 else t0 - BEFORE_S
    return lo, t1 + AFTER_S


def node_group(inc: Incident, found: Sequence[Launch], near: Callable[[str, float, float], Sequence[Near]],
               logs_until: Callable[[str], str | None] = lambda _: None) -> NodeGroup | None:
    """The other nodes of the incident's server: for each host other than the incident's with a launch of the same
    address in this run (the latest before the incident ended, logged within SAME_LAUNCH_S of this node's), its
    first incident in the `window` (`near(host, lo, hi)`, in time order) and where its logs end (`logs_until`); and
    the node ranks none launched."""
    g = group_of(inc)
    if g is None:
        return None
    addr, nnodes, rank, launched = g
    span = window(inc, launched)
    t1 = _seconds(inc.end)
    mine = set(inc.hosts)
    latest: dict[str, Launch] = {}
    for x in found:
        if x.address != addr or x.part in mine or x.t is None or t1 is None or x.t > t1:
            continue
        if launched is not None and abs(x.t - launched) > SAME_LAUNCH_S:
            continue
        latest[x.part] = x            # `found` is in time order: the latest wins
    nodes: list[Node] = []
    for part, x in latest.items():
        hit = None
        if span is not None:
            lo = max(span[0], x.t or span[0])
            hit = next((n for n in near(part, lo, span[1]) if relevant(n, x.unit)), None)
        nodes.append(Node(host=part, node_rank=x.node_rank, unit=x.unit, launched=x.evidence,
                          incident=hit.id if hit else None, start=hit.start if hit else None,
                          headline=hit.headline if hit else None, kind=hit.kind if hit else None,
                          first=hit.first if hit else None, logs_until=logs_until(part)))
    nodes.sort(key=lambda n: (n.node_rank is None, n.node_rank or 0, n.host))
    seen = {n.node_rank for n in nodes} | {rank}
    missing = tuple(r for r in range(nnodes) if r not in seen)
    return NodeGroup(address=addr, nnodes=nnodes, node_rank=rank, nodes=tuple(nodes), missing=missing,
                     since=iso_s(span[0]) if span else None, until=iso_s(span[1]) if span else None)


def iso_s(t: float) -> str | None:
    return iso(datetime.fromtimestamp(t, timezone.utc))


def missing_gap(inc: Incident, g: NodeGroup) -> Gap | None:
    """What the logs do not show when node ranks of the server have no ingested launch: their failures, which
    would stop this node's collectives too."""
    if not g.missing:
        return None
    ranks = ", ".join(str(r) for r in g.missing)
    many = len(g.missing) > 1
    what = f"The logs of node{'s' if many else ''} {ranks} of this {g.nnodes}-node server"
    me = f"node {g.node_rank}" if g.node_rank is not None else "a node"
    why = (f"This host is {me} of a {g.nnodes}-node server (`--dist-init-addr {g.address}`), and no ingested log "
           f"holds the launch of node{'s' if many else ''} {ranks} in this run. The ranks of every node take part in "
           "each collective, so a failure there (a GPU error, an OOM kill, a crash) would stop this node's "
           "collectives too, until its NCCL watchdog gave up: it cannot be seen or ruled out. Ingest "
           f"{'their' if many else 'its'} journal (on the host launched with "
           + " / ".join(f"`--node-rank {r}`" for r in g.missing) + ").")
    since, until = g.since, g.until
    unit = next((c.unit for c in inc.configs if c.unit), None)
    cmds: list[str] = []
    if since and until:
        a, b = since[:16].replace("T", " "), until[:16].replace("T", " ")
        if unit:
            cmds.append(f'journalctl -u {unit} --since "{a}" --until "{b}" -o short-iso-precise --no-pager > '
                        f'node-{g.missing[0]}.journal.log')
        cmds.append(f'journalctl -k --since "{a}" --until "{b}" -o short-iso-precise --no-pager > '
                    f'node-{g.missing[0]}.kernel.log')
        cmds.append(f"forensics ingest node-{g.missing[0]}.journal.log node-{g.missing[0]}.kernel.log"
                    if unit else f"forensics ingest node-{g.missing[0]}.kernel.log")
    return Gap(what=what, why=why, commands=tuple(cmds))
