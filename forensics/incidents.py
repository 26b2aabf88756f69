"""Incidents: significant events grouped per host within a gap window, with their conclusions.

    events (store) -> hosts and units filled where the logs imply them (forensics.prepare) -> the same line seen
    in several sources folded into one event -> correlations (forensics.correlate) -> significant events (severity
    error/critical, or role cause) clustered per host by `gap` (forensics.clustering) -> clusters merged when a
    conclusion spans them or when a unit started right after one cluster dies in the next (a fallback that dies
    too) -> one Incident per cluster: root cause, conclusions, events with their roles, configuration review,
    environment, what the logs cannot show, and a stable id `<date>-<host>-<unit>`.

Deterministic: the same store gives the same incidents, ids and conclusions, in the same order.

Scale: only the few events that can matter become Python objects (forensics.correlate_store): the events of
the kinds the correlations look at, the significant ones, and then, per incident, those of its host around
it. Hosts, units, the deterministic order and the fold sessions are computed over the whole store with
polars. Asking for one incident (`find_incidents`, `resolve_incidents`) looks only at the hosts its id can
name, and builds in full only the incidents asked for; the ids are those of `build_incidents`.
"""

from __future__ import annotations

import json
import os
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePath
from typing import Any

import polars as pl

from . import dayscope, nodes, profile
from .clustering import CONTEXT_KINDS, STARTS, Cluster, cluster, significant
from .configreview import Knowledge, flags_of, load_knowledge, review_configs
from .correlate import (
    Finding,
    Timeline,
    correlate_views,
    evidence_of,
    fmt_when,
    human_seconds,
    is_container_scope,
    iso,
    kernel_window,
    resolve,
)
from .correlate_local import LocalMatcher
from .correlate_store import correlation_kinds, host_local, unit_may_be
from .correlation_packs import Correlation, load_correlations
from .cutlines import read_note as read_cut_note
from .dayscope import Reach, Span, Window, day_of, first_window
from .environment import Fingerprint, fingerprints
from .eventview import KERNEL_KINDS, UNKNOWN_HOST, EventView
from .model import (Background, Conclusion, Confidence, Event, Evidence, Gap, Incident, Neighbour, NodeGroup, Repeat,
                    SourceInfo, is_request_traceback, to_jsonable)
from .nearanchor import StepOnly
from .prepare import Prepared, prepare
from .schema import YEAR_MTIME, YEAR_NOW
from .statements import Filler

DEFAULT_GAP_MINUTES = 15.0
REPEAT_MIN = 5                         # loose lines of one rule in an incident: from this many, one timeline row
REPEAT_AROUND_S = 3 * 3600.0           # ... whose rate is compared with the kind's in this long before and after
UNDATED_SPEC = "undated"               # an incident with no wall-clock time: its id's first word, and the spec for all
OWNER_S = 120.0                        # a configuration naming no unit: a unit's when logged this soon after its start
ROUTINE_MIN = 5                        # a unit's failures in the REPEAT_AROUND_S before an incident: it fails routinely
SGLANG_DEFAULT_PORT = "30000"          # `{port}` of a unit whose launch configuration gives none
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# correlations fired only where they can matter (forensics.correlate_local); off: at every anchor, as a check
LOCAL_MATCHING = os.environ.get("FORENSICS_LOCAL_MATCHING", "1") != "0"
# off: correlation reads every event of a step-only kind, near an anchor or not (a check that leaving them out
# changes nothing: forensics.nearanchor)
NEAR_ANCHORS = os.environ.get("FORENSICS_NEAR_ANCHORS", "1") != "0"


class IncidentNotFound(LookupError):
    """No incident matches what was asked for; the message names what exists."""


# ----------------------------------------------------------------------------------------------------------
# building one incident


def _slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    s = re.sub(r"[0-9a-f]{13,}", lambda m: m.group(0)[:12], s)     # docker-<64 hex>.scope -> docker-<12 hex>
    return s or "unknown"


def _host_slug(host: str) -> str:
    if host.startswith("unknown host ("):
        return _slug(host[len("unknown host ("):-1])
    if re.fullmatch(r"[\d.]+", host):
        return _slug(host)
    return _slug(host.split(".", 1)[0])


def _unit_stem(unit: str) -> str:
    return re.sub(r"\.(service|scope|slice|socket|timer|mount)$", "", unit)


def _conf_rank(c: Confidence) -> int:
    return [Confidence.CONFIRMED, Confidence.LIKELY, Confidence.POSSIBLE, Confidence.INCONCLUSIVE].index(c)


def _fallback(c: Cluster) -> Finding:
    """No correlation explains the incident: say what the first significant event is, and no more."""
    first = next((e for e in c.events if e.role == "cause"), c.events[0])
    unit = first.entities.get("unit")
    when = f"at {first.ts:%H:%M:%S}" if first.ts is not None else "at an unknown time"
    stmt = (f"No correlation explains this incident. The first significant event is {first.title or first.kind} "
            f"{when} ({first.path}:{first.line}); it is listed as the starting point, not as a proven cause.")
    if first.ts is not None:
        since, until = kernel_window(first.ts)
        steps: tuple[str, ...] = (f'journalctl --since "{fmt_when(since)}" --until "{fmt_when(until)}" --no-pager',)
    else:
        steps = ()
    concl = Conclusion(rule="incident.first_event", kind=first.kind, confidence=Confidence.INCONCLUSIVE,
                       statement=stmt, cause_event=first.id, explains=(),
                       evidence_for=(evidence_of(first, "the first significant event"),), evidence_against=(),
                       alternatives=(), next_steps=steps, unit=unit)
    return Finding(conclusion=concl, headline=f"{unit + ': ' if unit else ''}{first.title or first.kind}",
                   anchor=first.id, priority=0, roles=(), event_ids=(first.id,), rules=("incident.first_event",),
                   t=first.t)


def _with_copies(c: Conclusion, copies: Mapping[str, tuple[EventView, ...]], by_loc: Mapping[tuple[str, int], str]
                 ) -> Conclusion:
    """Evidence lines also seen in other sources cite those too, right after the line itself."""
    def expand(evs: Sequence[Evidence]) -> tuple[Evidence, ...]:
        out: list[Evidence] = []
        seen: set[tuple[str, int]] = set()
        for ev in evs:
            if (ev.path, ev.line) in seen:
                continue
            seen.add((ev.path, ev.line))
            out.append(ev)
            for cp in copies.get(by_loc.get((ev.path, ev.line), ""), ()):
                if (cp.path, cp.line) not in seen:
                    seen.add((cp.path, cp.line))
                    out.append(evidence_of(cp, f"the same line in {cp.path}"))
        return tuple(out)

    return replace(c, evidence_for=expand(c.evidence_for), evidence_against=expand(c.evidence_against))


class _Explainer:
    """Event.explain / next_steps from the rule that produced each event."""

    def __init__(self, cache_dir: Path | None = None) -> None:
        try:
            from .rulepacks import rule_texts

            self.rules = rule_texts(cache_dir)
        except Exception:  # noqa: BLE001 - an incident is still worth building without the rule texts
            self.rules = None
        self.filler = Filler()

    def event(self, e: EventView, role: str, ports: Mapping[str | None, str] | None = None) -> Event:
        """`ports`: unit -> the port its launch configuration gives (`{port}`; SGLang's default without one)."""
        texts = self.rules.get(e.rule) if self.rules is not None else None
        explain, steps = "", ()
        if texts is not None:
            rule_explain, rule_steps = texts
            vals: dict[str, Any] = {k: v for k, v in e.fields.items() if not isinstance(v, (dict, list))}
            since, until = kernel_window(e.ts) if e.ts is not None else (None, None)
            vals.update({"unit": e.entities.get("unit"), "host": e.host, "pid": e.entities.get("pid"),
                         "since": fmt_when(since) if since else None, "until": fmt_when(until) if until else None,
                         "ts": iso(e.ts), "path": e.path, "line": e.line, "rank": e.entities.get("rank"),
                         "rule": e.rule, "kind": e.kind,
                         "port": (ports or {}).get(e.entities.get("unit"), SGLANG_DEFAULT_PORT)})
            explain = self.filler.prose(rule_explain, vals)
            steps = tuple(self.filler.fill(s, vals) for s in rule_steps)
        pid = e.entities.get("pid")
        return Event(id=e.id, ts=iso(e.ts), ts_source=e.ts_source, kind=e.kind, rule=e.rule, severity=e.severity,
                     role=role, host=e.host, unit=e.entities.get("unit"),
                     pid=int(pid) if pid is not None and str(pid).isdigit() else e.pid, title=e.title,
                     explain=explain, next_steps=steps, fields=dict(e.fields), message=e.message, path=e.path,
                     line=e.line, line_end=e.line_end, format=e.format)


def _kernel_seconds(store, e: EventView) -> float | None:  # noqa: ANN001
    """The seconds since boot an untimed kernel event's line printed (`[17893.292639]`), from its record."""
    rows = (store.records([e.source_id]).filter(pl.col("line") == e.line).select("mono").head(1).collect())
    return rows.item(0, 0) if rows.height else None


def _gaps(c: Cluster, evs: Sequence[EventView], members: Sequence[EventView], prep: Prepared, start: float | None,
          end: float | None, gap_s: float, mono: Callable[[EventView], float | None] = lambda e: None) -> list[Gap]:
    """What the logs cannot show for this incident. `evs` (in seq order) must hold the host's journald
    suppressions from `gap_s` before the start to the end, and its untimed kernel events. `mono` gives an
    untimed kernel event's seconds since boot."""
    out: list[Gap] = []
    host = c.host
    seen: set[tuple] = set()
    # sources missing around each death of a main process
    for e in members:
        if e.kind not in ("service_killed", "service_exited", "service_core_dumped") or e.ts is None:
            continue
        since, until = kernel_window(e.ts)
        unit = e.entities.get("unit")
        rep = prep.coverage.report(host, unit, e.ts, since, until)
        s, u = fmt_when(since), fmt_when(until)
        if not rep.kernel and ("kernel", host, s) not in seen:
            seen.add(("kernel", host, s))
            how = {"service_killed": "was killed", "service_exited": "exited",
                   "service_core_dumped": "dumped core"}[e.kind]
            out.append(Gap(what=f"The kernel log of {host} around {e.ts:%H:%M:%S}, when {unit}'s main process {how}",
                           why=("No ingested kernel log covers that moment, so a kernel OOM kill, a segfault or a GPU "
                                "error at that time cannot be seen or ruled out. " + " ".join(rep.notes)).strip(),
                           commands=(f'journalctl -k --since "{s}" --until "{u}"',
                                     'dmesg -T | grep -i -E "killed process|oom-kill|segfault|NVRM"')))
        if not rep.unit_output and unit and ("out", unit, s) not in seen:
            seen.add(("out", unit, s))
            out.append(Gap(what=f"{unit}'s own output before {e.ts:%H:%M:%S}",
                           why=("Only systemd's lines about the unit were ingested, not what the service itself "
                                "logged; an application error or SGLang's `Received sigquit from a child process` "
                                "would be there."),
                           commands=(f'journalctl -u {unit} --since "{s}" --until "{u}" -o short-iso-precise',)))
    # journald rate limiting
    for e in evs:
        if (e.kind == "journal_suppressed" and e.host == host and e.t is not None and start is not None
                and end is not None and start - gap_s <= e.t <= end):
            unit = e.fields.get("unit") or e.entities.get("unit") or "a service"
            s, u = kernel_window(e.ts)
            out.append(Gap(what=f"{e.fields.get('count', 'Some')} messages journald dropped from {unit} at "
                                f"{e.ts:%H:%M:%S}",
                           why=(f"journald's rate limit discarded them ({e.path}:{e.line}), so what {unit} logged "
                                "then is not in the journal."),
                           commands=(f'journalctl -u systemd-journald --since "{fmt_when(s)}" --until "{fmt_when(u)}"',
                                     "grep -E '^#?RateLimit' /etc/systemd/journald.conf")))
    # kernel lines that cannot be placed in time
    untimed = [e for e in evs if e.host == host and e.t is None and e.kind in KERNEL_KINDS]
    if untimed:
        paths = sorted({e.path for e in untimed})
        kinds = ", ".join(sorted({e.kind for e in untimed}))
        first = next((e for e in members if e.t is None and e.kind in KERNEL_KINDS), None)
        secs = mono(first) if first is not None else None
        at = (f" The incident's first, {first.path}:{first.line}, is at {secs:.2f} s ({human_seconds(secs)}) after "
              "its boot: its wall-clock time is that boot's start plus as much. Commands that ask for `{since}` and "
              "`{until}` want the two minutes before it and the minute after."
              if first is not None and secs is not None else "")
        named = bool(host) and not host.startswith(UNKNOWN_HOST)
        boots = f"journalctl --list-boots   # on {host if named else 'the host'}: when each boot began"
        out.append(Gap(what=f"The time of {len(untimed)} kernel event(s) ({kinds}) in {', '.join(paths)}",
                       why=("Their kernel seconds since boot are not anchored to a wall-clock time (no journal of the "
                            "same boot to pair them with, no `systemctl show` boot time), so they cannot be placed next "
                            "to the other lines." + at + " The boot time, copied off the host with the dmesg and "
                            "ingested with it, anchors them; or give it with --boot-time."),
                       commands=("systemctl show -p KernelTimestamp > kernel-timestamp.txt", boots,
                                 *(f"forensics ingest --force --boot-time 'YYYY-MM-DD HH:MM:SS' {p}" for p in paths))))
    # times printed without a year or a zone
    by_path: dict[str, set[str]] = {}
    for e in members:
        if e.ts_source in ("year_inferred", "zone_assumed", "monotonic_only", "boot_anchored"):
            by_path.setdefault(e.path, set()).add(e.ts_source)
    anchors = {s.path: s.time_anchor for s in prep.sources}
    guessed = {s.path: s.year_from for s in prep.sources if s.year_from in (YEAR_MTIME, YEAR_NOW)}
    for p in sorted(by_path):
        why = f"Times there are not printed in full: {anchors.get(p) or ', '.join(sorted(by_path[p]))}."
        commands: tuple[str, ...] = ()
        if p in guessed and "year_inferred" in by_path[p]:  # the weakest guess: say what it can get wrong
            why += (" Nothing in the logs dates these lines: a file's modification time is when it was last written "
                    "or copied, so a copy made in another year than its lines were written puts them in the wrong "
                    "year, away from the other sources' lines." if guessed[p] == YEAR_MTIME else
                    " Nothing dates these lines, not even the file: the year is this year's, a guess.")
            commands = ("journalctl -o short-iso --no-pager | head -3   # on the host: its lines with their year",
                        f"forensics ingest --force --year YYYY {p}")
        out.append(Gap(what=f"The exact times of {p}", why=why, commands=commands))
    paths = prep.host_paths.get(host, set())
    # lines a terminal cut short, in the sources of the incident's events
    cited = {e.path for e in members}
    for s in prep.sources:
        if s.path not in cited:
            continue
        cut = next((c for n in (s.notes or ()) if (c := read_cut_note(n)) is not None), None)
        if cut is None:
            continue
        first, n = cut
        unit = next((u for e in members if e.path == s.path and (u := e.entities.get("unit"))), "UNIT")
        out.append(Gap(what=f"The ends of {n} line(s) of {s.path} cut to the terminal's width (the first at line "
                            f"{first})",
                       why=("They hold `…` where systemctl or journalctl, printing them on a terminal (`systemctl "
                            "status --no-pager` without `-l`, `journalctl --no-full`), left out what did not fit, so "
                            "a rule may have missed them and a value may be cut in half."),
                       commands=(f"systemctl status {unit} -l --no-pager > status.txt",
                                 f"journalctl -u {unit} --no-pager -o short-iso-precise > journal.txt")))
    out.extend(g for p, g in prep.assumptions if p in paths)
    uniq: dict[str, Gap] = {}
    for g in out:
        uniq.setdefault(g.what, g)
    return list(uniq.values())


def _source_infos(prep: Prepared, host: str) -> tuple[SourceInfo, ...]:
    """The sources that hold records of `host`, each with that host (a file of several hosts, such as dmesg
    output of several machines put together, is listed with the incident's)."""
    sids = set(prep.host_sources.get(host, ()))
    out = []
    for s in prep.sources:
        if s.source_id in sids:
            out.append(SourceInfo(path=s.path, sha256=s.sha256, format=s.format, confidence=s.confidence,
                                  host=host, records=s.records, unparsed=s.unparsed, first_ts=s.first_ts,
                                  last_ts=s.last_ts, time_anchor=s.time_anchor))
    return tuple(sorted(out, key=lambda x: x.path))


# ----------------------------------------------------------------------------------------------------------
# building incidents: first what the ids and the listing need (skeletons), then the incidents asked for


ARCH_KINDS = frozenset({"flashinfer_arch_unsupported", "cuda_arch_unsupported"})


@dataclass
class _Skeleton:
    """An incident before its events, configuration, environment and gaps are gathered: enough for its id,
    its place in the order, and the one-line listing (`id`, `start`, `end`, `hosts`, `headline`,
    `root_cause.confidence`)."""

    cluster: Cluster
    heads: list[Finding]
    ordered: list[Finding]                    # the root first
    core_ids: set[str]
    t0: float | None
    t1: float | None
    units: list[str]
    id: str
    start: str | None
    end: str | None
    headline: str
    background: tuple[Background, ...] = ()
    prev: _Skeleton | None = None             # the host's incident before it: its lines are not its context
    next: _Skeleton | None = None             # the host's incident after it

    @property
    def hosts(self) -> tuple[str, ...]:
        return (self.cluster.host,)

    @property
    def root_cause(self) -> Conclusion:
        return self.ordered[0].conclusion


_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forensics-rules")


class _Builder:
    """Incidents of one store: the events they need are read and prepared on demand (Prepared.source)."""

    def __init__(self, store, gap_minutes: float = DEFAULT_GAP_MINUTES,  # noqa: ANN001
                 correlations: Sequence[Correlation] | None = None, knowledge: Knowledge | None = None,
                 specs: Sequence[str] = (), full: bool = True, hosts: Sequence[str] | None = None):
        self.store = store
        # the rule texts (Event.explain) are read while the store is (from the cache, or else from the packs,
        # which take a while to load, mostly in Python; the store's reading, in polars, runs on the other cores)
        self._explainer_job = _POOL.submit(_Explainer, store.cache_dir) if full else None
        self.kn = knowledge if knowledge is not None else load_knowledge()
        self.corrs = tuple(correlations if correlations is not None else load_correlations(keep=True))
        self.gap_s = gap_minutes * 60.0
        self.local = host_local(self.corrs)
        only = ((lambda parts: set(hosts) & set(parts)) if hosts is not None else
                (lambda parts: candidates(specs, parts)) if specs else None)
        self.prep = prepare(store, self.kn, only if self.local else None)
        self.src = self.prep.source
        self.kinds = correlation_kinds(self.corrs) | ARCH_KINDS | {"server_config", "cuda_oom"}
        # what a day's window must hold at any time: what correlations bind far, the launch configurations (an
        # incident's configuration review) and the architecture errors (the first names a host's SM)
        self.reach = Reach.of(self.corrs, ARCH_KINDS | {"server_config"})
        # the kinds correlations bind only near an anchor of theirs, read only there (clustering, the launch
        # configurations and the architecture read the others wherever they are)
        self.step_only = (StepOnly.of(self.corrs, self.reach.always | ARCH_KINDS | CONTEXT_KINDS | {"cuda_oom"})
                          if NEAR_ANCHORS else None)
        self.envs: dict[str, Fingerprint] = {}
        self._owners: dict[str, tuple[EventView, bool] | None] = {}   # config_owner's answers, by configuration id
        self.host_gpus: dict[str, tuple[str | None, str]] = {}
        self.gpu_hosts: set[str] = set()
        self.src.finish = self._gpu_desc
        self._explainer: _Explainer | None = None
        # a full build's hosts' fingerprints read every message of their sources once (then kept): begun now, on a
        # thread of their own, while the events are prepared and correlated in Python
        if full:
            profile.env_hits_ahead(store, sorted({s for ids in self.prep.host_sources.values() for s in ids}))
        self.local_matching = LOCAL_MATCHING
        self.times = _Times(self.src.narrow)

    # -- the GPU named by the logs makes architecture statements name it
    def _gpu_desc(self, e: EventView) -> EventView:
        hg = self.host_gpus.get(e.host) if e.host is not None else None
        if hg is not None and e.fields.get("sm") and hg[0] in (None, e.fields["sm"]):
            return replace(e, fields={**e.fields, "gpus_desc": hg[1]})
        return e

    def _envs(self, hosts: Sequence[str], evs_of: Mapping[str, Sequence[EventView]]) -> None:
        """The fingerprint of each host (once per host, all in one scan of the records)."""
        asks = {}
        for h in hosts:
            if h in self.envs or h in asks:
                continue
            unknown = h.startswith("unknown host (")
            asks[h] = (None if unknown else h, self.prep.host_sources.get(h, ()), list(evs_of.get(h, ())),
                       self.prep.single_host or unknown)
        if asks:
            self.envs.update(fingerprints(self.store, asks, self.kn))

    def day_skeletons(self, day: str) -> list[_Skeleton]:
        """The skeletons of the incidents that start on `day` (and maybe others), found from a window around
        it, widened until it holds all that decides them (forensics.dayscope); their ids are final."""
        w = first_window(day, self.reach, self.gap_s)
        firsts: dict[str, float] | None = None
        for _ in range(dayscope.WIDENINGS + 1):
            skels = self.skeletons(w)
            spans = [self._span(sk) for sk in skels]
            if firsts is None and any(sp.untimed and sp.date == day for sp in spans):
                firsts = self._first_significant()
            if w.holds(spans, firsts):
                return skels
            w = w.wider(w.reach_back(spans, firsts))
        return self.skeletons()

    def _first_significant(self) -> dict[str, float]:
        """The time of each host's first significant timed event (the host incidents group it under)."""
        df = (self.src.narrow.filter(pl.col("significant") & pl.col("t_us").is_not_null())
              .group_by("part").agg(pl.col("t_us").min()))
        return {p: t / 1e6 for p, t in zip(df["part"].to_list(), df["t_us"].to_list())}

    def _span(self, sk: _Skeleton) -> Span:
        """What Window.holds reads of a skeleton."""
        c, by_id = sk.cluster, self.src.by_id
        times = [t for t in (c.start, c.end, sk.t0, sk.t1) if t is not None]
        ids = {x for f in sk.ordered for x in f.event_ids} | sk.core_ids
        untimed = any(e.t is None for e in c.events) or any(by_id[x].t is None for x in ids if x in by_id)
        return Span(min(times, default=None), max(times, default=None), untimed,
                    sk.start[:10] if sk.start else None, c.host)

    def skeletons(self, window: Window | None = None) -> list[_Skeleton]:
        """The incidents of the hosts whose events the builder holds (Prepared.kept: a host's incidents depend
        on its events only, when the correlations are host_local) as skeletons, ids final, in order. With a
        `window`, from its events only (see day_skeletons: only the incidents of its day are sure to be the
        store's)."""
        src = self.src
        if src.empty:
            return []
        # the events correlations look at, the significant ones, those that may name an architecture, and the
        # untimed kernel lines (what the logs cannot place)
        wanted = (pl.col("kind").is_in(sorted(self.kinds)) | pl.col("significant") | pl.col("archish")
                  | (pl.col("t_us").is_null() & pl.col("kind").is_in(sorted(KERNEL_KINDS))))
        mask = wanted if window is None else wanted & window.mask(self.reach.always)
        evs = src.load(mask if self.step_only is None else self.step_only.select(src.narrow.filter(mask)))
        # the GPU named by the logs makes architecture statements name it (only when it matters)
        arch_hosts = sorted({e.host for e in evs if e.fields.get("sm") and e.host} - self.gpu_hosts)
        if arch_hosts:
            by_host: dict[str, list[EventView]] = {}
            for e in evs:
                if e.host in arch_hosts:
                    by_host.setdefault(e.host, []).append(e)
            self._envs(arch_hosts, by_host)
            for h in arch_hosts:
                fp = self.envs[h]
                gpu = fp.get("gpu") or ""
                name = re.sub(r"^\d+ x ", "", gpu).split(" (", 1)[0]
                if gpu and "inferred" in gpu:
                    self.host_gpus[h] = (fp.get("sm"), f"this host's GPUs ({name}, inferred from {fp.get('sm')} and "
                                                       "the GPU memory free at start)")
                elif name.startswith("NVIDIA"):
                    self.host_gpus[h] = (fp.get("sm"), name)
            self.gpu_hosts.update(arch_hosts)
            src.remap(self._gpu_desc)
            evs = [src.primaries[e.seq] for e in evs]
        if self.local_matching:
            found, clusters = self._correlate_local(evs)
        else:
            found = correlate_views(evs, self.corrs, self.prep.coverage)
            clusters = cluster(evs, found, self.gap_s, self._load_starts, self._kin(evs))
        by_id = src.by_id
        where = {e.id: i for i, c in enumerate(clusters) for e in c.events}
        per: dict[int, list[Finding]] = {i: [] for i in range(len(clusters))}
        for f in found:
            ids = [f.anchor, f.conclusion.cause_event, *f.conclusion.explains, *f.event_ids]
            hit = next((where[x] for x in ids if x in where), None)
            if hit is None:
                a = by_id.get(f.anchor)
                if a is not None and a.t is not None:
                    hit = next((i for i, c in enumerate(clusters) if c.host == a.host and c.start is not None
                                and c.end is not None and c.start <= a.t <= c.end), None)
            if hit is not None:
                per[hit].append(f)
        skels: list[_Skeleton] = []
        for i, c in enumerate(clusters):
            kept, background = _split_background(c, per[i], self.times)
            fs = kept or [_fallback(c)]
            explained = {x for f in fs for x in f.conclusion.explains}
            heads = [f for f in fs if f.conclusion.cause_event is None or f.conclusion.cause_event not in explained]
            heads.sort(key=lambda f: (f.t is None, f.t or 0.0, _conf_rank(f.conclusion.confidence), -f.priority))
            root = heads[0] if heads else fs[0]
            ordered = [root] + sorted((f for f in fs if f is not root),
                                      key=lambda f: (f.t is None, f.t or 0.0, -f.priority, f.rules[0]))
            # time span: significant events and what the conclusions blame or explain
            core_ids = {e.id for e in c.events} | {x for f in fs for x in (f.conclusion.cause_event,
                                                                            *f.conclusion.explains) if x}
            core = [by_id[x] for x in core_ids if x in by_id and by_id[x].t is not None
                    and by_id[x].kind not in CONTEXT_KINDS]
            t0 = min((e.t for e in core), default=None)
            t1 = max((e.t for e in core), default=None)
            units = list(dict.fromkeys([*(f.conclusion.unit for f in ordered if f.conclusion.unit),
                                        *(u for u in c.units)]))
            units = sorted(units, key=lambda u: min((e.t for e in core if e.entities.get("unit") == u),
                                                    default=t1 if t1 is not None else 0.0))
            start = datetime.fromtimestamp(t0, timezone.utc) if t0 is not None else None
            end = datetime.fromtimestamp(t1, timezone.utc) if t1 is not None else None
            lead_unit = root.conclusion.unit or (units[0] if units else None)
            ident = (f"{start:%Y-%m-%d}" if start else UNDATED_SPEC) + f"-{_host_slug(c.host)}-" + (
                _slug(_unit_stem(lead_unit)) if lead_unit else _slug(root.conclusion.kind))
            # the other chains: of another unit, or another cause (an NCCL timeout after a CUDA OOM in one SGLang log)
            headline = root.headline + _again(root, heads) + "".join(f"; then {h}" for h in _then(root, heads[1:]))
            skels.append(_Skeleton(cluster=c, heads=heads, ordered=ordered, core_ids=core_ids, t0=t0, t1=t1,
                                   units=units, id=ident, start=iso(start), end=iso(end), headline=headline,
                                   background=background))
        skels.sort(key=lambda x: (x.start is None, x.start or "", x.id))
        last: dict[str, _Skeleton] = {}
        for sk in sorted((x for x in skels if x.t0 is not None and x.t1 is not None),
                         key=lambda x: (x.cluster.host, x.t0, x.id)):
            prev = last.get(sk.cluster.host)
            if prev is not None:
                sk.prev, prev.next = prev, sk
            last[sk.cluster.host] = sk
        seen: dict[str, int] = {}
        for sk in skels:
            n = seen.get(sk.id, 0) + 1
            seen[sk.id] = n
            if n > 1:
                sk.id = f"{sk.id}-{n}"
        return skels

    def _correlate_local(self, evs: Sequence[EventView]) -> tuple[list[Finding], list[Cluster]]:
        """The findings and clusters, with correlations fired only where they can matter (correlate_local)."""
        lm = LocalMatcher(Timeline(evs), self.corrs, self.prep.coverage)
        kin = self._kin(evs)
        for e in evs:
            if significant(e) or significant(e, timed=False):
                lm.ask_near(e, roles_only=False)
        while True:
            found = resolve(lm.run())
            clusters = cluster(evs, found, self.gap_s, self._load_starts, kin)
            if not sum(lm.ask_span(c.host, c.start, c.end) for c in clusters
                       if c.start is not None and c.end is not None):
                return found, clusters

    def _config_owners(self, configs: Sequence[EventView]
                       ) -> tuple[dict[str, EventView], dict[tuple[str, int], str]]:
        """The launch configurations that name no unit (an SGLang `server_args` dump in a `python3[pid]` line) but
        that a unit's start owns (`config_owner`), as views with that unit; and the note each then carries."""
        loose = [e for e in configs if _unit(e) is None and e.t is not None and e.host]
        new = [e for e in loose if e.id not in self._owners]
        if new:
            starts = self.src.load_windows([(e.t - OWNER_S, e.t, (pl.col("kind") == "service_started")
                                             & (pl.col("host") == e.host)) for e in new])
            by_host: dict[str, list[EventView]] = {}
            for s in sorted(starts, key=lambda x: (x.t or 0.0, x.seq)):
                if s.t is not None and s.unit and s.host:
                    by_host.setdefault(s.host, []).append(s)
            for e in new:
                self._owners[e.id] = config_owner(e, by_host.get(e.host or "", []))
        owned: dict[str, EventView] = {}
        notes: dict[tuple[str, int], str] = {}
        for e in loose:   # the views as they are now (the answer is kept, not the view it was given)
            found = self._owners[e.id]
            if found is None:
                continue
            start, by_model = found
            owned[e.id] = replace(e, unit=start.unit, entities={**e.entities, "unit": start.unit})
            why = ("its start line names the configuration's model" if by_model else
                   "no other unit naming the server or this model started in that time")
            notes[(e.path, e.line)] = (
                f"The configuration names no unit; it is taken as `{start.unit}`'s: logged "
                f"{human_seconds(e.t - start.t)} after systemd started that unit (`{PurePath(start.path).name}:"
                f"{start.line}`: {start.title}), and {why}.")
        return owned, notes

    def _kin(self, evs: Sequence[EventView]) -> dict[str, EventView]:
        """`pid_kin` of the `server_ready` events of `evs` (which hold the launch configurations), for clustering:
        the starts of the owning units that bound each process's lines are read from the store (clustering's events
        hold no starts)."""
        owned, _ = self._config_owners([e for e in evs if e.kind == "server_config"])
        if not owned:
            return {}
        lo = min(v.t for v in owned.values() if v.t is not None)
        hi = max((e.t for e in evs if e.t is not None), default=lo)
        started = pl.col("kind") == "service_started"
        starts = self.src.load_windows([(lo, hi, started & (pl.col("host") == h) & (pl.col("unit") == u))
                                        for h, u in sorted({(v.host, v.unit) for v in owned.values()})])
        return pid_kin(owned, [*(e for e in evs if e.kind == "server_ready"), *starts])

    def _load_starts(self, pairs: list[tuple[Cluster, Cluster]]) -> list[EventView]:
        start = pl.col("kind").is_in(list(STARTS))
        return self.src.load_windows([(a.end, a.end + self.gap_s, start & (pl.col("host") == a.host)
                                       & unit_may_be(b.units)) for a, b in pairs if b.units and a.end is not None])

    # -- the incidents themselves
    def build(self, skels: Sequence[_Skeleton]) -> list[Incident]:
        if not skels:
            return []
        src, gap_s = self.src, self.gap_s
        # the events the incidents show: the context of each (host, window, its units), journald's suppressions,
        # and every event on a line cited as evidence (a cited line's copies are cited too)
        windows = []
        locs: set[tuple[str, int]] = set()
        for sk in skels:
            if sk.t0 is not None and sk.t1 is not None:
                windows.append((sk.t0 - gap_s, sk.t1 + min(gap_s, 300.0), (pl.col("host") == sk.cluster.host)
                                & (unit_may_be(sk.units) | (pl.col("kind") == "journal_suppressed"))))
                if _lost_pods(sk.ordered, src.by_id):   # their readiness again, up to BACK_S later (`_back_again`)
                    windows.append((sk.t1, sk.t1 + BACK_S, (pl.col("host") == sk.cluster.host)
                                    & pl.col("kind").is_in(["container_started", "container_ready"])))
            for f in sk.ordered:
                for ev in (*f.conclusion.evidence_for, *f.conclusion.evidence_against):
                    locs.add((ev.path, ev.line))
        if windows:
            src.load_windows(windows)
        if locs:
            ps, ls = zip(*sorted(locs))
            src.load(pl.DataFrame({"path": list(ps), "line": list(ls)},
                                  schema={"path": pl.String, "line": pl.Int64}))
        prims = sorted(src.primaries.values(), key=lambda e: e.seq)
        by_id = src.by_id
        by_loc: dict[tuple[str, int], str] = {}
        host_evs: dict[str | None, list[EventView]] = {}
        for e in prims:
            by_loc[(e.path, e.line)] = e.id
            host_evs.setdefault(e.host, []).append(e)
        timed: dict[str | None, tuple[list[float], list[EventView]]] = {}
        self._envs([sk.cluster.host for sk in skels], host_evs)  # type: ignore[arg-type]
        if self._explainer is None:
            self._explainer = (self._explainer_job.result() if self._explainer_job is not None
                               else _Explainer(self.store.cache_dir))
        explainer = self._explainer
        out: list[Incident] = []
        theirs = [e for h in sorted({sk.cluster.host for sk in skels}) for e in host_evs.get(h, [])]
        owned, owner_notes = self._config_owners([e for e in theirs if e.kind == "server_config"])
        owned = {**owned, **pid_kin(owned, theirs)}
        host_readies: dict[str | None, list[EventView]] = {}   # the readies of a host, those of a unit's with it
        for sk in skels:
            c, ordered, units, t0, t1 = sk.cluster, sk.ordered, sk.units, sk.t0, sk.t1
            here = host_evs.get(c.host, [])
            if c.host not in host_readies:
                host_readies[c.host] = [owned.get(e.id, e) for e in here if e.kind == "server_ready"]
            readies = host_readies[c.host]
            # events: the core, everything the conclusions bound, and the context of the same host and units
            member_ids = set(sk.core_ids) | {x for f in ordered for x in f.event_ids}
            if t0 is not None and t1 is not None:
                lo, hi = t0 - gap_s, t1 + min(gap_s, 300.0)
                if c.host not in timed:
                    tl = sorted((e for e in here if e.t is not None), key=lambda e: (e.t, e.seq))
                    timed[c.host] = ([e.t for e in tl], tl)  # type: ignore[misc]
                ts, tl = timed[c.host]
                for e in tl[bisect_left(ts, lo):bisect_right(ts, hi)]:
                    if e.id in member_ids or (sk.prev is not None and e.t <= sk.prev.t1) or (
                            sk.next is not None and e.t >= sk.next.t0):   # a neighbour's lines are not context
                        continue
                    u = owned.get(e.id, e).entities.get("unit")   # a unit-less line of a unit's process: the unit's
                    if u is None or u in units:
                        member_ids.add(e.id)
                member_ids |= _back_again(tl[bisect_right(ts, hi):], owned, set(units), hi,
                                          sk.next.t0 if sk.next is not None else None, _lost_pods(ordered, by_id))

            def before_end(e: EventView) -> bool:
                return e.t is None or t1 is None or e.t <= t1

            server = [owned.get(e.id, e) for e in here if e.kind == "server_config"]
            configs = [e for e in server if before_end(e) and (_unit(e) in units or (_unit(e) is None and not units))]
            if not configs:
                configs = [e for e in server if before_end(e) and _unit(e) is None]
            if not configs and not any(u.endswith(".service") for u in units):   # a session's: the host's servers
                configs = [e for e in server if before_end(e)]
            after = (_restart_config(server, units, t1, t1 + min(gap_s, 300.0))
                     if not configs and t1 is not None else None)
            if after is not None:   # none before the failure: the first a restart logged stands in, said so
                configs = [after]
            fp = self.envs[c.host]
            cfgs = review_configs(configs, self.kn, fp.hardware)
            if owner_notes:
                cfgs = [replace(x, note=owner_notes.get((x.evidence.path, x.evidence.line), "")) for x in cfgs]
            if after is not None:
                cfgs = [replace(x, note=x.note + (" " if x.note else "") + (
                    f"No launch configuration was logged before the failure; this one was logged at "
                    f"{after.ts:%H:%M:%S} UTC, {human_seconds(after.t - t1)} after it, when the server started "
                    "again: the failed run probably had the same flags (a restart runs the same command line "
                    "again, unless it was changed in between), but the logs do not show them.")) for x in cfgs]
            chosen = {(x.evidence.path, x.evidence.line) for x in cfgs}
            member_ids |= {e.id for e in configs if (e.path, e.line) in chosen}
            members = sorted((by_id[x] for x in member_ids if x in by_id),
                             key=lambda e: (e.t is None, e.t or 0.0, e.path, e.line, e.rule))
            roles: dict[str, str] = {}
            for f in ordered:
                for eid, r in f.roles:
                    roles.setdefault(eid, r)
            ports = {x.unit: f.value for x in cfgs for f in x.flags if f.name == "--port"}
            events = tuple(explainer.event(owned.get(e.id, e), roles.get(e.id, "context" if is_request_traceback(
                e.rule, e.fields) else e.role), ports) for e in members)
            conclusions = tuple(_with_copies(f.conclusion, src.copies, by_loc) for f in ordered)
            symptoms = tuple(sorted(dict.fromkeys(x for f in ordered for x in f.conclusion.explains),
                                    key=lambda x: (by_id[x].t or 0.0, by_id[x].seq) if x in by_id else (0.0, 0)))
            gap_evs = [e for e in here if e.kind == "journal_suppressed" or (e.t is None and e.kind in KERNEL_KINDS)]
            gaps = _gaps(c, gap_evs, members, self.prep, t0, t1, gap_s, partial(_kernel_seconds, self.store))
            bound = set(sk.core_ids) | {x for f in ordered for x in f.event_ids} | {e.id for e in configs}
            repeats = (_repeats(members, bound, c.host, lo, hi, self.times)
                       if t0 is not None and t1 is not None else ())
            out.append(Incident(
                id=sk.id, start=sk.start, end=sk.end, hosts=(c.host,), units=tuple(units), headline=sk.headline,
                root_cause=conclusions[0], conclusions=conclusions, events=events, symptoms=symptoms, configs=cfgs,
                environment=fp.as_dict(), gaps=tuple(gaps), sources=_source_infos(self.prep, c.host),
                repeats=repeats, background=sk.background, follows=_neighbour(sk.prev, sk, readies, gap_s, True),
                followed_by=_neighbour(sk, sk.next, readies, gap_s, False)))
        return out


BACK_S = 3600.0   # a unit's server ready again this long after an incident is still the incident's (its impact)


def _lost_pods(found: Sequence[Finding], by_id: Mapping[str, EventView]) -> set[str]:
    """The Kubernetes pods (`namespace/name`) whose container's death a conclusion of the incident binds."""
    return {p for f in found for x in f.event_ids
            if (e := by_id.get(x)) is not None and e.kind == "container_died" and (p := e.entities.get("pod"))}


def _back_again(later: Sequence[EventView], owned: Mapping[str, EventView], units: set[str], after: float,
                until: float | None, pods: set[str]) -> set[str]:
    """The ids of the first `server_ready` of each of `units` in `later` (timed events past the incident's context,
    in time order) within BACK_S of `after` and before the next incident (`until`), and of the unit's starts
    before it: a large model takes minutes to load, and the impact tells when the server was back. The same for
    the Kubernetes `pods` that lost a container in the incident: the kubelet's first readiness of the pod, and
    the container starts before it."""
    out: set[str] = set()
    starts: dict[tuple[str, str], list[str]] = {}
    waiting = {("unit", u) for u in units} | {("pod", p) for p in pods}
    for e in later:
        if not waiting or e.t is None or e.t > after + BACK_S or (until is not None and e.t >= until):
            break
        if e.kind in ("container_started", "container_ready"):
            key = ("pod", e.entities.get("pod") or "")
        else:
            key = ("unit", owned.get(e.id, e).entities.get("unit") or "")
        if key not in waiting:
            continue
        if e.kind in ("service_started", "server_start", "container_started"):
            starts.setdefault(key, []).append(e.id)
        elif e.kind in ("server_ready", "container_ready"):
            out.add(e.id)
            out.update(starts.pop(key, []))
            waiting.discard(key)
    return out


def _split_background(c: Cluster, found: Sequence[Finding], times: _Times
                      ) -> tuple[list[Finding], tuple[Background, ...]]:
    """The findings of a cluster, less those of units failing routinely on its host: a unit none of the cluster's
    significant events names, whose conclusions here are all inconclusive (nothing ties its failure to the
    incident; it was drawn in only by failing within the window) and that failed ROUTINE_MIN times or more in the
    REPEAT_AROUND_S before the cluster began (a `fwupd-refresh.service` failing every 20 minutes all day)."""
    if not found or c.start is None:
        return list(found), ()
    own = set(c.units) | {f.conclusion.unit for f in found
                          if f.conclusion.unit and f.conclusion.confidence is not Confidence.INCONCLUSIVE}
    by_unit: dict[str, list[Finding]] = {}
    for f in found:
        u = f.conclusion.unit
        if u and u not in own and f.conclusion.confidence is Confidence.INCONCLUSIVE:
            by_unit.setdefault(u, []).append(f)
    out: list[Background] = []
    left: set[int] = set()
    start_s = int(c.start)
    for u in sorted(by_unit):
        ts = times.failures(c.host, u)
        before = ts[bisect_left(ts, start_s - int(REPEAT_AROUND_S)):bisect_left(ts, start_s)]
        if len(before) < ROUTINE_MIN:
            continue
        fs = sorted(by_unit[u], key=lambda f: (f.t is None, f.t or 0.0, f.rules[0]))
        left |= {id(f) for f in fs}
        out.append(Background(
            unit=u, headlines=tuple(dict.fromkeys(f.headline for f in fs)),
            evidence=tuple(dict.fromkeys(ev for f in fs for ev in f.conclusion.evidence_for)),
            before=len(before), before_seconds=REPEAT_AROUND_S,
            first_before=iso(datetime.fromtimestamp(before[0], timezone.utc)),
            last_before=iso(datetime.fromtimestamp(before[-1], timezone.utc))))
    return [f for f in found if id(f) not in left], tuple(out)


def _neighbour(a: _Skeleton | None, b: _Skeleton | None, readies: Sequence[EventView], gap_s: float, before: bool
               ) -> Neighbour | None:
    """Of two successive incidents of a host, `a` then `b`, told apart only because the server had recovered in
    between, the other one: `a` when `before`, else `b`; with the time of the server's first `server_ready` in
    between. They are so when less than `gap_s` apart (`recovered`), or when they share a unit that was ready
    in between and are less than twice `gap_s` apart (`cluster`'s restarted unit that dies too, which had
    served). `readies`: the host's `server_ready` events, those of a unit's process with its unit (`pid_kin`)."""
    if a is None or b is None or a.t1 is None or b.t0 is None or b.t0 - a.t1 > 2 * gap_s:
        return None
    shared = set(a.units) & set(b.units)
    near = b.t0 - a.t1 <= gap_s
    ready = min((e for e in readies if e.t is not None and a.t1 < e.t < b.t0
                 and (near or e.entities.get("unit") in shared)), key=lambda e: (e.t, e.seq), default=None)
    if not near and ready is None:
        return None
    return Neighbour(incident=a.id if before else b.id, at=a.end if before else b.start,
                     ready=iso(ready.ts) if ready is not None else None)


def _chain(f: Finding) -> tuple[str | None, str]:
    """What makes two heads one chain in a headline: the unit and the kind of cause. A container's scope is new on
    every restart, so for a container the headline, which names its pod or container, stands for the unit."""
    if is_container_scope(f.conclusion.unit):
        return f.headline, f.conclusion.kind
    return f.conclusion.unit, f.conclusion.kind


def _again(root: Finding, heads: Sequence[Finding]) -> str:
    """`, twice` (`, 3 times`) when the root's chain recurs in the incident: another head of its unit and kind
    (a server that crashed the same way after it came back), whose cause no head of another chain binds (a kernel
    OOM kill that names no unit, of a service's process that the service's own chain tells)."""
    key = _chain(root)
    others = {x for f in heads if _chain(f) != key for x in f.event_ids}
    n = sum(_chain(f) == key and (f is root or f.conclusion.cause_event not in others) for f in heads)
    return "" if n < 2 else ", twice" if n == 2 else f", {n} times"


def _then(root: Finding, heads: Sequence[Finding], most: int = 2) -> list[str]:
    """The headlines of the other chains a headline adds after the root's (`; then ...`): of another unit or
    another cause, the first `most` different ones, each once, by its first headline (`... (twice)` when the same
    unit fails of the same kind again, its figures perhaps other: a CUDA OOM on GPU 2, then on GPU 4)."""
    counts: dict[tuple[str | None, str], list] = {}      # (unit, kind) -> [the first's headline, how many]
    for f in heads:
        if _chain(f) != _chain(root):
            counts.setdefault(_chain(f), [f.headline, 0])[1] += 1
    times = {2: " (twice)"}
    return [h + times.get(n, f" ({n} times)" if n > 2 else "") for h, n in list(counts.values())[:most]]


def _model_words(e: EventView) -> list[str]:
    """What a launch configuration's model is called (lower case): its path or name, and its last component."""
    flags = flags_of(e.fields, e.message)
    model = flags.get("--model-path") or flags.get("--model") or ""
    model = model.strip().strip("'\"").rstrip("/").lower()
    return [w for w in dict.fromkeys((model, model.rsplit("/", 1)[-1])) if len(w) >= 3]


def _pid(e: EventView) -> str | None:
    p = e.entities.get("pid") or e.pid
    return str(p) if p is not None else None


def pid_kin(owned: Mapping[str, EventView], evs: Sequence[EventView]) -> dict[str, EventView]:
    """The unit-less lines of a process whose launch configuration a unit owns (`owned`: configuration views with
    the owner's unit, see `config_owner`), as views with that unit: the same host and pid, from the configuration
    on until the unit is started again (SGLang's `python3[pid]` journal lines: loading, ready). Keyed by event id."""
    starts: dict[tuple[str | None, str], list[float]] = {}
    for e in evs:
        u = e.entities.get("unit")
        if e.kind == "service_started" and e.t is not None and u is not None:
            starts.setdefault((e.host, u), []).append(e.t)
    for ts in starts.values():
        ts.sort()
    spans: dict[tuple[str | None, str], list[tuple[float, float, str]]] = {}
    for cfg in owned.values():
        pid, unit = _pid(cfg), cfg.entities.get("unit")
        if pid is None or unit is None or cfg.t is None:
            continue
        ts = starts.get((cfg.host, unit), [])
        k = bisect_right(ts, cfg.t)
        spans.setdefault((cfg.host, pid), []).append((cfg.t, ts[k] if k < len(ts) else float("inf"), unit))
    out: dict[str, EventView] = {}
    if not spans:
        return out
    for e in evs:
        if e.t is None or e.entities.get("unit") is not None or e.id in owned:
            continue
        pid = _pid(e)
        for lo, hi, unit in spans.get((e.host, pid), ()) if pid is not None else ():
            if lo <= e.t < hi:
                out[e.id] = replace(e, unit=unit, entities={**e.entities, "unit": unit})
                break
    return out


def config_owner(config: EventView, starts: Sequence[EventView]) -> tuple[EventView, bool] | None:
    """The start (`service_started`) of the unit whose process logged `config`, a launch configuration that names
    no unit: among the starts of the host in the OWNER_S before it, those whose unit or description (`Started
    SGLang server (Qwen/Qwen2.5-72B-Instruct)`) names the config's model, or else the server (`sglang`, `vllm`);
    the latest of them when they are all of one unit, and whether the model decided. None when no start qualifies
    or two units do."""
    if config.t is None:
        return None
    engine = "vllm" if "vllm" in config.message.lower() or "namespace(" in config.message.lower() else "sglang"
    words = _model_words(config)
    best: tuple[int, list[EventView]] = (0, [])
    for s in starts:
        if s.t is None or not s.unit or not (config.t - OWNER_S <= s.t <= config.t):
            continue
        text = f"{s.unit} {s.title}".lower()
        tier = 2 if any(w in text for w in words) else 1 if engine in text else 0
        if tier and tier > best[0]:
            best = (tier, [s])
        elif tier and tier == best[0]:
            best[1].append(s)
    units = {s.unit for s in best[1]}
    return (max(best[1], key=lambda s: (s.t or 0.0, s.seq)), best[0] == 2) if len(units) == 1 else None


def _unit(e: EventView) -> str | None:
    """The unit an event is about: its line's, or one its fields name (a cgroup, `unit=`)."""
    return e.entities.get("unit")


def _restart_config(server: Sequence[EventView], units: Sequence[str], t1: float, until: float) -> EventView | None:
    """The first launch configuration of the incident's units (or naming none) logged after the failure at `t1`
    and by `until`: a restart's."""
    later = [e for e in server if e.t is not None and t1 < e.t <= until
             and (_unit(e) in units or _unit(e) is None)]
    return min(later, key=lambda e: (e.t, e.seq), default=None)


class _Times:
    """Times of a store's events read off the narrow frame, each table the first time it is asked for: by host and
    kind (epoch microseconds, sorted: what `_repeats` counts its rates on), and each unit's failures by host
    (`service_failed`, whole seconds, each once: a line's copies in other sources count once; what
    `_split_background` counts)."""

    def __init__(self, narrow: pl.DataFrame):
        self.narrow = narrow
        self.spans: dict[str, tuple[int, int]] | None = None
        self.parts: dict[tuple[object, ...], pl.DataFrame] = {}
        self.times: dict[tuple[str, str], list[int]] = {}
        self.fails: dict[tuple[object, ...], list[int]] | None = None

    def _read(self) -> dict[str, tuple[int, int]]:
        if self.spans is None:
            # the narrow frame is in time order (the untimed last), and partitions keep it
            timed = self.narrow.select("part", pl.col("kind").fill_null(""), "t_us").filter(
                pl.col("t_us").is_not_null())
            self.spans = {p: (a, b) for p, a, b in timed.group_by("part").agg(
                pl.col("t_us").min().alias("a"), pl.col("t_us").max().alias("b")).iter_rows()}
            self.parts = timed.partition_by("part", "kind", as_dict=True, maintain_order=True)
        return self.spans

    def span(self, host: str) -> tuple[int | None, int | None]:
        """The first and last time of the host's events."""
        return self._read().get(host, (None, None))

    def of(self, host: str, kind: str) -> list[int]:
        self._read()
        got = self.times.get((host, kind))
        if got is None:
            part = self.parts.get((host, kind))
            got = self.times[(host, kind)] = part["t_us"].to_list() if part is not None else []
        return got

    def failures(self, host: str, unit: str) -> list[int]:
        """The seconds at which `unit` failed on `host`."""
        if self.fails is None:
            df = (self.narrow.filter((pl.col("kind") == "service_failed") & pl.col("t_us").is_not_null()
                                     & pl.col("unit").is_not_null())
                  .select("part", "unit", (pl.col("t_us") // 1_000_000).alias("s")).unique().sort("part", "unit", "s"))
            self.fails = {k: part["s"].to_list()
                          for k, part in df.partition_by("part", "unit", as_dict=True, maintain_order=True).items()}
        return self.fails.get((host, unit), [])


def _repeats(members: Sequence[EventView], bound: set[str], host: str, lo: float, hi: float,
             times: _Times) -> tuple[Repeat, ...]:
    """The rules with REPEAT_MIN or more *loose* events in an incident (timed, naming no unit, bound by no
    conclusion and not among its significant events: the context of its window), each with the rate of its kind
    on the host in the window [lo, hi] and in the REPEAT_AROUND_S before and after it (as far as the host's
    events reach)."""
    loose: dict[str, list[EventView]] = {}
    for e in members:
        if e.t is not None and e.id not in bound and e.entities.get("unit") is None:
            loose.setdefault(e.rule, []).append(e)
    rules = sorted(r for r, evs in loose.items() if len(evs) >= REPEAT_MIN)
    if not rules:
        return ()
    first_us, last_us = times.span(host)
    lo_us, hi_us = int(lo * 1_000_000), int(hi * 1_000_000)
    a_lo = max(lo_us - int(REPEAT_AROUND_S * 1_000_000), first_us if first_us is not None else lo_us)
    a_hi = min(hi_us + int(REPEAT_AROUND_S * 1_000_000), last_us if last_us is not None else hi_us)
    around_s = max(0, lo_us - a_lo) / 1e6 + max(0, a_hi - hi_us) / 1e6
    out = []
    for r in rules:
        evs = loose[r]
        ts = times.of(host, evs[0].kind)
        i0, i1 = bisect_left(ts, a_lo), bisect_left(ts, lo_us)
        j1, j3 = bisect_right(ts, hi_us), bisect_right(ts, a_hi)
        n_in, n_out = j1 - i1, (i1 - i0) + (j3 - j1)
        out.append(Repeat(rule=r, kind=evs[0].kind, count=len(evs), first=iso(evs[0].ts), last=iso(evs[-1].ts),
                          event_ids=tuple(e.id for e in evs), in_window=int(n_in), window_seconds=hi - lo,
                          around=int(n_out), around_seconds=around_s))
    return tuple(out)


def candidates(specs: Sequence[str], parts: Sequence[str]) -> set[str] | None:
    """The hosts (of `parts`) whose incidents may match every spec: an id is `<date>-<host>-<unit>`, so a full
    id or a prefix of one longer than its date names the host (None: any host may, e.g. for a date)."""
    out: set[str] | None = None
    for spec in specs:
        m = re.match(r"^(?:\d{4}-\d{2}-\d{2}|undated)-(.*)$", spec.strip(), re.S)
        if _DATE.match(spec.strip()) or not m:
            continue
        body = m.group(1)
        found = {p for p in parts if (_host_slug(p) + "-").startswith(body) or body.startswith(_host_slug(p) + "-")}
        out = found if out is None else out & found
    return out


def build_incidents(store, gap_minutes: float = DEFAULT_GAP_MINUTES, *,  # noqa: ANN001
                    correlations: Sequence[Correlation] | None = None,
                    knowledge: Knowledge | None = None) -> list[Incident]:
    """Every incident of the store, sorted by start, then id."""
    try:
        b = _Builder(store, gap_minutes, correlations, knowledge)
        return _with_nodes(store, b.build(b.skeletons()), gap_minutes, correlations, knowledge)
    finally:
        profile.cancel_ahead()


# ----------------------------------------------------------------------------------------------------------
# asking for incidents


def select_incidents(incidents: Sequence[Incident], spec: str) -> list[Incident]:
    """A full id, a unique id prefix, a date (YYYY-MM-DD: every incident that starts that day, in order), or
    `undated`: every incident with no wall-clock time (kernel seconds no boot time anchors)."""
    spec = spec.strip()
    exact = [i for i in incidents if i.id == spec]
    if exact:
        return exact
    if spec == UNDATED_SPEC:
        undated = [i for i in incidents if i.start is None]
        if undated:
            return undated
        raise IncidentNotFound(f"no undated incident; {_existing(incidents)}")
    if _DATE.match(spec):
        check_date(spec)
        day = [i for i in incidents if (i.start or i.id)[:10] == spec]
        if day:
            return day
        raise IncidentNotFound(f"no incident starts on {spec}; {_existing(incidents)}{_other_year(incidents, spec)}")
    pref = [i for i in incidents if i.id.startswith(spec)]
    if len(pref) == 1:
        return pref
    if len(pref) > 1:
        raise IncidentNotFound(f"'{spec}' matches {len(pref)} incidents ({', '.join(i.id for i in pref[:10])}); "
                               "give more of the id, or a date" + (" (or `undated` for every undated incident)"
                                                                   if all(i.start is None for i in pref) else ""))
    raise IncidentNotFound(f"no incident '{spec}'; {_existing(incidents)}")


def check_date(spec: str) -> None:
    """Raises IncidentNotFound when `spec` is shaped as a date (YYYY-MM-DD) but names no day of the calendar."""
    spec = spec.strip()
    if not _DATE.match(spec):
        return
    try:
        datetime.strptime(spec, "%Y-%m-%d")
    except ValueError:
        raise IncidentNotFound(f"'{spec}' is not a date of the calendar: give an incident's day as YYYY-MM-DD "
                               "(e.g. 2025-05-25), or its id") from None


def _other_year(incidents: Sequence[Any], day: str) -> str:
    """A hint when incidents start on the same day of another year and their year was not in the log (a year-less
    stamp such as `May 25 20:17:19` takes its year from an anchor: another source, or the file's modification
    time, which a copy resets)."""
    hits = [i for i in incidents if (i.start or "")[4:10] == day[4:10] and (i.start or "")[:4] != day[:4]]
    evs = lambda i: i.cluster.events if isinstance(i, _Skeleton) else i.events  # noqa: E731
    inferred = sorted({i.start[:10] for i in hits if any(e.ts_source == "year_inferred" for e in evs(i))})
    if not inferred:
        return ""
    return (f". {' and '.join(inferred)} {'is' if len(inferred) == 1 else 'are'} the same day of another year, and "
            "the logs printed no year: it was inferred (from another source of the host, or the file's modification "
            "time, which a copy resets; `forensics sources` says which). If the logs are of "
            f"{day[:4]}, read them again with `forensics ingest --year {day[:4]} --force PATH...`")


def _existing(incidents: Sequence[Incident]) -> str:
    if not incidents:
        return "the store has no incidents (ingest logs first: forensics ingest PATH)"
    shown = ", ".join(f"{i.id} ({(i.start or '')[:16].replace('T', ' ')})" for i in incidents[:10])
    more = f" and {len(incidents) - 10} more" if len(incidents) > 10 else ""
    return f"the store has: {shown}{more} (`forensics incidents` lists them)"


def find_incidents(store, specs: Sequence[str], gap_minutes: float = DEFAULT_GAP_MINUTES, *,  # noqa: ANN001
                   full: bool = True, correlations: Sequence[Correlation] | None = None,
                   knowledge: Knowledge | None = None) -> list:
    """The incidents `specs` select one after the other (see select_incidents; no spec: all), built in full
    only for them (`full=False`: skeletons with id, start, end, hosts, headline and root_cause). When the
    correlations keep each host's incidents to its events, only the hosts a spec can name are looked at;
    ids are those `build_incidents` gives. Raises IncidentNotFound, naming what exists."""
    for spec in specs:
        check_date(spec)                      # before anything is read
    try:
        return _find(store, specs, gap_minutes, full, correlations, knowledge)
    finally:
        profile.cancel_ahead()  # the environment hits of sources no incident asked for


def _find(store, specs: Sequence[str], gap_minutes: float, full: bool,  # noqa: ANN001
          correlations: Sequence[Correlation] | None, knowledge: Knowledge | None) -> list:
    b = _Builder(store, gap_minutes, correlations, knowledge, specs, full)
    day = day_of(specs) if dayscope.ENABLED else None

    def pick(skels: list[_Skeleton]) -> list[_Skeleton]:
        for spec in specs:
            skels = select_incidents(skels, spec)  # type: ignore[arg-type]
        return skels

    try:
        chosen = pick(b.day_skeletons(day) if day is not None else b.skeletons())
    except IncidentNotFound:
        if b.prep.kept is None and day is None:
            raise
        b = _Builder(store, gap_minutes, correlations, knowledge, full=False)
        chosen = pick(b.skeletons())           # raises again, naming every incident of the store
    return _with_nodes(store, b.build(chosen), gap_minutes, correlations, knowledge) if full else chosen


def _with_nodes(store, incs: list[Incident], gap_minutes: float,  # noqa: ANN001
                correlations: Sequence[Correlation] | None, knowledge: Knowledge | None) -> list[Incident]:
    """The incidents, those of a multi-node server with the other nodes' launches and incidents nearby
    (forensics.nodes): read only when an incident's launch configuration names several nodes."""
    addrs = sorted({g[0] for g in map(nodes.group_of, incs) if g is not None})
    if not addrs:
        return incs
    found = nodes.launches(store, addrs)
    parts = sorted({x.part for x in found})
    days: dict[str, list[_Skeleton]] = {}
    peer: list[_Builder] = []          # the other nodes' hosts' builder, made when a node other than an incident's is

    def builder() -> _Builder:
        if not peer:
            peer.append(_Builder(store, gap_minutes, correlations, knowledge, full=False, hosts=parts))
        return peer[0]

    def near(part: str, lo: float, hi: float) -> list[nodes.Near]:
        out = []
        d = datetime.fromtimestamp(lo, timezone.utc).date()
        while d <= datetime.fromtimestamp(hi, timezone.utc).date():
            day = d.isoformat()
            if day not in days:
                days[day] = [sk for sk in builder().day_skeletons(day) if (sk.start or "")[:10] == day]
            out += [sk for sk in days[day] if sk.cluster.host == part and sk.t0 is not None and lo <= sk.t0 <= hi]
            d += timedelta(days=1)
        out.sort(key=lambda sk: (sk.t0, sk.id))
        return [nodes.Near(id=sk.id, start=sk.start, headline=sk.headline,
                           kind=sk.root_cause.kind, units=tuple(sk.units),
                           first=sk.root_cause.evidence_for[0] if sk.root_cause.evidence_for else None)
                for sk in out]

    def until(part: str) -> str | None:
        return max((x.last_ts for x in _source_infos(builder().prep, part) if x.last_ts), default=None)

    return [_noded(i, nodes.node_group(i, found, near, until)) for i in incs]


def _noded(i: Incident, g: NodeGroup | None) -> Incident:
    if g is None:
        return i
    gap = nodes.missing_gap(i, g)
    return replace(i, nodes=g, gaps=i.gaps + ((gap,) if gap is not None else ()))


def resolve_incidents(store, spec: str, gap_minutes: float = DEFAULT_GAP_MINUTES) -> list[Incident]:  # noqa: ANN001
    """The incidents a full id, a unique id prefix or a date (YYYY-MM-DD) names; raises IncidentNotFound."""
    return find_incidents(store, [spec], gap_minutes)


# ----------------------------------------------------------------------------------------------------------
# the documented JSON


def conclusion_json(c: Conclusion) -> dict[str, Any]:
    d = to_jsonable(c)
    d["evidence"] = [{"path": e.path, "line": e.line, "line_end": e.line_end, "note": e.note} for e in c.evidence_for]
    lead = {k: d.pop(k) for k in ("kind", "confidence", "statement", "evidence")}
    return {**lead, **d}


def incident_json(inc: Incident) -> dict[str, Any]:
    """`Incident.to_json()` reshaped: `root_cause` and each of `conclusions` lead with kind, confidence,
    statement and evidence [{path, line}]; `symptoms` are the explained events themselves."""
    d = inc.to_json()
    d["root_cause"] = conclusion_json(inc.root_cause) if inc.root_cause is not None else None
    d["conclusions"] = [conclusion_json(c) for c in inc.conclusions]
    events = {e.id: e for e in inc.events}
    by = {x: c.rule for c in reversed(inc.conclusions) for x in c.explains}
    d["symptoms"] = [{"id": x, "kind": events[x].kind if x in events else None,
                      "ts": events[x].ts if x in events else None, "unit": events[x].unit if x in events else None,
                      "title": events[x].title if x in events else None,
                      "path": events[x].path if x in events else None, "line": events[x].line if x in events else None,
                      "explained_by": by.get(x)} for x in inc.symptoms]
    order = ["id", "start", "end", "hosts", "units", "headline", "root_cause", "symptoms", "gaps", "conclusions",
             "configs", "environment", "events", "sources"]
    return {k: d[k] for k in order if k in d} | {k: v for k, v in d.items() if k not in order}


def incidents_json(incidents: Sequence[Incident]) -> str:
    return json.dumps([incident_json(i) for i in incidents], indent=1, ensure_ascii=False)
