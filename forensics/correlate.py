"""Correlation, the engine: the correlations (`forensics.correlation_packs`) matched on events as it sees them
(`forensics.eventview`) into `Conclusion`s (cause -> the symptoms it explains).

The correlation is data, the engine is code. A correlation names `steps` (event kinds, optionally filtered
by field values), one of which is the `anchor`: every other step is searched within `window` of an anchor
event, in the listed order when `ordered`, joined on entities (host, unit, pid, cgroup, pci, rank, gpu, and a
Kubernetes pod and container). A match gives a conclusion: the `cause` step's event, the events of the `explains`
steps, a confidence and a statement filled from the matched events (`{oom.pid}`, `{killed.unit}`, `{since}`,
`{coverage.missing}`).

Resolution, in order:
  * `group`: correlations of one group compete for an anchor event; the highest `priority` keeps it. A
    loser of the same conclusion kind adds its evidence to the winner, another kind is listed among the
    winner's alternatives.
  * `fold: true`: the conclusion describes a cause that others may already blame; it is merged into the
    conclusion with the same cause event (or the one that explains its anchor), adding its `fold_statement`,
    evidence and explained events; with no such conclusion it stands alone with its `statement`.
"""

from __future__ import annotations

import fnmatch
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import polars as pl

from .correlation_packs import Against, Correlation, Join, Step, Where, load_correlations
from .coverage import Coverage, CoverageReport, SourceSpan, hms
from .eventview import UNKNOWN_HOST, VIEW_COLUMNS, EventView, as_text, views
from .kubepods import scope_id
from .model import Confidence, Conclusion, Evidence
from .schema import TimeSource
from .statements import fill, fill_prose


CONFIDENCE_ORDER = (Confidence.CONFIRMED, Confidence.LIKELY, Confidence.POSSIBLE, Confidence.INCONCLUSIVE)


# ----------------------------------------------------------------------------------------------------------
# matching


@dataclass(frozen=True)
class Match:
    """One firing of a correlation: the anchor and the events bound to each step."""

    correlation: Correlation
    anchor: EventView
    bound: tuple[tuple[str, tuple[EventView, ...]], ...]
    against: tuple[tuple[Against, EventView], ...] = ()
    coverage: CoverageReport | None = None

    def events(self, step: str) -> tuple[EventView, ...]:
        for name, evs in self.bound:
            if name == step:
                return evs
        return ()

    def all_events(self) -> list[EventView]:
        seen: dict[int, EventView] = {}
        for _, evs in self.bound:
            for e in evs:
                seen[e.seq] = e
        return sorted(seen.values(), key=lambda e: e.seq)


@dataclass(frozen=True)
class Finding:
    """A resolved conclusion with what incidents need besides the Conclusion itself."""

    conclusion: Conclusion
    headline: str
    anchor: str                        # Event.id of the anchor
    priority: int
    roles: tuple[tuple[str, str], ...]  # Event.id -> role in the incident
    event_ids: tuple[str, ...]         # every event bound by the firing(s) merged into this finding
    rules: tuple[str, ...]             # ids of the correlations merged into this finding
    t: float | None                    # time of the cause (or anchor) event


class Timeline:
    """Events indexed for the engine: by kind, in time order."""

    def __init__(self, evs: Sequence[EventView]):
        self.events = list(evs)
        self.by_kind: dict[str, list[EventView]] = {}
        for e in self.events:
            self.by_kind.setdefault(e.kind, []).append(e)
        self.times: dict[str, list[float]] = {}
        for k, lst in self.by_kind.items():
            lst.sort(key=lambda e: (e.t is None, e.t or 0.0, e.seq))
            self.times[k] = [e.t for e in lst if e.t is not None]
        self.by_id = {e.id: e for e in self.events}

    def timed(self, kind: str, lo: float, hi: float) -> list[EventView]:
        lst = self.by_kind.get(kind, [])
        ts = self.times.get(kind, [])
        return lst[bisect_left(ts, lo):bisect_right(ts, hi)]

    def untimed(self, kind: str) -> list[EventView]:
        return [e for e in self.by_kind.get(kind, []) if e.t is None]


def _where_ok(e: EventView, where: Sequence[Where]) -> bool:
    for w in where:
        if w.hit(e.value(w.field)) == w.negate:
            return False
    return True


def _agreeing(e: EventView, ent: str) -> str | None:
    """An entity for `agree`: a launch configuration's pid is the process that logged it (a journal's
    `python3[pid]` server_args dump), which its entities leave out (a `ps` line or a wrapper may log a command)."""
    v = e.entities.get(ent)
    if v is None and ent == "pid" and e.kind == "server_config" and e.pid is not None and e.pid != 1:
        return str(e.pid)
    return v


def joined(a: EventView, b: EventView, join: Join) -> bool:
    for ent in join.same:
        va, vb = a.entities.get(ent), b.entities.get(ent)
        if va is None or vb is None or va != vb:
            return False
    for ent in join.agree:
        va, vb = _agreeing(a, ent), _agreeing(b, ent)
        if va is not None and vb is not None and va != vb:
            return False
    if join.any:
        for ent in join.any:
            va, vb = a.entities.get(ent), b.entities.get(ent)
            if va is not None and va == vb:
                return True
        return False
    return True


def _candidates(tl: Timeline, step: Step | Against, anchor: EventView, lo: float, hi: float,
                join: Join, untimed: bool = False) -> list[EventView]:
    out = []
    for k in step.kinds:
        for e in tl.timed(k, lo, hi):
            if e.seq != anchor.seq and _where_ok(e, step.where) and joined(e, anchor, join):
                out.append(e)
        if untimed:
            for e in tl.untimed(k):
                if e.seq != anchor.seq and _where_ok(e, step.where) and joined(e, anchor, join):
                    out.append(e)
    return out


def _pick(cands: list[EventView], step: Step, anchor_t: float) -> EventView | None:
    if not cands:
        return None
    pref = {k: i for i, k in enumerate(step.kinds)}
    return min(cands, key=lambda e: (pref.get(e.kind, 99), abs((e.t if e.t is not None else 1e18) - anchor_t),
                                     e.seq))


def match_at(tl: Timeline, c: Correlation, anchor: EventView, used_unique: set[int] | frozenset = frozenset()
             ) -> Match | None:
    """The firing of `c` at `anchor`, or None. Steps are bound nearest-first (by kind preference, then time
    distance), so the result is the tightest match; ordered steps respect the listed order. An untimed anchor
    (kernel seconds not anchored to the wall clock) fires only correlations whose other steps are optional, and
    binds nothing else: without a time there is no window."""
    a_step = c.step(c.anchor)
    if anchor.kind not in a_step.kinds or not _where_ok(anchor, a_step.where):
        return None
    if anchor.t is None:
        if not untimed_ok(c):
            return None
        return Match(correlation=c, anchor=anchor,
                     bound=tuple((s.name, (anchor,) if s.name == c.anchor else ()) for s in c.steps))
    k = [s.name for s in c.steps].index(c.anchor)
    bound: dict[str, tuple[EventView, ...]] = {c.anchor: (anchor,)}
    taken = {anchor.seq}

    def bind(i: int, lo_bound: float | None, hi_bound: float | None) -> tuple[float | None, float | None] | None:
        s = c.steps[i]
        w = s.within if s.within is not None else c.window
        lo, hi = anchor.t - w, anchor.t + w
        if lo_bound is not None:
            lo = max(lo, lo_bound - c.slack)
        if hi_bound is not None:
            hi = min(hi, hi_bound + c.slack)
        join = s.join if s.join is not None else c.join
        cands = [e for e in _candidates(tl, s, anchor, lo, hi, join, s.untimed)
                 if e.seq not in taken and not (s.unique and e.seq in used_unique)]
        if s.collects:
            evs = sorted(cands, key=lambda e: (e.t if e.t is not None else 1e18, e.seq))
            if s.distinct is not None:
                vals = {as_text(v) for e in [anchor, *evs] if (v := e.value(s.distinct)) is not None}
                if len(vals) < max(s.min_distinct, 1):
                    return None
            if len(evs) < s.min:
                return None
        else:
            e = _pick(cands, s, anchor.t)
            if e is None and s.min >= 1:
                return None
            evs = [e] if e is not None else []
        bound[s.name] = tuple(evs)
        taken.update(e.seq for e in evs)
        timed = [e.t for e in evs if e.t is not None]
        return (min(timed) if timed else None, max(timed) if timed else None)

    if c.ordered:
        hi_b: float | None = anchor.t
        for i in range(k - 1, -1, -1):
            r = bind(i, None, hi_b)
            if r is None:
                return None
            if r[0] is not None:
                hi_b = r[0]
        lo_b: float | None = anchor.t
        for i in range(k + 1, len(c.steps)):
            r = bind(i, lo_b, None)
            if r is None:
                return None
            if r[1] is not None:
                lo_b = r[1]
    else:
        for i in range(len(c.steps)):
            if i != k and bind(i, None, None) is None:
                return None
    ordered_bound = tuple((s.name, bound.get(s.name, ())) for s in c.steps)
    against: list[tuple[Against, EventView]] = []
    for ag in c.against:
        w = ag.within if ag.within is not None else c.window
        for e in _candidates(tl, ag, anchor, anchor.t - w, anchor.t + w, ag.join if ag.join is not None else c.join):
            if e.seq not in taken:
                against.append((ag, e))
    return Match(correlation=c, anchor=anchor, bound=ordered_bound, against=tuple(against))


def untimed_ok(c: Correlation) -> bool:
    """Can `c` fire on an untimed anchor? Only when the anchor is the cause and every other step is optional."""
    return c.anchor == c.cause and not c.coverage and all(s.min == 0 for s in c.steps if s.name != c.anchor)


def find_matches(tl: Timeline, c: Correlation, coverage: Coverage | None = None) -> list[Match]:
    """Every firing of one correlation, anchors in time order (untimed ones last, where allowed). An event bound
    by a firing cannot anchor a later firing of the same correlation (a burst is one finding); `unique` steps
    serve one firing."""
    a_step = c.step(c.anchor)
    allow_untimed = untimed_ok(c)
    anchors = sorted((e for k in a_step.kinds for e in tl.by_kind.get(k, []) if e.t is not None or allow_untimed),
                     key=lambda e: (e.t is None, e.t or 0.0, e.seq))
    used: set[int] = set()
    used_unique: set[int] = set()
    out: list[Match] = []
    for a in anchors:
        if a.seq in used:
            continue
        m = match_at(tl, c, a, used_unique)
        if m is None:
            continue
        if a.ts is None:
            out.append(m)
            used.add(a.seq)
            continue
        since, until = kernel_window(a.ts)
        rep = (coverage or Coverage([])).report(a.entities.get("host"), a.entities.get("unit"), a.ts, since, until)
        state = {"kernel": rep.kernel, "unit_output": rep.unit_output}
        if any(state[log] != (want == "present") for log, want in c.coverage):
            continue
        m = replace(m, coverage=rep)
        out.append(m)
        for e in m.all_events():
            used.add(e.seq)
        for s in c.steps:
            if s.unique:
                used_unique.update(e.seq for e in m.events(s.name))
    return out


# ----------------------------------------------------------------------------------------------------------
# conclusions


def kernel_window(at: datetime) -> tuple[datetime, datetime]:
    """The window an exact next command asks for: from two minutes before the minute of `at` to one minute
    after (20:17:19 -> 20:15 .. 20:18)."""
    at = at.astimezone(timezone.utc)
    minute = at.replace(second=0, microsecond=0)
    return minute - timedelta(minutes=2), minute + timedelta(minutes=1)


def fmt_when(t: datetime) -> str:
    u = t.astimezone(timezone.utc)
    return f"{_ymd(u)} {u.hour:02d}:{u.minute:02d}"


def iso(t: datetime | None) -> str | None:
    if t is None:
        return None
    u = t.astimezone(timezone.utc)
    return f"{_ymd(u)}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}.{u.microsecond:06d}Z"


def _ymd(u: datetime) -> str:
    """strftime("%Y-%m-%d"), without its cost."""
    return f"{u.year}-{u.month:02d}-{u.day:02d}" if u.year >= 1000 else u.strftime("%Y-%m-%d")


def human_seconds(s: float) -> str:
    s = abs(s)
    if s < 1:
        return "under a second"
    if s < 90:
        return f"{s:.0f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m} min {sec} s" if sec else f"{m} min"
    h, m = divmod(m, 60)
    return f"{h} h {m} min" if m else f"{h} h"


def is_container_scope(unit: str | None) -> bool:
    """A container's scope: a unit that is new on every restart of the container (a new id each time)."""
    return scope_id(unit) is not None


def unit_label(unit: str) -> str:
    """A unit as a headline names it: a container's scope (`docker-<64 hex>.scope`, containerd's, CRI-O's,
    podman's) as `container <12 hex>`, the id `docker ps` shows; any other unit as it is."""
    cid = scope_id(unit)
    return f"container {cid[:12]}" if cid else unit


def step_values(evs: Sequence[EventView], anchor: EventView, distinct: str | None = None) -> dict[str, Any]:
    """The placeholders of one step: the first event's fields and columns, plus `count`, `time`, `ago`,
    `where` (path:line), `unit_label` (`unit_label`), `all_<field>` (the distinct values over the step's events)
    and `distinct_values`."""
    if not evs:
        return {}
    e = evs[0]
    vals: dict[str, Any] = {k: v for k, v in e.fields.items() if not isinstance(v, (dict, list))}
    for col in VIEW_COLUMNS:
        vals.setdefault(col, getattr(e, col))
    for k, v in e.entities.items():
        vals.setdefault(k, v)
    vals["id"] = e.id
    if vals.get("unit") is not None:
        vals["unit_label"] = unit_label(str(vals["unit"]))
    vals["count"] = len(evs)
    vals["where"] = f"{e.path}:{e.line}"
    vals["first_line"] = e.message.split("\n", 1)[0]
    if e.ts is None:
        vals["time"] = ("an unknown time (its kernel seconds are not anchored to the wall clock)"
                        if e.ts_source == TimeSource.MONOTONIC_ONLY else "an unknown time (its line carries no time stamp)")
    else:
        vals["ts"] = iso(e.ts)
        vals["time"] = hms(e.ts)
        u = e.ts.astimezone(timezone.utc)
        vals["date"] = _ymd(u)
        vals["at"] = f"{vals['date']} {u.hour:02d}:{u.minute:02d}:{u.second:02d}"
        if anchor.t is not None and e.t is not None:
            vals["ago"] = human_seconds(anchor.t - e.t)
    fields_all: dict[str, list[str]] = {}
    for ev in evs:
        for k, v in ev.fields.items():
            if v is None or isinstance(v, (dict, list)):
                continue
            lst = fields_all.setdefault(k, [])
            if as_text(v) not in lst:
                lst.append(as_text(v))
        for k, v in ev.entities.items():
            if ev.fields.get(k) is not None:   # `{step.k}` reads the field first: `all_k` lists what it would
                continue                       # (a pod's name, not also its `namespace/name` entity)
            lst = fields_all.setdefault(k, [])
            if v not in lst:
                lst.append(v)
    for k, lst in fields_all.items():
        vals[f"all_{k}"] = ", ".join(lst)
    if distinct is not None:
        dv = fields_all.get(distinct, [])
        vals["distinct_values"] = ", ".join(dv)
        vals["distinct_count"] = len(dv)
    if evs[-1].ts is not None:
        vals["last_time"] = hms(evs[-1].ts)
    return vals


def _values(m: Match) -> dict[str, Any]:
    c = m.correlation
    a = m.anchor
    vals: dict[str, Any] = {}
    for s in c.steps:
        sv = step_values(m.events(s.name), a, s.distinct)
        if s.distinct and s.name != c.anchor:
            # distinct values counted with the anchor's
            dv = []
            for e in [a, *m.events(s.name)]:
                v = e.value(s.distinct)
                if v is not None and as_text(v) not in dv:
                    dv.append(as_text(v))
            sv["distinct_values"] = ", ".join(dv)
            sv["distinct_count"] = len(dv)
        vals[s.name] = sv
    for ag in c.against:
        evs = tuple(e for g, e in m.against if g is ag)
        vals[ag.name] = step_values(evs, a)
    if a.ts is not None:
        since, until = kernel_window(a.ts)
        vals["since"] = fmt_when(since)
        vals["until"] = fmt_when(until)
    vals["host"] = a.entities.get("host")
    cause = m.events(c.cause)
    vals["unit"] = a.entities.get("unit") or (cause[0].entities.get("unit") if cause else None)
    vals["anchor"] = vals[c.anchor]
    vals["cause"] = vals[c.cause]
    if m.coverage is not None:
        vals["coverage"] = m.coverage.as_values()
    return vals


def evidence_of(e: EventView, note: str) -> Evidence:
    return Evidence(path=e.path, line=e.line, line_end=e.line_end, ts=iso(e.ts), ts_source=e.ts_source,
                    text=e.message, note=note, source_id=e.source_id)


def _prose(vals: dict[str, Any]) -> dict[str, Any]:
    """The values a statement is written with: a host the events do not name reads `unknown host`, as their
    incident's host does (commands keep the `{host}` placeholder, for the reader to fill)."""
    return {**vals, "host": vals.get("host") or UNKNOWN_HOST}


def _finding(m: Match) -> Finding:
    c = m.correlation
    vals = _values(m)
    text = _prose(vals)
    cause = m.events(c.cause)[0]
    evs = m.all_events()
    others = sorted((e for e in evs if e.seq != cause.seq), key=lambda e: (e.t is None, e.t or 0.0, e.seq))
    step_of = {e.seq: name for name, es in m.bound for e in es}
    ev_for = [evidence_of(cause, f"{c.cause}: {cause.title or cause.kind}"
                          + (" (what it shows needs explaining; the cause is not in the logs)" if c.suspected else ""))]
    ev_for += [evidence_of(e, f"{step_of[e.seq]}: {e.title or e.kind}") for e in others]
    ev_against = [evidence_of(e, fill_prose(ag.note, text) if ag.note else f"{ag.name}: {e.title or e.kind}")
                  for ag, e in m.against]
    confidence = c.confidence
    if m.against and c.downgrade is not None and _rank(c.downgrade) > _rank(confidence):
        confidence = c.downgrade
    explained = []
    for name in c.explains:
        explained += [e for e in m.events(name) if e.seq != cause.seq or c.suspected]
    explained.sort(key=lambda e: (e.t is None, e.t or 0.0, e.seq))
    role_of = dict(c.roles)
    roles = [] if c.suspected else [(cause.id, "cause")]
    for name in c.explains:
        for e in m.events(name):
            if e.seq != cause.seq or c.suspected:
                roles.append((e.id, role_of.get(name, "symptom")))
    for name, r in c.roles:
        if name not in c.explains:
            roles += [(e.id, r) for e in m.events(name)]
    steps = tuple(dict.fromkeys(fill(s, vals) for s in c.next_steps))
    concl = Conclusion(
        rule=c.id, kind=c.kind or cause.kind, confidence=confidence, statement=fill_prose(c.statement, text),
        cause_event=None if c.suspected else cause.id, explains=tuple(dict.fromkeys(e.id for e in explained)),
        evidence_for=tuple(ev_for), evidence_against=tuple(ev_against),
        alternatives=tuple(fill_prose(a, text) for a in c.alternatives), next_steps=steps,
        unit=vals["unit"])
    return Finding(conclusion=concl, headline=fill_prose(c.headline, text) if c.headline else c.title,
                   anchor=m.anchor.id, priority=c.priority, roles=tuple(roles),
                   event_ids=tuple(e.id for e in evs), rules=(c.id,),
                   t=cause.t if cause.t is not None else m.anchor.t)


def _rank(c: Confidence) -> int:
    return CONFIDENCE_ORDER.index(c)


def _merge_evidence(a: Sequence[Evidence], b: Sequence[Evidence]) -> tuple[Evidence, ...]:
    seen = {(e.path, e.line) for e in a}
    out = list(a)
    for e in b:
        if (e.path, e.line) not in seen:
            seen.add((e.path, e.line))
            out.append(e)
    return tuple(out)


def _merge_roles(a: Sequence[tuple[str, str]], b: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    have = dict(a)
    out = list(a)
    for eid, r in b:
        if eid not in have:
            have[eid] = r
            out.append((eid, r))
    return tuple(out)


def _fold_into(target: Finding, f: Finding, fold_statement: str) -> Finding:
    tc, fc = target.conclusion, f.conclusion
    explains = tuple(dict.fromkeys([*tc.explains, *(x for x in fc.explains if x != tc.cause_event)]))
    statement = tc.statement + (" " + fold_statement if fold_statement else "")
    worst = max((tc.confidence, fc.confidence), key=_rank) if fc.cause_event == tc.cause_event else tc.confidence
    concl = replace(tc, statement=statement, explains=explains, confidence=worst,
                    evidence_for=_merge_evidence(tc.evidence_for, fc.evidence_for),
                    evidence_against=_merge_evidence(tc.evidence_against, fc.evidence_against),
                    alternatives=tuple(dict.fromkeys([*tc.alternatives, *fc.alternatives])),
                    next_steps=tuple(dict.fromkeys([*tc.next_steps, *fc.next_steps])))
    return replace(target, conclusion=concl, roles=_merge_roles(target.roles, f.roles),
                   event_ids=tuple(dict.fromkeys([*target.event_ids, *f.event_ids])),
                   rules=tuple(dict.fromkeys([*target.rules, *f.rules])))


def resolve(matches: Sequence[Match]) -> list[Finding]:
    """Matches -> findings: exclusive groups first, then folds (see the module docstring)."""
    order = _exclusive(sorted(matches, key=lambda m: (-m.correlation.priority, m.anchor.t is None,
                                                      m.anchor.t or 0.0, m.anchor.seq, m.correlation.id)))
    kept: list[tuple[Match, Finding]] = []
    claimed: dict[tuple[str, str], int] = {}          # (group, anchor id) -> index in kept
    for m in order:
        c = m.correlation
        f = _finding(m)
        if c.group is not None:
            key = (c.group, m.anchor.id)
            if key in claimed:
                i = claimed[key]
                wm, wf = kept[i]
                if f.conclusion.kind == wf.conclusion.kind:
                    wc = replace(wf.conclusion,
                                 evidence_for=_merge_evidence(wf.conclusion.evidence_for, f.conclusion.evidence_for),
                                 explains=tuple(dict.fromkeys([*wf.conclusion.explains, *(
                                     x for x in f.conclusion.explains if x != wf.conclusion.cause_event)])))
                    wf = replace(wf, conclusion=wc, roles=_merge_roles(wf.roles, f.roles),
                                 event_ids=tuple(dict.fromkeys([*wf.event_ids, *f.event_ids])))
                elif not c.suspected and f.conclusion.cause_event not in wf.event_ids:
                    # a different explanation the logs also support (a fallback, or one the winner subsumes, is not)
                    alt = (f"{c.title}: also consistent with the logs, less specific "
                           f"({f.conclusion.confidence.value}): {f.conclusion.statement}")
                    wf = replace(wf, conclusion=replace(wf.conclusion,
                                                        alternatives=(*wf.conclusion.alternatives, alt)))
                kept[i] = (wm, wf)
                continue
            claimed[key] = len(kept)
        kept.append((m, f))
    primaries = [(m, f) for m, f in kept if not m.correlation.fold]
    folds = [(m, f) for m, f in kept if m.correlation.fold]
    primaries.sort(key=lambda mf: (mf[1].t is None, mf[1].t or 0.0, -mf[1].priority, mf[0].correlation.id))
    # the first primary with a given cause event, and the first that blames or explains a given event (a fold
    # only adds explained events to its target, and a primary that takes no fold is added last)
    by_cause: dict[str | None, int] = {}
    by_event: dict[str, int] = {}

    def index(i: int, c: Conclusion) -> None:
        by_cause.setdefault(c.cause_event, i)
        for x in (c.cause_event, *c.explains):
            if x is not None and by_event.get(x, i) >= i:
                by_event[x] = i

    for i, (_pm, pf) in enumerate(primaries):
        index(i, pf.conclusion)
    # A fold merges into the conclusion that blames its cause or explains its anchor. That conclusion may itself be
    # a fold's, or take in a fold that explains the anchor only later in the order (a pod's death anchored at the
    # SGLang scheduler's crash, which the CUDA OOM's fold explains): the folds left without a target are tried
    # again after each pass, and only when none can merge does the first of them stand as its own conclusion.
    pending = list(folds)
    while pending:
        left: list[tuple[Match, Finding]] = []
        for m, f in pending:
            target = by_cause.get(f.conclusion.cause_event)
            if target is None:
                target = by_event.get(m.anchor.id)
            if target is None:
                left.append((m, f))
                continue
            pm, pf = primaries[target]
            primaries[target] = (pm, _fold_into(pf, f, fill_prose(m.correlation.fold_statement, _prose(_values(m)))
                                                if m.correlation.fold_statement else ""))
            index(target, primaries[target][1].conclusion)
        if len(left) == len(pending):
            primaries.append(left.pop(0))
            index(len(primaries) - 1, primaries[-1][1].conclusion)
        pending = left
    out = _one_per_cause([f for _, f in primaries])
    out.sort(key=lambda f: (f.t is None, f.t if f.t is not None else 0.0, -f.priority, f.rules[0], f.anchor))
    return out


def _exclusive(order: Sequence[Match]) -> list[Match]:
    """`order` (by priority) without the matches that bind, in an `exclusive` step, an event a match before them
    bound in one at another anchor: one SGLang child's failure (`Received sigquit`) ends one server, so once the
    unit that runs SGLang is tied to it, a unit that merely ended seconds later is not tied to it too."""
    taken: dict[str, str] = {}            # event id -> the anchor of the match that took it
    out: list[Match] = []
    for m in order:
        ex = m.correlation.exclusive
        if ex:
            ids = [e.id for name, evs in m.bound if name in ex for e in evs]
            if any(taken.get(x, m.anchor.id) != m.anchor.id for x in ids):
                continue
            for x in ids:
                taken.setdefault(x, m.anchor.id)
        out.append(m)
    return out


def _one_per_cause(found: Sequence[Finding]) -> list[Finding]:
    """Findings that say the same thing of the same cause event (one death seen twice: systemd's journal line and
    `systemctl show`'s ExecStart= both anchor the correlation) become one, explaining both symptoms."""
    out: list[Finding] = []
    first: dict[tuple[str, str, str], int] = {}
    for f in found:
        c = f.conclusion
        key = (f.rules[0], c.cause_event, c.statement) if c.cause_event is not None else None
        if key is not None and key in first:
            out[first[key]] = _fold_into(out[first[key]], f, "")
            continue
        if key is not None:
            first[key] = len(out)
        out.append(f)
    return out


def correlate_views(evs: Sequence[EventView], correlations: Sequence[Correlation],
                    coverage: Coverage | None = None) -> list[Finding]:
    """All correlations over a set of events (already enriched), resolved into findings."""
    tl = Timeline(evs)
    cov = coverage if coverage is not None else Coverage.from_views(evs)
    matches: list[Match] = []
    for c in correlations:
        matches.extend(find_matches(tl, c, cov))
    return resolve(matches)


def correlate_events(events: pl.DataFrame, correlations: Sequence[Correlation] | None = None,
                     sources: Coverage | Sequence[SourceSpan] | None = None,
                     knowledge: Any = None) -> list[Conclusion]:
    """The conclusions the correlations draw from an events frame (EVENT_SCHEMA), in time order.

    `sources` says which logs were ingested (a Coverage or its SourceSpans); without it, coverage is what the
    events themselves show. `knowledge` (configreview.Knowledge) adds derived fields such as the GPU family
    of an SM; the built-in knowledge packs are used when it is None."""
    return [f.conclusion for f in findings(events, correlations, sources, knowledge)]


# ----------------------------------------------------------------------------------------------------------
# which units run SGLang, as the logs show it


UNIT_END_KINDS = ("service_exited", "service_killed", "service_core_dumped")
SGLANG_UNIT_NAME = "*sglang*"
# an inference server's unit, by its name: its main process exiting non-zero is a failure of its own (significant),
# whatever the error before it (a unit of another name exiting non-zero is, unless a rule's error explains it, a
# unit failing as many do routinely: fwupd-refresh, a sync job)
SERVER_UNIT = r"(?i)sglang|vllm"
_SERVER_UNIT = re.compile(SERVER_UNIT)


def is_server_unit(unit: str | None) -> bool:
    """A unit named as an inference server's (SERVER_UNIT)."""
    return bool(unit) and bool(_SERVER_UNIT.search(unit or ""))


def server_exit(kind: str, unit: str | None, timed: bool, fields: Mapping[str, Any]) -> bool:
    """A timed non-zero exit of an inference server's unit (`service_exited` of a unit named as one)."""
    return kind == "service_exited" and timed and is_server_unit(unit) and fields.get("status") not in (0, "0")


def is_sglang_sign(kind: str, rule: str, command: Any) -> bool:
    """An event that shows its unit runs SGLang: a line of an SGLang rule, or a launch configuration whose command
    is SGLang's (`ExecStart=... -m sglang.launch_server`, `systemctl status`'s process line)."""
    return rule.startswith("sglang.") or (kind == "server_config" and "sglang" in str(command or "").lower())


def sglang_units(evs: Iterable[EventView]) -> set[tuple[str | None, str]]:
    """(host, unit) of the units that the events show running SGLang (`is_sglang_sign`)."""
    return {(e.host, u) for e in evs if (u := e.entities.get("unit"))
            and is_sglang_sign(e.kind, e.rule, e.fields.get("command") or e.fields.get("argv"))}


def with_runs(e: EventView, units: Callable[[], Collection[tuple[str | None, str]]]) -> EventView:
    """The end of a unit (its main process exited, was killed or dumped core) gets `runs: sglang` when the unit
    runs SGLang as far as the logs show: its name says so (`*sglang*`, any case), or `units()` holds it. The
    correlations that tie SGLang lines naming no unit to a unit's end ask for it."""
    u = e.entities.get("unit")
    if e.kind not in UNIT_END_KINDS or not u or "runs" in e.fields:
        return e
    if fnmatch.fnmatchcase(u.lower(), SGLANG_UNIT_NAME) or (e.host, u) in units():
        return replace(e, fields={**e.fields, "runs": "sglang"})
    return e


def findings(events: pl.DataFrame, correlations: Sequence[Correlation] | None = None,
             sources: Coverage | Sequence[SourceSpan] | None = None, knowledge: Any = None,
             host_gpus: Mapping[str, tuple[str | None, str]] | None = None) -> list[Finding]:
    from .configreview import enricher, load_knowledge

    corrs = load_correlations() if correlations is None else correlations
    kn = load_knowledge() if knowledge is None else knowledge
    evs = views(events, enricher(kn), host_gpus)
    units = sglang_units(evs)
    evs = [with_runs(e, lambda: units) for e in evs]
    cov = sources if isinstance(sources, Coverage) else Coverage(sources) if sources is not None else None
    return correlate_views(evs, corrs, cov)


# ----------------------------------------------------------------------------------------------------------
# incidents (built in forensics.incidents; re-exported here as the public entry points)


def build_incidents(store: Any, gap_minutes: float = 15.0) -> list:
    """Incidents of a store, sorted by start then id (see forensics.incidents.build_incidents)."""
    from .incidents import build_incidents as build

    return build(store, gap_minutes)


def resolve_incidents(store: Any, spec: str, gap_minutes: float = 15.0) -> list:
    """The incidents a full id, a unique id prefix or a date (YYYY-MM-DD) names; raises IncidentNotFound."""
    from .incidents import resolve_incidents as resolve_spec

    return resolve_spec(store, spec, gap_minutes)


def __getattr__(name: str) -> Any:
    if name == "IncidentNotFound":
        from .incidents import IncidentNotFound

        return IncidentNotFound
    raise AttributeError(name)
