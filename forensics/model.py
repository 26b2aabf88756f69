"""The analysis model: what correlation produces and what reports render.

Frozen dataclasses, so nothing untyped crosses the boundary between `correlate` and `render`.
Every object has `to_json()` giving plain JSON-able data (the documented JSON of incidents and reports).
Times are ISO 8601 UTC strings (`2025-05-25T20:17:19.000000Z`) or None.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from collections.abc import Mapping
from typing import Any


class Confidence(str, Enum):
    CONFIRMED = "confirmed"
    LIKELY = "likely"
    POSSIBLE = "possible"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Evidence:
    """One cited log record: `path:line` (through `line_end`) and what it shows."""

    path: str
    line: int
    line_end: int
    ts: str | None
    ts_source: str
    text: str                 # the record's message verbatim (may be multi-line)
    note: str = ""            # why it is cited ("the kill line", "absent: no kernel log for the window")
    source_id: str = ""


@dataclass(frozen=True)
class Event:
    """An event as extracted by a rule (a row of the events table)."""

    id: str                   # stable: `<source_id>:<line>:<rule>`
    ts: str | None
    ts_source: str
    kind: str
    rule: str
    severity: str
    role: str                 # role in this incident (correlation may revise the rule's default)
    host: str | None
    unit: str | None
    pid: int | None
    title: str
    explain: str              # the rule's explanation, filled with this event's values
    next_steps: tuple[str, ...]
    fields: dict[str, Any]
    message: str
    path: str
    line: int
    line_end: int
    format: str


def is_request_traceback(rule: str, fields: Mapping[str, Any]) -> bool:
    """One HTTP request's traceback: uvicorn's `Exception in ASGI application`, by its rule or, in a journal where
    that line is an entry of its own, by the traceback's origin. The server answered that request with an error
    and kept running: context, unless a conclusion binds it."""
    return rule == "python.asgi_traceback" or "Exception in ASGI application" in str(fields.get("origin") or "")


@dataclass(frozen=True)
class Conclusion:
    """A correlation that fired: a cause, what it explains, and how sure we are."""

    rule: str                 # correlation id, e.g. `sigkill.kernel_oom`
    kind: str                 # the root-cause kind, e.g. `oom_kill`, `flashinfer_arch_unsupported`
    confidence: Confidence
    statement: str            # one or two sentences, in the voice of the seeds
    cause_event: str | None   # Event.id of the cause (None when the cause is suspected, not seen)
    explains: tuple[str, ...]  # Event.ids of the symptoms it accounts for
    evidence_for: tuple[Evidence, ...]
    evidence_against: tuple[Evidence, ...]
    alternatives: tuple[str, ...]   # other explanations considered, each with why ruled out / left open
    next_steps: tuple[str, ...]     # exact commands that would decide it
    unit: str | None = None


@dataclass(frozen=True)
class Flag:
    name: str                 # `--mem-fraction-static`
    value: str                # as given (`0.90`, `true` for a bare switch)
    note: str = ""            # review note from the knowledge pack, "" if none


@dataclass(frozen=True)
class ServerConfig:
    unit: str | None
    host: str | None
    command: str              # the command line as logged
    flags: tuple[Flag, ...]
    evidence: Evidence
    arithmetic: tuple[str, ...] = ()   # e.g. `0.90 x 96 GB = 86.4 GB reserved per GPU`
    note: str = ""            # how it relates to the failure when it was not logged before it (a restart's)


@dataclass(frozen=True)
class Gap:
    """Something the logs cannot show, and how to get it."""

    what: str
    why: str
    commands: tuple[str, ...] = ()


@dataclass(frozen=True)
class Repeat:
    """Lines of one rule that recur in an incident's window with no tie to it (no conclusion binds them, they name
    none of its units, such as a kubelet's probe failures for other pods): the timeline shows them as one row.
    `around` counts the events of the kind on the host in the `around_seconds` before and after the window
    (`in_window` in its `window_seconds`, copies in other sources included on both sides), which tells a burst
    from the host's background."""

    rule: str
    kind: str
    count: int                # the incident's events of the rule
    first: str | None
    last: str | None
    event_ids: tuple[str, ...]
    in_window: int
    window_seconds: float
    around: int
    around_seconds: float

    @property
    def ratio(self) -> float | None:
        """The kind's rate in the window over its rate around it (None: nothing around to compare with)."""
        if self.around_seconds <= 0 or self.window_seconds <= 0:
            return None
        if self.around == 0:
            return float("inf")
        return (self.in_window / self.window_seconds) / (self.around / self.around_seconds)


@dataclass(frozen=True)
class Neighbour:
    """An incident of the same host just before or after this one, kept apart only because the server had
    recovered in between: less than the clustering gap away (`clustering.recovered`), or a restart of a shared
    unit that was ready and served before it failed again (`clustering.cluster`)."""

    incident: str             # its id
    at: str | None            # when it ended (the one before) or began (the one after), ISO 8601 UTC
    ready: str | None         # when the server was ready again in between


@dataclass(frozen=True)
class Node:
    """Another node of an incident's multi-node server (a launch of the same `--dist-init-addr` on another host in
    the same run), and its incident near this one."""

    host: str
    node_rank: int | None
    unit: str | None
    launched: Evidence            # its launch configuration
    incident: str | None          # its first incident from its launch to a while after this one (None: none)
    start: str | None             # when that incident began, ISO 8601 UTC
    headline: str | None
    kind: str | None              # its root cause's kind
    first: Evidence | None        # that incident's first sign (its root cause's line)
    logs_until: str | None = None  # where its ingested logs end, ISO 8601 UTC


@dataclass(frozen=True)
class NodeGroup:
    """The multi-node server an incident's host is a node of (`forensics.nodes`)."""

    address: str                  # `--dist-init-addr`
    nnodes: int
    node_rank: int | None         # the incident's host's
    nodes: tuple[Node, ...]       # the other nodes the logs launch, by node rank
    missing: tuple[int, ...]      # node ranks no ingested log launched in this run
    since: str | None             # the window their incidents were looked for in, ISO 8601 UTC
    until: str | None


@dataclass(frozen=True)
class Background:
    """A unit that failed in an incident's window as it had failed again and again on the host before the incident
    began: nothing in the logs ties its failure to the incident (its only conclusions are inconclusive), so it is
    left out of the incident's units, headline, impact and timeline, and named apart with its evidence."""

    unit: str
    headlines: tuple[str, ...]      # what its conclusions in the window say happened, in time order
    evidence: tuple[Evidence, ...]  # their lines
    before: int                     # its failures on the host in the `before_seconds` before the incident began
    before_seconds: float
    first_before: str | None        # the first and last of them (ISO 8601 UTC)
    last_before: str | None


@dataclass(frozen=True)
class SourceInfo:
    path: str
    sha256: str
    format: str
    confidence: float
    host: str | None
    records: int
    unparsed: int
    first_ts: str | None
    last_ts: str | None
    time_anchor: str          # how times in this source were obtained, in words


@dataclass(frozen=True)
class Incident:
    id: str                   # `2025-05-25-dflash-train-sglang-k26-eagle3`
    start: str | None
    end: str | None
    hosts: tuple[str, ...]
    units: tuple[str, ...]
    headline: str
    root_cause: Conclusion | None          # the primary conclusion
    conclusions: tuple[Conclusion, ...]     # all conclusions, root cause first
    events: tuple[Event, ...]               # every event in the incident, chronological
    symptoms: tuple[str, ...]               # Event.ids explained by some conclusion
    configs: tuple[ServerConfig, ...]
    environment: dict[str, str]             # `gpu`, `sm`, `driver`, `cuda`, `torch`, `flashinfer`, `sglang`, `kernel`, `host`
    gaps: tuple[Gap, ...]
    sources: tuple[SourceInfo, ...]         # sources that cover the incident's hosts
    repeats: tuple[Repeat, ...] = ()        # recurring lines not tied to the incident (one timeline row each)
    background: tuple[Background, ...] = ()  # units failing routinely on the host that also failed in the window
    follows: Neighbour | None = None        # the incident just before on the host, its server recovered in between
    followed_by: Neighbour | None = None    # the incident just after on the host, likewise
    nodes: NodeGroup | None = None          # the other nodes of its multi-node server

    def to_json(self) -> dict[str, Any]:
        return to_jsonable(self)


def line_span(line: int, line_end: int | None) -> str:
    """A record's lines as every listing writes them after `path:`: `12`, or `12-14` for a record of several."""
    return f"{line}-{line_end}" if line_end is not None and line_end > line else f"{line}"


def to_jsonable(obj: Any) -> Any:
    if isinstance(obj, Enum):
        return obj.value
    if hasattr(obj, "__dataclass_fields__"):
        return {k: to_jsonable(v) for k, v in asdict(obj).items()}
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj
