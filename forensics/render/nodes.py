"""The summary's sentences on the other nodes of a multi-node server (`Incident.nodes`, forensics.nodes): which
node failed first, and what became of the others."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import PurePath

from forensics.model import Evidence, Incident, Node
from forensics.render.timefmt import duration, parse_ts

VICTIM_KINDS = frozenset({"nccl_timeout", "nccl_error"})   # a rank that waited on the others, or lost one


def _where(e: Evidence | None) -> str:
    return f"`{PurePath(e.path).name}:{e.line}`" if e is not None else ""


def _node(n: Node) -> str:
    return f"`{n.host}`" + (f" (node {n.node_rank})" if n.node_rank is not None else "")


def node_sentences(i: Incident, when: Callable[[datetime], str]) -> tuple[tuple[str, str], ...]:
    """What the report's summary says about the other nodes, as (lead, text) paragraphs: the one that failed before
    this host (the first of them), those that failed after it, and those whose logs show no failure in the window.
    `when` writes a time."""
    g = i.nodes
    start = parse_ts(i.start)
    if g is None or start is None:
        return ()
    server = (f"This host is node {g.node_rank} of a {g.nnodes}-node server (`--dist-init-addr {g.address}`)"
              if g.node_rank is not None else f"This host is a node of a {g.nnodes}-node server "
                                              f"(`--dist-init-addr {g.address}`)")
    before, after = _failed(g.nodes, start, True), _failed(g.nodes, start, False)
    quiet = [n for n in g.nodes if not n.incident]
    out: list[tuple[str, str]] = []
    root = i.root_cause
    if before:
        t, n = before[0]
        lead = f"The first node to fail was {_node(n)}, not this one."
        s = (f"{server}. `{n.host}` failed at {when(t)} UTC, {duration((start - t).total_seconds())} before this "
             f"host's first sign (incident `{n.incident}`, {_where(n.first)}): {n.headline}.")
        wait = _collective_start(i)
        if root is not None and root.kind in VICTIM_KINDS:
            if wait is not None and wait >= t:
                s += (f" The collective this host's rank waited on began at {when(wait)} UTC, "
                      f"{duration((wait - t).total_seconds())} after that")
            elif wait is not None:
                s += f" The collective this host's rank waited on began at {when(wait)} UTC"
            s += (("; " if wait is not None else " ") + "a rank waits in a collective for every rank of every node, "
                  f"so this host's {'NCCL timeout' if root.kind == 'nccl_timeout' else 'NCCL error'} is most likely "
                  f"a consequence of {n.host}'s failure, and the root cause is there.")
        if len(before) > 1:
            s += " Before this host as well: " + "; ".join(
                f"{_node(m)} at {when(u)} UTC (incident `{m.incident}`): {m.headline}" for u, m in before[1:]) + "."
        out.append((lead, s))
    if after:
        lead = ("Other nodes went down after this one." if before else
                "Other nodes of this server went down after this one.")
        items = [f"{_node(n)} at {when(t)} UTC, {duration((t - start).total_seconds())} after this began (incident "
                 f"`{n.incident}`, {_where(n.first)}): {n.headline}" for t, n in after]
        s = ("" if before else f"{server}: ") + f"{'; '.join(items)}."
        if not before and all(_victim(n) for _, n in after):
            s += (" Their ranks waited in collectives for this node's ranks, which had stopped, until their NCCL "
                  "watchdog gave up: their failures are this one's consequence.")
        out.append((lead, s))
    if g.missing and not before and root is not None and root.kind in VICTIM_KINDS:
        ranks = ", ".join(str(r) for r in g.missing)
        many = len(g.missing) > 1
        out.append((f"The logs of node{'s' if many else ''} {ranks} are missing.",
                    f"{server}, and no ingested log holds the launch of node{'s' if many else ''} {ranks}. The rank "
                    "that stops first is usually on another node: without its logs the failure that left this "
                    "host's collective waiting cannot be seen (what the logs do not show says what to get)."))
    if quiet:
        since, until = parse_ts(g.since), parse_ts(g.until)
        items = []
        for n in quiet:
            end = parse_ts(n.logs_until)
            if end is not None and end < start:
                items.append(f"the ingested logs of {_node(n)} end at {when(end)} UTC, before this incident began: "
                             "what it did then cannot be seen")
            elif end is not None and until is not None and end < until:
                items.append(f"{_node(n)} logged no failure from {when(since) if since else 'its launch'} to the end "
                             f"of its ingested logs, {when(end)} UTC")
            else:
                items.append(f"{_node(n)} logged no failure"
                             + (f" from {when(since)} to {when(until)} UTC" if since and until else ""))
        text = "; ".join(items) + "."
        blind = any((e := parse_ts(n.logs_until)) is not None and e < start for n in quiet)
        out.append(("" if before or after else "The other nodes' logs stop before this." if blind else
                    "No other node failed in the logs.",
                    ("" if before or after else f"{server}. ") + text[0].upper() + text[1:]))
    return tuple(out)


def _failed(nodes: Sequence[Node], start: datetime, before: bool) -> list[tuple[datetime, Node]]:
    """The nodes whose incident began before `start` (or at or after it), with its time, in time order."""
    out = [(t, n) for n in nodes if n.incident and (t := parse_ts(n.start)) is not None and (t < start) == before]
    return sorted(out, key=lambda x: (x[0], x[1].host))


def first_failed(i: Incident) -> Node | None:
    """The other node whose incident began first, before this one's (None: none did)."""
    start = parse_ts(i.start)
    if i.nodes is None or start is None:
        return None
    before = _failed(i.nodes.nodes, start, True)
    return before[0][1] if before else None


def _victim(n: Node) -> bool:
    return n.kind in VICTIM_KINDS


def _collective_start(i: Incident) -> datetime | None:
    """When the collective of the root cause's NCCL timeout began: its line's time less the `ran_ms` it reports."""
    root = i.root_cause
    if root is None or root.kind != "nccl_timeout" or not root.cause_event:
        return None
    e = next((x for x in i.events if x.id == root.cause_event), None)
    t = parse_ts(e.ts) if e is not None else None
    ran = e.fields.get("ran_ms") if e is not None else None
    if t is None or not isinstance(ran, (int, float)):
        return None
    return t - timedelta(milliseconds=ran)
