"""The view: what templates see. Built from (already redacted) report data; plain frozen values,
times formatted, paths shortened, repeated lines folded. No Markdown or HTML here."""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from forensics.configreview import is_dump
from forensics.correlate import is_container_scope, unit_label
from forensics.correlation_packs import STANDARD_NAMES
from forensics.model import (Background, Conclusion, Event, Evidence, Incident, Repeat, is_request_traceback,
                             line_span)
from forensics.render.data import Excerpt, ExcerptLine, ReportData
from forensics.render.impact import unit_impacts
from forensics.render.nodes import first_failed, node_sentences
from forensics.render.options import ReportOptions
from forensics.rulemodel import STANDARD_PLACEHOLDERS
from forensics.render.timefmt import INFERRED, MARK, TIME_SOURCE_WORDS, Clock, duration, parse_ts

KIND_LABELS: dict[str, str] = {
    "oom_kill": "kernel OOM kill",
    "unit_oom_killed": "OOM kill inside the unit's cgroup",
    "oomd_kill": "systemd-oomd kill",
    "stop_timeout": "systemd stop timeout",
    "start_timeout": "systemd start timeout",
    "unit_watchdog": "systemd watchdog timeout",
    "cpu_lockup": "CPU lockup (kernel watchdog)",
    "mem_sizing_failed": "KV cache could not be sized at start",
    "flashinfer_arch_unsupported": "FlashInfer cannot build for the GPU architecture",
    "cuda_arch_unsupported": "code not built for the GPU architecture",
    "cuda_oom": "CUDA out of memory",
    "cuda_error": "CUDA error",
    "nccl_timeout": "NCCL collective timeout",
    "nccl_error": "NCCL error",
    "watchdog_timeout": "SGLang scheduler watchdog timeout",
    "gpu_xid": "GPU Xid error",
    "gpu_fallen_off_bus": "GPU fell off the bus",
    "gpu_driver_mismatch": "NVIDIA driver version mismatch",
    "cuda_init_failed": "CUDA initialisation failure",
    "gpu_memory_occupied": "GPU memory taken by other processes",
    "disk_full": "full filesystem",
    "pcie_error": "PCIe link error",
    "fabric_manager_failed": "NVIDIA fabric manager failure",
    "probe_kill": "killed by the kubelet after failed probes",
    "node_pressure": "node low on a resource (kubelet eviction)",
    "pod_evicted": "pod evicted by the kubelet",
    "gpu_container_failed": "GPU container could not start (NVIDIA runtime hook)",
    "ray_oom_kill": "killed by Ray's memory monitor",
    "gpu_init_failed": "GPU failed to initialize (NVIDIA driver)",
    "gpu_unhealthy": "GPU marked unhealthy by the NVIDIA device plugin",
    "model_download_failed": "model not fetched from the Hugging Face Hub",
    "pod_admission_denied": "pod refused by the kubelet (admission)",
    "worker_failed": "torchrun worker failure",
    "port_in_use": "port already in use",
    "model_unsupported": "model not supported by the installed release",
    "exec_failed": "unit's program could not be started by systemd",
    "cuda_graph_capture_failed": "SGLang CUDA graph capture failure",
    "triton_out_of_resources": "Triton kernel too large for the GPU's shared memory",
    "dataloader_worker_killed": "PyTorch DataLoader worker death",
    "shm_exhausted": "shared memory (/dev/shm) exhausted",
    "fatal_signal": "fatal signal in native code (Python faulthandler)",
    "gpu_recovery_action": "GPU recovery action the driver asks for (Xid 154)",
    "segfault": "segmentation fault",
    "kernel_panic": "kernel panic",
    "child_failed": "SGLang child process failure",
    "service_killed": "service killed by a signal",
    "unknown": "unknown cause",
}

CONFIDENCE_WORDS: dict[str, str] = {
    "confirmed": "the logs show the cause directly",
    "likely": "consistent with the logs, but no line ties the cause to the failure directly",
    "possible": "one of several explanations the logs allow",
    "inconclusive": "the logs cannot decide it",
}

ENV_ORDER = ("host", "gpu", "sm", "driver", "cuda", "nvcc", "torch", "flashinfer", "sglang", "vllm", "python",
             "kernel", "os")

KEY_SEVERITIES = frozenset({"critical", "error", "warning"})


def kind_label(kind: str) -> str:
    return KIND_LABELS.get(kind, kind.replace("_", " "))


# ----------------------------------------------------------------------------- view values

@dataclass(frozen=True)
class TimeCell:
    utc: str              # `20:17:19` (with the date when the column spans days)
    local: str            # `22:17:19 CEST`; equal to utc + ` UTC` when the zone is UTC
    inferred: bool
    how: str              # a TimeSource value
    iso: str | None       # the model's ISO string

    @property
    def mark(self) -> str:
        return MARK if self.inferred else ""


@dataclass(frozen=True)
class TimelineRow:
    time: TimeCell
    source: str           # `journal-eagle3.log:156-157`
    path: str
    line: int
    line_end: int
    host: str
    unit: str
    lane: str             # the unit, or the source when the event has no unit
    kind: str
    title: str
    role: str
    severity: str
    count: int
    is_root: bool
    is_cause: bool
    event_ids: tuple[str, ...]


@dataclass(frozen=True)
class KeyLine:
    title: str
    time: TimeCell
    where: str
    kind: str
    rule: str
    role: str
    severity: str
    explain: str
    message: str
    count: int
    explained_by: str     # `kernel OOM kill (confirmed)` for a symptom, "" otherwise
    is_root: bool


@dataclass(frozen=True)
class EvidenceView:
    where: str
    time: str
    note: str
    text: str
    absent: bool


@dataclass(frozen=True)
class ConclusionView:
    heading: str
    kind: str
    kind_label: str
    rule: str
    confidence: str
    confidence_words: str
    statement: str
    unit: str
    is_root: bool
    cause: str            # the cause event's title, "" when the cause was not seen
    cause_where: str      # `dmesg.log:6`
    explains: tuple[str, ...]
    evidence_for: tuple[EvidenceView, ...]
    evidence_against: tuple[EvidenceView, ...]
    alternatives: tuple[str, ...]
    next_steps: tuple[str, ...]
    again: str = ""       # `The same happened 4 more times: at 09:01:31, ...` (the summary tells repeats once)
    repeat: bool = False  # the same as an earlier conclusion but for its times: the summary leaves it out


@dataclass(frozen=True)
class FlagView:
    name: str
    value: str
    note: str


@dataclass(frozen=True)
class ConfigView:
    unit: str
    host: str
    where: str
    command: str
    flags: tuple[FlagView, ...]
    arithmetic: tuple[str, ...]
    folded: int = 0              # arguments of a dump left out of the table (no review note)
    note: str = ""               # when it was logged after the failure (a restart's), what that means


@dataclass(frozen=True)
class GapView:
    what: str
    why: str
    commands: tuple[str, ...]


@dataclass(frozen=True)
class ActionView:
    text: str
    about: str            # the unit or kind it comes from


@dataclass(frozen=True)
class ImpactRow:
    unit: str
    host: str
    down: str             # when it went down
    how: str              # the event that shows it
    back: str             # when it came back, or `not within the logs`
    down_for: str
    runs: tuple[str, ...]  # `started 20:19:40, ready 20:29:11 (9 min 31 s), down 20:29:47 after 36 s up`
    restarts: int = 0      # restarts within the outage that went down before the server was ready


@dataclass(frozen=True)
class UnitFailures:
    unit: str
    downs: tuple[str, ...]   # each time it went down, in time order (`20:17:19 UTC`)
    restarts: int = 0        # restarts that went down before the server was ready (impact)

    @property
    def when(self) -> str:
        """`20:17:19 UTC`, `20:17:19 UTC and 20:29:48 UTC`, `a, b and c`; `..., and on each of its 4 restarts`."""
        again = ("" if not self.restarts else ", and on its restart" if self.restarts == 1 else
                 f", and on each of its {self.restarts} restarts")
        return _and(self.downs) + again


@dataclass(frozen=True)
class BackgroundView:
    """A unit failing routinely on the host that also failed in the window (model.Background), in words."""

    unit: str
    when: str             # `23:30:31 UTC`, or `a and b`
    what: str             # its conclusions' headlines: `fwupd-refresh.service failed with result 'exit-code'`
    where: str            # `journal.log:1518658-1518659`
    before: int           # its failures in `looked` before the incident began
    looked: str           # `3 h`
    first: str            # the first and last of them: `20:33:10 UTC`
    last: str
    command: str          # how to list them all


@dataclass(frozen=True)
class ExcerptView:
    path: str
    where: str
    text: str             # numbered lines, `>` on cited lines
    notes: tuple[str, ...]
    from_file: bool


@dataclass(frozen=True)
class SourceView:
    path: str
    short: str
    sha256: str
    format: str
    confidence: str
    host: str
    records: int
    unparsed: int
    first: str
    last: str
    time_anchor: str


@dataclass(frozen=True)
class TimeNote:
    how: str
    words: str
    count: int


@dataclass(frozen=True)
class IncidentView:
    index: int
    id: str
    headline: str
    date: str
    window: str
    hosts: tuple[str, ...]
    units: tuple[str, ...]
    failures: tuple[UnitFailures, ...]   # each failed unit once, with every time it went down
    root: ConclusionView | None
    conclusions: tuple[ConclusionView, ...]
    impact: tuple[ImpactRow, ...]
    timeline: tuple[TimelineRow, ...]
    timeline_has_inferred: bool
    key_lines: tuple[KeyLine, ...]
    configs: tuple[ConfigView, ...]
    environment: tuple[tuple[str, str], ...]
    gaps: tuple[GapView, ...]
    actions: tuple[ActionView, ...]
    excerpts: tuple[ExcerptView, ...]
    excerpts_total: int
    sources: tuple[SourceView, ...]
    time_notes: tuple[TimeNote, ...]
    events_total: int
    timeline_omitted: int = 0     # rows left out to fit a size limit
    key_lines_omitted: int = 0
    background: tuple[BackgroundView, ...] = ()   # units failing routinely, not counted in the incident
    unfilled: str = ""            # the placeholders the commands keep, and why the logs cannot fill them
    losses: tuple[str, ...] = ()  # services that lost a process to the OOM killer, with no outage in the logs
    neighbours: tuple[str, ...] = ()   # the incidents just before and after on the host, told apart at a recovery
    nodes: tuple[tuple[str, str], ...] = ()   # (lead, text): the other nodes of its multi-node server: which failed first, and the others

    @property
    def failed_units(self) -> tuple[str, ...]:
        """The units that went down, each once (user templates count them)."""
        return tuple(f.unit for f in self.failures)


@dataclass(frozen=True)
class ReportView:
    title: str
    single: bool
    incidents: tuple[IncidentView, ...]
    tz: str
    zone_is_utc: bool
    tool_version: str
    rulepacks: tuple[tuple[str, str], ...]
    generated_at: str | None
    redacted: bool
    trim_note: str        # "" unless the Markdown was trimmed
    svg_slot: str         # "" for Markdown; for HTML the placeholder that the timeline picture replaces


# ----------------------------------------------------------------------------- helpers

def short_paths(paths: list[str]) -> dict[str, str]:
    """The shortest path suffix that still tells each path apart (`dmesg.log`, `a/journal.log`)."""
    unique = sorted(set(paths))
    out: dict[str, str] = {}
    for p in unique:
        parts = p.split("/")
        for n in range(1, len(parts) + 1):
            cand = "/".join(parts[-n:])
            if not any(o != p and (o == cand or o.endswith("/" + cand)) for o in unique):
                break
        out[p] = cand
    return out


class _Builder:
    def __init__(self, incident: Incident, excerpts: tuple[Excerpt, ...], index: int, clock: Clock) -> None:
        self.i = incident
        self.excerpts = excerpts
        self.index = index
        self.clock = clock
        paths = [s.path for s in incident.sources] + [e.path for e in incident.events]
        paths += [ev.path for c in incident.conclusions for ev in (*c.evidence_for, *c.evidence_against)]
        paths += [c.evidence.path for c in incident.configs]
        self.short = short_paths(paths)
        self.events = {e.id: e for e in incident.events}
        times = [parse_ts(e.ts) for e in incident.events if e.ts]
        times = [t for t in times if t is not None]
        self.utc_dates = len({t.date() for t in times}) > 1
        self.local_dates = len({clock.local(t).date() for t in times}) > 1
        self.root_event = incident.root_cause.cause_event if incident.root_cause else None
        self.cause_events = {c.cause_event for c in incident.conclusions if c.cause_event}
        # recurring lines nothing ties to the incident: one timeline row a rule, and no key line
        self.repeat_of = {x: r for r in incident.repeats for x in r.event_ids}
        self.explained_by: dict[str, Conclusion] = {}
        for c in incident.conclusions:
            for eid in c.explains:
                self.explained_by.setdefault(eid, c)

    # -- small pieces

    def where(self, path: str, line: int, line_end: int) -> str:
        return f"{self.short.get(path, path)}:{line_span(line, line_end)}"

    def where_many(self, evs: list[Event] | list[Evidence]) -> str:
        """`journal.log:156-157`, `journal.log:12, 40`, or one `path:line` per source."""
        by_path: dict[str, list[tuple[int, int]]] = {}
        for x in evs:
            by_path.setdefault(x.path, []).append((x.line, max(x.line, x.line_end)))
        parts = []
        for path, spans in by_path.items():
            merged = _merged(spans)
            shown = ", ".join(line_span(a, b) for a, b in merged[:4]) + (", ..." if len(merged) > 4 else "")
            parts.append(f"{self.short.get(path, path)}:{shown}")
        return "; ".join(parts)

    def cell(self, ts: str | None, how: str) -> TimeCell:
        dt = parse_ts(ts)
        utc = self.clock.utc_text(dt, self.utc_dates)
        local = self.clock.local_text(dt, self.local_dates) if not self.clock.is_utc else f"{utc} UTC"
        return TimeCell(utc, local, how in INFERRED and dt is not None, how, ts)

    def when(self, ts: str | None, how: str) -> str:
        dt = parse_ts(ts)
        if dt is None:
            return ""
        text = f"{self.clock.utc_text(dt, self.utc_dates)} UTC"
        return f"{MARK}{text}" if how in INFERRED else text

    def evidence(self, ev: Evidence) -> EvidenceView:
        absent = ev.line <= 0
        where = self.short.get(ev.path, ev.path) if absent else self.where(ev.path, ev.line, ev.line_end)
        return EvidenceView(where, self.when(ev.ts, ev.ts_source), ev.note, ev.text, absent)

    def lane(self, e: Event) -> str:
        base = e.unit or self.short.get(e.path, e.path)
        return f"{e.host}: {base}" if len(self.i.hosts) > 1 and e.host else base

    # -- sections

    def repeat_title(self, r: Repeat, first: Event) -> str:
        """`<the first line's title>, and N more like it until HH:MM:SS: <how often, against the hours around>`."""
        last = parse_ts(r.last)
        until = f" until {self.clock.utc_text(last, self.utc_dates)}" if last is not None else ""
        around = duration(r.around_seconds)
        ratio = r.ratio
        if ratio is None:
            rate = "no conclusion ties them to the incident"
        elif ratio == float("inf"):
            rate = (f"none in the {around} around the window, so a burst, but no conclusion ties them "
                    "to the incident")
        elif ratio >= 2:
            rate = (f"{ratio:.1f}x as often as in the {around} around the window; no conclusion ties them "
                    "to the incident")
        elif ratio >= 0.5:
            rate = (f"as often as in the {around} around the window (the host's background), none tied "
                    "to the incident")
        else:
            rate = f"less often than in the {around} around the window, none tied to the incident"
        return f"{first.title}, and {r.count - 1} more {r.rule} lines like it{until}: {rate}"

    def background(self, b: Background) -> BackgroundView:
        evs = sorted(b.evidence, key=lambda ev: (ev.ts or "", ev.path, ev.line))
        times = list(dict.fromkeys(f"{self.clock.utc_text(parse_ts(ev.ts), self.utc_dates)} UTC"
                                   for ev in evs if ev.ts))
        shown = times if len(times) <= BACKGROUND_TIMES else [*times[:BACKGROUND_TIMES - 1],
                                                               f"{len(times) - BACKGROUND_TIMES + 1} more times"]
        when = _and(shown) if times else "—"
        where = self.where_many([ev for ev in evs if ev.line > 0])
        first, last = parse_ts(b.first_before), parse_ts(b.last_before)
        dates = first is not None and last is not None and first.date() != last.date()
        host = self.i.hosts[0] if self.i.hosts else ""
        since = f"{first:%Y-%m-%dT%H:%M:%SZ}" if first is not None else ""
        until = self.i.end[:19] + "Z" if self.i.end else ""
        command = (f"forensics events --host {host} --unit {b.unit} --kind service_failed"
                   + (f" --since {since}" if since else "") + (f" --until {until}" if until else ""))
        return BackgroundView(unit=b.unit, when=when, what="; ".join(b.headlines), where=where, before=b.before,
                              looked=duration(b.before_seconds),
                              first=f"{self.clock.utc_text(first, dates or self.utc_dates)} UTC",
                              last=f"{self.clock.utc_text(last, dates or self.utc_dates)} UTC", command=command)

    def timeline(self) -> tuple[TimelineRow, ...]:
        rows: list[TimelineRow] = []
        for e in self.i.events:
            rep = self.repeat_of.get(e.id)
            if rep is not None:
                if e.id != rep.event_ids[0]:
                    continue
                evs = [self.events[x] for x in rep.event_ids if x in self.events]
                rows.append(TimelineRow(
                    time=self.cell(e.ts, e.ts_source), source=self.where_many(evs), path=e.path, line=e.line,
                    line_end=e.line_end, host=e.host or "", unit="", lane=self.lane(e), kind=e.kind,
                    title=self.repeat_title(rep, e), role="context", severity=e.severity, count=1, is_root=False,
                    is_cause=False, event_ids=rep.event_ids))
                continue
            prev = rows[-1] if rows else None
            if prev is not None and prev.path == e.path and prev.kind == e.kind and prev.unit == (e.unit or "") \
                    and prev.time.iso == e.ts and prev.line_end + 1 >= e.line and prev.line_end < e.line \
                    and self.events[prev.event_ids[-1]].message == e.message:
                rows[-1] = TimelineRow(prev.time, self.where(e.path, prev.line, e.line_end), e.path, prev.line,
                                       e.line_end, prev.host, prev.unit, prev.lane, prev.kind, prev.title, prev.role,
                                       prev.severity, prev.count + 1, prev.is_root, prev.is_cause,
                                       (*prev.event_ids, e.id))
                continue
            rows.append(TimelineRow(
                time=self.cell(e.ts, e.ts_source), source=self.where(e.path, e.line, e.line_end), path=e.path,
                line=e.line, line_end=e.line_end, host=e.host or "", unit=e.unit or "", lane=self.lane(e),
                kind=e.kind, title=e.title, role=e.role, severity=e.severity, count=1,
                is_root=e.id == self.root_event, is_cause=e.id in self.cause_events, event_ids=(e.id,)))
        return tuple(rows)

    def key_lines(self) -> tuple[KeyLine, ...]:
        groups: dict[tuple[str, str], list[Event]] = {}
        for e in self.i.events:
            if e.kind == "server_config" or not e.explain or e.id in self.repeat_of:
                continue
            if e.role not in ("cause", "symptom") and (e.severity not in KEY_SEVERITIES
                                                      or is_request_traceback(e.rule, e.fields)):
                continue   # one HTTP request's error, which nothing ties to the incident, is no key line either
            groups.setdefault((e.rule, e.unit or ""), []).append(e)
        out = []
        for evs in groups.values():
            e = evs[0]
            where = self.where_many(evs)
            c = self.explained_by.get(e.id)
            by = f"{kind_label(c.kind)} ({c.confidence.value})" if c is not None else ""
            out.append(KeyLine(e.title, self.cell(e.ts, e.ts_source), where, e.kind, e.rule, e.role, e.severity,
                               e.explain, e.message, len(evs), by, e.id == self.root_event))
        return tuple(out)

    def conclusion(self, c: Conclusion) -> ConclusionView:
        is_root = self.i.root_cause is not None and c == self.i.root_cause
        cause = cause_where = ""
        if c.cause_event and c.cause_event in self.events:
            ce = self.events[c.cause_event]
            cause, cause_where = ce.title, self.where(ce.path, ce.line, ce.line_end)
        titles = Counter(self.events[x].title for x in c.explains if x in self.events)
        explains = tuple(t if n == 1 else f"{t} (x{n})" for t, n in titles.items())
        label = kind_label(c.kind)
        heading = f"{unit_label(c.unit)}: {label}" if c.unit else label
        return ConclusionView(
            heading=heading, kind=c.kind, kind_label=label, rule=c.rule, confidence=c.confidence.value,
            confidence_words=CONFIDENCE_WORDS.get(c.confidence.value, ""), statement=c.statement,
            unit=unit_label(c.unit) if c.unit else "",
            is_root=is_root, cause=cause, cause_where=cause_where, explains=explains,
            evidence_for=tuple(self.evidence(x) for x in c.evidence_for),
            evidence_against=tuple(self.evidence(x) for x in c.evidence_against),
            alternatives=c.alternatives, next_steps=c.next_steps)

    def repeats(self, views: tuple[ConclusionView, ...], found: Sequence[Conclusion]) -> tuple[ConclusionView, ...]:
        """A crash loop's conclusions told once in the summary: a conclusion the same as an earlier one (its rule,
        unit, kind, confidence and statement but for the times and lines in it; a container's, whose scope is new on
        each restart, but for the scope) is marked a repeat, and the first says when the same happened again."""
        first: dict[tuple[str, ...], int] = {}
        again: dict[int, list[str]] = {}
        out = list(views)
        for n, (v, c) in enumerate(zip(views, found)):
            unit = "" if is_container_scope(c.unit) else v.unit     # a container's restart is a new scope
            key = (v.rule, unit, v.kind, v.confidence, _masked(v.statement))
            if key not in first:
                first[key] = n
                continue
            ce = self.events.get(c.cause_event) if c.cause_event else None
            at = parse_ts(ce.ts) if ce is not None and ce.ts else None
            again.setdefault(first[key], []).append(self.clock.utc_text(at, self.utc_dates) if at else "undated")
            out[n] = replace(v, repeat=True)
        for n, times in again.items():
            more = "once more" if len(times) == 1 else f"{len(times)} more times"
            out[n] = replace(out[n], again=f"The same happened {more}: at {_and(times)}.")
        return tuple(out)

    def neighbours(self) -> tuple[str, ...]:
        """Sentences on the incidents of the same host just before and after, told apart only because the server
        was ready again in between (`incidents._neighbour`)."""
        out: list[str] = []
        start, end = parse_ts(self.i.start), parse_ts(self.i.end)
        for n, before in ((self.i.follows, True), (self.i.followed_by, False)):
            at = parse_ts(n.at) if n is not None else None
            if n is None or at is None:
                continue
            ready = parse_ts(n.ready)
            when = f"{self.clock.utc_text(at, self.utc_dates)} UTC"
            back = (f"; the server was ready again at {self.clock.utc_text(ready, self.utc_dates)} UTC in between"
                    if ready is not None else "")
            if before and start is not None:
                out.append(f"This began {duration((start - at).total_seconds())} after incident `{n.incident}` on "
                           f"the same host ended ({when}){back}, so the two are told apart.")
            elif not before and end is not None:
                out.append(f"Incident `{n.incident}` on the same host began {duration((at - end).total_seconds())} "
                           f"after this one ended ({when}){back}, so the two are told apart.")
        return tuple(out)

    def losses(self, impact: Sequence[ImpactRow]) -> tuple[str, ...]:
        """A service whose process the kernel OOM killer killed while the logs show no outage of it: the kill is
        said, and whether the service went down with it is left open (without a journal of the host nothing can
        say; with one, systemd logged no failure of it here)."""
        down = {r.unit for r in impact}
        journal = any(s.format.startswith("journal") for s in self.i.sources)
        out: list[str] = []
        for e in self.i.events:
            if e.kind != "oom_kill" or not e.unit or not e.unit.endswith(".service") or e.unit in down:
                continue
            what = f"pid {e.pid} ({e.fields.get('process') or '?'})" if e.pid is not None else "a process"
            why = (f"systemd logged no failure of it in the journal of {e.host or 'the host'} here, so the process "
                   "was probably not its main one" if journal else
                   f"no journal of {e.host or 'the host'} was ingested, and only systemd's lines about the unit "
                   "would say")
            out.append(f"`{e.unit}` lost {what} to the kernel OOM killer ({e.path}:{e.line}). Whether the service "
                       f"went down with it is not in these logs: {why} (`journalctl -u {e.unit}`).")
        return tuple(dict.fromkeys(out))

    def impact(self) -> tuple[ImpactRow, ...]:
        rows = []
        for ui in unit_impacts(self.i):
            runs = []
            for r in ui.runs:
                bits = []
                if r.started:
                    bits.append(f"started {self.clock.utc_text(r.started, self.utc_dates)}")
                if r.ready:
                    load = f" ({duration((r.ready - r.started).total_seconds())} to load)" if r.started else ""
                    bits.append(f"ready {self.clock.utc_text(r.ready, self.utc_dates)}{load}")
                if r.down:
                    up = f" after {duration((r.down - r.ready).total_seconds())} up" if r.ready else ""
                    bits.append(f"down {self.clock.utc_text(r.down, self.utc_dates)}{up}")
                if r.started or r.ready:
                    runs.append(", ".join(bits))
            if ui.gave_up is not None:
                runs.append(f"then systemd stopped restarting it at {self.clock.utc_text(ui.gave_up, self.utc_dates)} "
                            f"(start request repeated too quickly): it stays down until systemctl reset-failed "
                            f"{ui.unit} and a start")
            for n, o in enumerate(ui.outages):   # the unit's runs go with its first outage, listed once
                secs = o.seconds
                if o.back is not None:
                    back = self.clock.both(o.back, with_date=self.utc_dates)
                    down_for = duration(secs or 0)
                else:
                    back = "not within the logs"
                    down_for = (f"at least {duration(secs)} (until the logs end)" if secs else
                                "still down when the logs end")
                if o.failed_restarts:
                    again = "once" if o.failed_restarts == 1 else f"{o.failed_restarts} times"
                    down_for += f"; restarted {again}, down again before it was ready"
                rows.append(ImpactRow(ui.unit, o.host or "", self.clock.both(o.down, with_date=self.utc_dates),
                                      o.down_title, back, down_for, tuple(runs) if n == 0 else (), o.failed_restarts))
        return tuple(rows)

    def configs(self) -> tuple[ConfigView, ...]:
        """The launch configurations; of a dump of every argument (defaults too), the table keeps the arguments
        with a review note and counts the others (they are in the quoted dump)."""
        out = []
        for c in self.i.configs:
            flags = [FlagView(f.name, f.value, f.note) for f in c.flags]
            shown = [f for f in flags if f.note] if is_dump(c.command) else flags
            out.append(ConfigView(unit=c.unit or "", host=c.host or "",
                                  where=self.where(c.evidence.path, c.evidence.line, c.evidence.line_end),
                                  command=c.command, flags=tuple(shown), arithmetic=c.arithmetic,
                                  folded=len(flags) - len(shown), note=c.note))
        return tuple(out)

    def environment(self) -> tuple[tuple[str, str], ...]:
        env = self.i.environment
        keys = [k for k in ENV_ORDER if k in env] + sorted(k for k in env if k not in ENV_ORDER)
        return tuple((k, str(env[k])) for k in keys)

    def actions(self) -> tuple[ActionView, ...]:
        seen: set[object] = set()
        out: list[ActionView] = []

        def add(steps: Sequence[str], about: str) -> None:
            for step in steps:
                key = command_key(step)
                if key not in seen:
                    seen.add(key)
                    out.append(ActionView(step, about))

        first = first_failed(self.i)
        if first is not None:   # the node that failed first: its own report before this host's commands
            seen.add(f"forensics report --incident {first.incident}")
            out.append(ActionView(f"forensics report --incident {first.incident}", first.host))
        for c in self.i.conclusions:
            about = unit_label(c.unit) if c.unit else kind_label(c.kind)
            cause = self.events.get(c.cause_event) if c.cause_event else None
            if is_container_scope(c.unit) or (cause is not None and not cause.next_steps):
                # a container's scope is gone with it (the restart runs in a new one): the commands its line's rule
                # gives a unit (`systemctl show`, `journalctl -u`) find nothing, the conclusion's (kubectl) do; and a
                # cause line whose rule gives none (the kubelet's eviction passes) has the conclusion's
                add(c.next_steps, about)
            elif cause is not None:
                add(cause.next_steps, about)
        symptoms = set(self.i.symptoms)
        for e in self.i.events:
            if e.id not in symptoms and e.id not in self.cause_events and e.role != "symptom":
                add(e.next_steps, unit_label(e.unit) if e.unit else kind_label(e.kind))
        return tuple(out)

    def excerpt_views(self) -> tuple[ExcerptView, ...]:
        out = []
        for x in self.excerpts:
            width = len(str(x.last))
            text = "\n".join(_gutter(ln, width) for ln in x.lines)
            out.append(ExcerptView(x.path, f"{x.path}:{line_span(x.first, x.last)}", text, x.notes, x.from_file))
        return tuple(out)

    def sources(self) -> tuple[SourceView, ...]:
        out = []
        for s in self.i.sources:
            out.append(SourceView(
                path=s.path, short=self.short.get(s.path, s.path), sha256=s.sha256, format=s.format,
                confidence=f"{s.confidence:.0%}", host=s.host or "", records=s.records, unparsed=s.unparsed,
                first=self.clock.utc_text(parse_ts(s.first_ts), True) if s.first_ts else "",
                last=self.clock.utc_text(parse_ts(s.last_ts), True) if s.last_ts else "",
                time_anchor=s.time_anchor))
        return tuple(out)

    def time_notes(self) -> tuple[TimeNote, ...]:
        counts = Counter(e.ts_source for e in self.i.events)
        order = list(TIME_SOURCE_WORDS)
        return tuple(TimeNote(k, TIME_SOURCE_WORDS.get(k, k), n)
                     for k, n in sorted(counts.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else 99, kv[0])))

    def build(self) -> IncidentView:
        i = self.i
        start, end = parse_ts(i.start), parse_ts(i.end)
        date = f"{start:%Y-%m-%d}" if start else UNDATED
        if start and end:
            same = start.date() == end.date()
            window = f"{self.clock.both(start)} to {self.clock.both(end, with_date=not same)}"
        else:
            window = self.clock.both(start or end)
        timeline = self.timeline()
        impact = self.impact()
        failures = tuple(UnitFailures(u, tuple(r.down for r in impact if r.unit == u),
                                      sum(r.restarts for r in impact if r.unit == u))
                         for u in dict.fromkeys(r.unit for r in impact))
        conclusions = self.repeats(tuple(self.conclusion(c) for c in i.conclusions), i.conclusions)
        root = next((c for c in conclusions if c.is_root), None)
        actions = self.actions()
        return IncidentView(
            index=self.index, id=i.id, headline=i.headline, date=date, window=window, hosts=i.hosts, units=i.units,
            failures=failures, root=root, conclusions=conclusions, impact=impact, timeline=timeline,
            timeline_has_inferred=any(r.time.inferred for r in timeline), key_lines=self.key_lines(),
            configs=self.configs(), environment=self.environment(), gaps=tuple(GapView(g.what, g.why, g.commands)
                                                                               for g in i.gaps),
            actions=actions, excerpts=self.excerpt_views(), excerpts_total=len(self.excerpts),
            sources=self.sources(), time_notes=self.time_notes(), events_total=len(i.events),
            background=tuple(self.background(b) for b in i.background),
            losses=self.losses(impact), neighbours=self.neighbours(),
            nodes=node_sentences(i, lambda t: self.clock.utc_text(t, self.utc_dates)),
            unfilled=unfilled_note([a.text for a in actions] + [s for c in conclusions for s in c.next_steps],
                                   i.start is not None))


_CLOCKS = re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?\b|:\d+(?:-\d+)?`")


def _masked(statement: str) -> str:
    """A statement without its dates, times and `path:line` numbers: what two of a crash loop's share."""
    return _CLOCKS.sub("#", statement)


BACKGROUND_TIMES = 5          # a unit failing routinely: the times of its failures in the window listed, at most
UNDATED = "an unknown date"   # an incident's date when none of its lines has a wall-clock time
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)\}")
_TIME_NAMES = ("since", "until", "window_start", "window_end", "ts")
_WHY_UNFILLED = {"host": "no ingested line names the host", "unit": "no line names the unit",
                 "pid": "no line names the process"}


def unfilled_note(commands: Sequence[str], dated: bool) -> str:
    """What the placeholders left in the commands stand for, and why the logs cannot fill them ("" for none).
    Only placeholder names (the standard ones and `step.field`), not a command's own braces (`awk '{print}'`)."""
    known = set(STANDARD_PLACEHOLDERS) | set(STANDARD_NAMES)
    names = list(dict.fromkeys(n for c in commands for n in _PLACEHOLDER.findall(c) if n in known or "." in n))
    if not names:
        return ""
    parts: list[str] = []
    times = [n for n in names if n in _TIME_NAMES]
    if times:
        why = ("the incident has no wall-clock time: what the logs do not show says how to find it" if not dated
               else "the line they are about has no wall-clock time")
        parts.append(f"{_and([f'`{{{n}}}`' for n in times])}, as {why}")
    for n in names:
        if n not in _TIME_NAMES:
            parts.append(f"`{{{n}}}`, as {_WHY_UNFILLED.get(n, 'the logs do not give it')}")
    return "Left for you to fill in the commands: " + "; ".join(parts) + "."


_OUTPUT_ONLY = ("--no-pager", "-q", "--quiet", "-l", "--full")


def command_key(step: str) -> object:
    """What a next step asks for, to list it once: a `journalctl` command without the options that only change how
    the same lines print (`-o short-iso-precise`, `--no-pager`), so `journalctl -u X --since A --until B` and the
    same with `-o short-iso-precise` are one; any other command as written."""
    if not step.startswith("journalctl "):
        return step
    try:
        words = shlex.split(step)
    except ValueError:
        return step
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
        elif w in ("-o", "--output"):
            skip = True
        elif not (w in _OUTPUT_ONLY or w.startswith("--output=") or (w.startswith("-o") and len(w) > 2)):
            out.append(w)
    return tuple(out)


def _and(items: Sequence[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Line spans, sorted, with touching or overlapping ones joined."""
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _gutter(line: ExcerptLine, width: int) -> str:
    return f"{'>' if line.cited else ' '} {line.number:>{width}}  {line.text}" if line.text else \
        f"{'>' if line.cited else ' '} {line.number:>{width}}"


def build_view(data: ReportData, options: ReportOptions, *, redacted: bool, svg_slot: str = "") -> ReportView:
    clock = Clock(options.tz)
    incidents = tuple(_Builder(inc, ex, n, clock).build()
                      for n, (inc, ex) in enumerate(zip(data.incidents, data.excerpts)))
    if len(incidents) == 1:
        title = incidents[0].headline
    else:
        dates = sorted({v.date for v in incidents if v.date != UNDATED})
        span = (dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}") if dates else ""
        if any(v.date == UNDATED for v in incidents):
            span = f"{span} and undated" if span else "undated"
        title = f"{len(incidents)} incidents, {span}" if incidents else "No incidents"
    return ReportView(title=title, single=len(incidents) == 1, incidents=incidents, tz=options.tz,
                      zone_is_utc=clock.is_utc, tool_version=data.tool_version, rulepacks=data.rulepacks,
                      generated_at=options.generated_at, redacted=redacted, trim_note="", svg_slot=svg_slot)

