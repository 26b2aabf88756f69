"""Correlations: YAML (`rules/correlations/*.yaml`) -> validated `Correlation`s, and the engine that matches
them on an events frame (EVENT_SCHEMA) into `Conclusion`s (cause -> the symptoms it explains).

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

File (see rules/correlations/README.md for every key):

    pack: sigkill
    correlations:
      - id: sigkill.kernel_oom
        title: SIGKILL explained by a kernel OOM kill
        kind: oom_kill                # the root-cause kind (default: the cause event's kind)
        confidence: confirmed         # confirmed | likely | possible | inconclusive
        priority: 100
        group: sigkill
        anchor: killed
        cause: oom
        ordered: true
        window: 2min
        join: {same: [host], any: [unit, pid]}
        steps:
          - {name: oom, kind: oom_kill}
          - {name: killed, kind: service_killed, where: {signal: KILL}}
        explains: [killed]
        statement: 'The kernel OOM killer killed pid {oom.pid} ...'
        fixtures: {must_fire: [sigkill_kernel_oom.yaml], must_not_fire: [sigkill_other_unit.yaml]}
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import json
import re
import string
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from .asides import drop_asides
from .cachefiles import code_digest, keep_pickled, private_dir, read_pickled
from .kubepods import parse as parse_kubepods, scope_id
from .model import Confidence, Conclusion, Evidence
from .schema import TimeSource
from .sizes import format_value
from .yamlread import construct

# libyaml's safe loader when PyYAML has it (same nodes and marks, several times faster)
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
ROOT = Path(__file__).resolve().parent.parent
BUILTIN_DIR = ROOT / "rules" / "correlations"
FIXTURE_DIR = ROOT / "tests" / "fixtures" / "timelines"

NULL = "\x00null"                   # a `where` value that matches an absent field
ENTITIES = ("host", "unit", "pid", "cgroup", "pci", "rank", "gpu", "pod", "container", "container_id", "pod_uid")
COVERAGE_LOGS = ("kernel", "unit_output")
COVERAGE_STATES = ("present", "missing")
ROLE_NAMES = ("cause", "symptom", "context")
CONFIDENCE_ORDER = (Confidence.CONFIRMED, Confidence.LIKELY, Confidence.POSSIBLE, Confidence.INCONCLUSIVE)
UNKNOWN_HOST = "unknown host"   # the incidents of events that name no host, and such a host in a statement
# names every template may use besides the step names
STANDARD_NAMES = ("host", "unit", "since", "until", "coverage", "anchor", "cause", "window_start", "window_end")

PACK_KEYS = ("pack", "description", "correlations")
CORR_KEYS = ("id", "title", "description", "kind", "confidence", "priority", "group", "fold", "suspected", "anchor",
             "cause", "ordered", "slack", "window", "join", "steps", "explains", "exclusive", "roles", "coverage",
             "against", "downgrade", "headline", "statement", "fold_statement", "alternatives", "next_steps",
             "references", "fixtures")
CORR_REQUIRED = ("id", "title", "confidence", "anchor", "cause", "window", "steps", "statement", "fixtures")
STEP_KEYS = ("name", "kind", "where", "where_not", "min", "collect", "within", "join", "distinct", "min_distinct",
             "unique", "untimed")
AGAINST_KEYS = ("name", "kind", "where", "where_not", "within", "join", "note")
JOIN_KEYS = ("same", "any", "agree")
FIXTURE_KEYS = ("must_fire", "must_not_fire")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|d)?\s*$")
_UNIT_SUFFIX = re.compile(r"([^/\s]+\.(?:service|scope|slice|socket|timer|mount))$")
_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

# kinds whose `pid` column is the logger's (systemd's, journald's), never the process the line is about
_LOGGER_PID_KINDS = frozenset({
    "service_killed", "service_exited", "service_core_dumped", "service_failed", "service_start_failed",
    "unit_oom_killed", "cgroup_kill_failed", "stop_timeout", "restart_scheduled", "start_limit_hit",
    "service_started", "service_stopped", "oomd_kill", "journal_suppressed", "boot", "start_timeout",
    "unit_watchdog", "server_config", "probe_kill", "container_stop", "container_died", "crash_loop_backoff",
    "container_started", "container_ready", "node_pressure", "pod_evicted", "pod_admission_denied", "gpu_unhealthy"})
KERNEL_KINDS = frozenset({"oom_invoked", "oom_kill", "oom_reaped", "gpu_xid", "gpu_fallen_off_bus", "gpu_init_failed",
                          "segfault", "hung_task", "kernel_panic", "cpu_lockup", "boot"})
SYSTEMD_KINDS = _LOGGER_PID_KINDS - {"server_config", "boot"} | {"systemd_kill", "core_dump"}


# ----------------------------------------------------------------------------------------------------------
# errors


class CorrelationError(Exception):
    """Problems in correlation files: `errors` is a list of (path, line, message), all of them at once."""

    def __init__(self, errors: Sequence[tuple[str, int, str]]):
        self.errors = list(errors)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(f"{p}:{n}: {m}" for p, n, m in self.errors)


# ----------------------------------------------------------------------------------------------------------
# the model


@dataclass(frozen=True)
class Location:
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Where:
    """`field` (an event field or column) equals one of `values` (compared as text; `null` matches an absent
    field), or matches one of `patterns` (a value with `*` or `?`: shell-style, any case, e.g. `*sglang*`);
    `negate` for where_not."""

    field: str
    values: tuple[str, ...]
    negate: bool = False
    patterns: tuple[str, ...] = ()      # lower-cased shell patterns

    def hit(self, v: Any) -> bool:
        if v is None:
            return NULL in self.values
        text = _as_text(v)
        if text in self.values:
            return True
        return bool(self.patterns) and any(fnmatch.fnmatchcase(text.lower(), p) for p in self.patterns)


@dataclass(frozen=True)
class Join:
    """`same`: each entity known on both events and equal. `any`: at least one entity known on both and equal.
    `agree`: each entity equal where known on both (`_agreeing`)."""

    same: tuple[str, ...] = ()
    any: tuple[str, ...] = ()
    agree: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    name: str
    kinds: tuple[str, ...]             # in order of preference
    where: tuple[Where, ...] = ()
    min: int = 1                       # 0: optional; >= 2: all matching events in the window are taken
    collect: bool = False              # take all matching events in the window (not only the nearest)
    within: float | None = None        # seconds from the anchor (default: the correlation's window)
    join: Join | None = None           # default: the correlation's join
    distinct: str | None = None        # a field whose distinct values are counted (with the anchor's)
    min_distinct: int = 0
    unique: bool = False               # one event serves one firing of this correlation at most
    untimed: bool = False              # events without a time may match (joined on entities only)
    location: Location = Location("", 0)

    @property
    def collects(self) -> bool:
        return self.collect or self.min >= 2 or self.distinct is not None


@dataclass(frozen=True)
class Against:
    """Events that weigh against the conclusion: cited as evidence against, and the confidence drops to
    the correlation's `downgrade` when any is found."""

    name: str
    kinds: tuple[str, ...]
    where: tuple[Where, ...] = ()
    within: float | None = None
    join: Join | None = None
    note: str = ""


@dataclass(frozen=True)
class Fixtures:
    must_fire: tuple[str, ...] = ()
    must_not_fire: tuple[str, ...] = ()


@dataclass(frozen=True)
class Correlation:
    id: str
    title: str
    confidence: Confidence
    anchor: str
    cause: str
    window: float
    steps: tuple[Step, ...]
    statement: str
    pack: str
    location: Location
    description: str = ""
    kind: str | None = None
    priority: int = 0
    group: str | None = None
    fold: bool = False
    suspected: bool = False            # the cause is not in the logs: the cause step's event is a symptom
    ordered: bool = False
    slack: float = 1.0                 # ordered steps may be out of order by this much (sources' precision)
    join: Join = Join()
    explains: tuple[str, ...] = ()
    exclusive: tuple[str, ...] = ()    # steps whose events serve one firing among the correlations that say so
    roles: tuple[tuple[str, str], ...] = ()
    coverage: tuple[tuple[str, str], ...] = ()
    against: tuple[Against, ...] = ()
    downgrade: Confidence | None = None
    headline: str = ""
    fold_statement: str = ""
    alternatives: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    fixtures: Fixtures = Fixtures()

    def step(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)


# ----------------------------------------------------------------------------------------------------------
# durations and templates


def parse_duration(value: Any) -> float | None:
    """`90s`, `2min`, `5m`, `1h`, `500ms`, `1d` or a number of seconds -> seconds; None if not a duration."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value >= 0 else None
    m = _DURATION.match(str(value))
    if not m:
        return None
    n = float(m.group(1))
    mult = {None: 1, "ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}[m.group(2)]
    return n * mult


def template_names(template: str) -> list[str]:
    """The dotted names a template uses (`{oom.pid}` -> `oom.pid`); raises ValueError when malformed."""
    names = []
    for _, name, _spec, _conv in string.Formatter().parse(template):
        if name is None:
            continue
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*", name):
            raise ValueError(f"placeholder {{{name}}} must be a name or step.field")
        names.append(name)
    return names


def fill(template: str, values: Mapping[str, Any]) -> str:
    """Fill `{name}` and `{step.field}` placeholders; a missing or null value leaves the placeholder visible.
    Never raises: a malformed template comes back as it is. Runs of spaces are collapsed."""
    out = _fill(template, values)
    return out if "\n" in template else re.sub(r" {2,}", " ", out).strip()


def fill_prose(template: str, values: Mapping[str, Any]) -> str:
    """`fill` for sentences: a parenthesised aside that names a placeholder with no value is left out (`a memory
    cgroup limit ({cgroup})` when the report names no cgroup reads `a memory cgroup limit`, not `... ({cgroup})`).
    Commands keep every placeholder (`fill`): the reader fills them."""
    return fill(drop_asides(template, lambda n: _lookup(values, n) is None, template_names), values)


class Filler:
    """`fill` and `fill_prose`, remembered: a filled template depends only on the values of the names it uses
    (and their types, which format them), so the events of one rule that agree on those (a crash loop's, with
    every field but the time the same) fill it once. Meant for one report's run."""

    def __init__(self) -> None:
        self._names: dict[str, tuple[str, ...] | None] = {}
        self._done: dict[tuple, str] = {}

    def fill(self, template: str, values: Mapping[str, Any]) -> str:
        return self._get(template, values, False)

    def prose(self, template: str, values: Mapping[str, Any]) -> str:
        return self._get(template, values, True)

    def _get(self, template: str, values: Mapping[str, Any], prose: bool) -> str:
        if template not in self._names:
            try:
                self._names[template] = tuple(template_names(template))
            except ValueError:   # malformed: filled as it is, every time
                self._names[template] = None
        names = self._names[template]
        key = None if names is None else (template, prose, *((type(v), v) for v in (_lookup(values, n) for n in names)))
        out = None
        if key is not None:
            try:
                out = self._done.get(key)
            except TypeError:    # a value that cannot be a key
                key = None
        if out is None:
            out = fill_prose(template, values) if prose else fill(template, values)
            if key is not None:
                self._done[key] = out
        return out


def _fill(template: str, values: Mapping[str, Any]) -> str:
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError:
        return template
    out: list[str] = []
    for literal, name, spec, conv in parts:
        out.append(literal)
        if name is None:
            continue
        value = _lookup(values, name)
        if value is None:
            out.append("{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}")
            continue
        try:
            out.append(format_value(value, spec or ""))
        except (ValueError, TypeError, OverflowError):
            out.append(str(value))
    return "".join(out)


def _lookup(values: Mapping[str, Any], dotted: str) -> Any:
    cur: Any = values
    for part in dotted.split("."):
        if isinstance(cur, Mapping):
            cur = cur.get(part)
        else:
            return None
        if cur is None:
            return None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, (dict, list, tuple)):
        return None
    return cur


# ----------------------------------------------------------------------------------------------------------
# loading: YAML nodes -> model, collecting every error of a file


class _Reader:
    def __init__(self, path: str, text: str, kinds: Iterable[str]):
        self.path = path
        self.errors: list[tuple[str, int, str]] = []
        self.kinds = set(kinds)
        self.text = text
        self.loader: Any = _FAST_LOADER(text)

    def compose(self) -> yaml.Node | None:
        """The document's node tree (libyaml when PyYAML has it; the Python parser names a syntax error the same
        way as always)."""
        try:
            return self.loader.get_single_node()
        except yaml.YAMLError:
            if _FAST_LOADER is yaml.SafeLoader:
                raise
            self.loader = yaml.SafeLoader(self.text)
            return self.loader.get_single_node()

    def add(self, node: yaml.Node | int, msg: str) -> None:
        line = node if isinstance(node, int) else node.start_mark.line + 1
        self.errors.append((self.path, line, msg))

    def loc(self, node: yaml.Node) -> Location:
        return Location(self.path, node.start_mark.line + 1)

    def value(self, node: yaml.Node) -> Any:
        return construct(self.loader, node, self.add)

    def mapping(self, node: yaml.Node, what: str, allowed: Sequence[str] | None = None) -> dict[str, yaml.Node] | None:
        if not isinstance(node, yaml.MappingNode):
            self.add(node, f"{what} must be a mapping")
            return None
        out: dict[str, yaml.Node] = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                self.add(k, f"{what}: keys must be plain names")
                continue
            key = str(self.value(k))
            if key in out:
                self.add(k, f"duplicate key '{key}' in {what}")
                continue
            if allowed is not None and key not in allowed:
                hint = difflib.get_close_matches(key, allowed, n=1)
                fix = f" (did you mean '{hint[0]}'?)" if hint else f" (allowed: {', '.join(allowed)})"
                self.add(k, f"unknown key '{key}' in {what}{fix}")
                continue
            out[key] = v
        return out

    def string(self, node: yaml.Node, what: str) -> str | None:
        v = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if v is None or isinstance(v, (dict, list)) or not str(v).strip():
            self.add(node, f"{what} must be a non-empty string")
            return None
        return ("true" if v else "false") if isinstance(v, bool) else str(v)

    def strings(self, node: yaml.Node, what: str) -> tuple[str, ...]:
        if isinstance(node, yaml.ScalarNode):
            s = self.string(node, what)
            return (s,) if s is not None else ()
        if not isinstance(node, yaml.SequenceNode):
            self.add(node, f"{what} must be a string or a list of strings")
            return ()
        return tuple(s for item in node.value if (s := self.string(item, f"an item of {what}")) is not None)

    def boolean(self, node: yaml.Node, what: str) -> bool:
        v = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(v, bool):
            self.add(node, f"{what} must be true or false")
            return False
        return v

    def integer(self, node: yaml.Node, what: str) -> int | None:
        v = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            self.add(node, f"{what} must be a non-negative integer")
            return None
        return v

    def duration(self, node: yaml.Node, what: str) -> float | None:
        v = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        d = parse_duration(v) if v is not None else None
        if d is None:
            self.add(node, f"{what} must be a duration like 90s, 5min, 2h (got {v!r})")
        return d

    def confidence(self, node: yaml.Node, what: str) -> Confidence | None:
        s = self.string(node, what)
        if s is None:
            return None
        try:
            return Confidence(s)
        except ValueError:
            choices = [c.value for c in Confidence]
            hint = difflib.get_close_matches(s, choices, n=1)
            self.add(node, f"{what} '{s}' is not one of {', '.join(choices)}"
                     + (f" (did you mean '{hint[0]}'?)" if hint else ""))
            return None

    def kind_list(self, node: yaml.Node, what: str) -> tuple[str, ...]:
        kinds = self.strings(node, what)
        for k in kinds:
            if k not in self.kinds:
                hint = difflib.get_close_matches(k, sorted(self.kinds), n=1)
                self.add(node, f"{what}: unknown event kind '{k}'" + (f" (did you mean '{hint[0]}'?)" if hint else ""))
        if not kinds:
            self.add(node, f"{what} needs at least one event kind")
        return kinds

    def where(self, node: yaml.Node, what: str, negate: bool) -> tuple[Where, ...]:
        m = self.mapping(node, what)
        out = []
        for fname, vnode in (m or {}).items():
            if isinstance(vnode, yaml.SequenceNode):
                vals = [self.value(v) for v in vnode.value]
            elif isinstance(vnode, yaml.ScalarNode):
                vals = [self.value(vnode)]
            else:
                self.add(vnode, f"{what}.{fname} must be a value or a list of values")
                continue
            if not vals or any(isinstance(v, (dict, list)) for v in vals):
                self.add(vnode, f"{what}.{fname} must be a value or a non-empty list of values")
                continue
            texts = [NULL if v is None else _as_text(v) for v in vals]
            glob = [t != NULL and ("*" in t or "?" in t) for t in texts]
            out.append(Where(fname, tuple(t for t, g in zip(texts, glob) if not g), negate,
                             tuple(t.lower() for t, g in zip(texts, glob) if g)))
        return tuple(out)

    def join(self, node: yaml.Node, what: str) -> Join:
        m = self.mapping(node, what, JOIN_KEYS)
        if m is None:
            return Join()
        parts: dict[str, tuple[str, ...]] = {}
        for key in JOIN_KEYS:
            if key in m:
                ents = self.strings(m[key], f"{what}.{key}")
                for e in ents:
                    if e not in ENTITIES:
                        hint = difflib.get_close_matches(e, ENTITIES, n=1)
                        self.add(m[key], f"{what}.{key}: unknown entity '{e}' (entities: {', '.join(ENTITIES)})"
                                 + (f"; did you mean '{hint[0]}'?" if hint else ""))
                parts[key] = tuple(e for e in ents if e in ENTITIES)
        return Join(same=parts.get("same", ()), any=parts.get("any", ()), agree=parts.get("agree", ()))

    def step(self, node: yaml.Node, owner: str) -> Step | None:
        m = self.mapping(node, f"a step of {owner}", STEP_KEYS)
        if m is None:
            return None
        ok = True
        for req in ("name", "kind"):
            if req not in m:
                self.add(node, f"a step of {owner} needs `{req}`")
                ok = False
        name = self.string(m["name"], "step name") if "name" in m else None
        if name is not None and not _NAME.match(name):
            self.add(m["name"], f"step name '{name}' must be lower_snake_case")
            ok = False
        what = f"step '{name}' of {owner}"
        kinds = self.kind_list(m["kind"], f"{what}: kind") if "kind" in m else ()
        where = self.where(m["where"], f"{what}: where", False) if "where" in m else ()
        where += self.where(m["where_not"], f"{what}: where_not", True) if "where_not" in m else ()
        mn = self.integer(m["min"], f"{what}: min") if "min" in m else 1
        collect = self.boolean(m["collect"], f"{what}: collect") if "collect" in m else False
        within = self.duration(m["within"], f"{what}: within") if "within" in m else None
        join = self.join(m["join"], f"{what}: join") if "join" in m else None
        distinct = self.string(m["distinct"], f"{what}: distinct") if "distinct" in m else None
        min_distinct = self.integer(m["min_distinct"], f"{what}: min_distinct") if "min_distinct" in m else 0
        if min_distinct and distinct is None:
            self.add(m["min_distinct"], f"{what}: min_distinct needs `distinct: <field>`")
        unique = self.boolean(m["unique"], f"{what}: unique") if "unique" in m else False
        untimed = self.boolean(m["untimed"], f"{what}: untimed") if "untimed" in m else False
        if not ok or name is None or mn is None or min_distinct is None:
            return None
        return Step(name=name, kinds=kinds, where=where, min=mn, collect=collect, within=within, join=join, distinct=distinct,
                    min_distinct=min_distinct, unique=unique, untimed=untimed, location=self.loc(node))

    def against(self, node: yaml.Node, owner: str) -> Against | None:
        m = self.mapping(node, f"an `against` entry of {owner}", AGAINST_KEYS)
        if m is None:
            return None
        if "name" not in m or "kind" not in m:
            self.add(node, f"an `against` entry of {owner} needs `name` and `kind`")
            return None
        name = self.string(m["name"], "against name")
        if name is None:
            return None
        what = f"against '{name}' of {owner}"
        kinds = self.kind_list(m["kind"], f"{what}: kind")
        where = self.where(m["where"], f"{what}: where", False) if "where" in m else ()
        where += self.where(m["where_not"], f"{what}: where_not", True) if "where_not" in m else ()
        within = self.duration(m["within"], f"{what}: within") if "within" in m else None
        join = self.join(m["join"], f"{what}: join") if "join" in m else None
        note = self.string(m["note"], f"{what}: note") if "note" in m else ""
        return Against(name=name, kinds=kinds, where=where, within=within, join=join, note=" ".join((note or "").split()))

    def template(self, node: yaml.Node, what: str, names: set[str]) -> str | None:
        s = self.string(node, what)
        if s is None:
            return None
        try:
            used = template_names(s)
        except ValueError as e:
            self.add(node, f"{what}: {e}")
            return None
        for n in used:
            head = n.split(".", 1)[0]
            if head not in names and head not in STANDARD_NAMES:
                hint = difflib.get_close_matches(head, sorted(names | set(STANDARD_NAMES)), n=1)
                self.add(node, f"{what}: unknown placeholder {{{n}}} (steps: {', '.join(sorted(names))})"
                         + (f"; did you mean '{hint[0]}'?" if hint else ""))
        return " ".join(s.split())

    def templates(self, node: yaml.Node, what: str, names: set[str]) -> tuple[str, ...]:
        items = node.value if isinstance(node, yaml.SequenceNode) else [node]
        out = []
        for item in items:
            t = self.template(item, what, names)
            if t is not None:
                out.append(t)
        return tuple(out)

    def fixtures(self, node: yaml.Node, owner: str, fixture_dir: Path) -> Fixtures:
        m = self.mapping(node, f"fixtures of {owner}", FIXTURE_KEYS)
        if m is None:
            return Fixtures()
        out: dict[str, tuple[str, ...]] = {}
        for key in FIXTURE_KEYS:
            if key not in m:
                self.add(node, f"fixtures of {owner} need `{key}` (at least one timeline that "
                               f"{'fires' if key == 'must_fire' else 'must not fire'})")
                continue
            files = self.strings(m[key], f"fixtures.{key} of {owner}")
            if not files:
                self.add(m[key], f"fixtures.{key} of {owner} needs at least one timeline")
            for f in files:
                if not (fixture_dir / f).is_file():
                    self.add(m[key], f"fixtures.{key} of {owner}: no timeline {fixture_dir / f}")
            out[key] = files
        return Fixtures(must_fire=out.get("must_fire", ()), must_not_fire=out.get("must_not_fire", ()))

    def correlation(self, node: yaml.Node, pack: str, fixture_dir: Path) -> Correlation | None:
        m = self.mapping(node, "a correlation", CORR_KEYS)
        if m is None:
            return None
        cid = self.string(m["id"], "id") if "id" in m else None
        owner = f"correlation '{cid}'" if cid else "a correlation"
        for req in CORR_REQUIRED:
            if req not in m:
                self.add(node, f"{owner} needs `{req}`")
        if cid is not None and not _ID.match(cid):
            self.add(m["id"], f"id '{cid}' must be lower case letters, digits, '.', '_' or '-'")
        title = self.string(m["title"], f"title of {owner}") if "title" in m else None
        desc = " ".join((self.string(m["description"], "description") or "").split()) if "description" in m else ""
        kind = self.string(m["kind"], f"kind of {owner}") if "kind" in m else None
        conf = self.confidence(m["confidence"], f"confidence of {owner}") if "confidence" in m else None
        prio = self.integer(m["priority"], f"priority of {owner}") if "priority" in m else 0
        group = self.string(m["group"], f"group of {owner}") if "group" in m else None
        fold = self.boolean(m["fold"], f"fold of {owner}") if "fold" in m else False
        suspected = self.boolean(m["suspected"], f"suspected of {owner}") if "suspected" in m else False
        if suspected and "kind" not in m:
            self.add(m["suspected"], f"{owner} is `suspected`: it needs the suspected cause's `kind`")
        ordered = self.boolean(m["ordered"], f"ordered of {owner}") if "ordered" in m else False
        slack = self.duration(m["slack"], f"slack of {owner}") if "slack" in m else 1.0
        window = self.duration(m["window"], f"window of {owner}") if "window" in m else None
        join = self.join(m["join"], f"join of {owner}") if "join" in m else Join()
        steps: list[Step] = []
        if "steps" in m:
            if not isinstance(m["steps"], yaml.SequenceNode) or not m["steps"].value:
                self.add(m["steps"], f"steps of {owner} must be a non-empty list")
            else:
                for sn in m["steps"].value:
                    s = self.step(sn, owner)
                    if s is None:
                        continue
                    if any(o.name == s.name for o in steps):
                        self.add(sn, f"duplicate step name '{s.name}' in {owner}")
                        continue
                    steps.append(s)
        names = {s.name for s in steps}
        anchor = self.step_ref(m, "anchor", owner, names)
        cause = self.step_ref(m, "cause", owner, names)
        by_name = {s.name: s for s in steps}
        if anchor and anchor in by_name:
            a = by_name[anchor]
            if a.min != 1 or a.collects or a.untimed:
                self.add(m["anchor"], f"anchor step '{anchor}' of {owner} must be a single, timed event (min: 1)")
        if cause and cause in by_name and by_name[cause].min < 1:
            self.add(m["cause"], f"cause step '{cause}' of {owner} must not be optional (min >= 1)")
        explains = self.strings(m["explains"], f"explains of {owner}") if "explains" in m else ()
        for e in explains:
            if e not in names:
                self.add(m["explains"], f"explains of {owner}: no step '{e}'")
            elif e == cause and not suspected:
                self.add(m["explains"], f"explains of {owner}: '{e}' is the cause; a cause does not explain itself")
        exclusive = self.strings(m["exclusive"], f"exclusive of {owner}") if "exclusive" in m else ()
        for e in exclusive:
            if e not in names:
                self.add(m["exclusive"], f"exclusive of {owner}: no step '{e}'")
            elif e == anchor:
                self.add(m["exclusive"], f"exclusive of {owner}: '{e}' is the anchor, which serves one firing anyway")
        roles: list[tuple[str, str]] = []
        if "roles" in m:
            for sname, rnode in (self.mapping(m["roles"], f"roles of {owner}") or {}).items():
                r = self.string(rnode, f"roles.{sname} of {owner}")
                if sname not in names:
                    self.add(rnode, f"roles of {owner}: no step '{sname}'")
                elif r not in ROLE_NAMES:
                    self.add(rnode, f"roles.{sname} of {owner} must be one of {', '.join(ROLE_NAMES)}")
                else:
                    roles.append((sname, r))
        coverage: list[tuple[str, str]] = []
        if "coverage" in m:
            for log, cnode in (self.mapping(m["coverage"], f"coverage of {owner}", COVERAGE_LOGS) or {}).items():
                state = self.string(cnode, f"coverage.{log} of {owner}")
                if state not in COVERAGE_STATES:
                    self.add(cnode, f"coverage.{log} of {owner} must be one of {', '.join(COVERAGE_STATES)}")
                else:
                    coverage.append((log, state))
        against: list[Against] = []
        if "against" in m:
            if not isinstance(m["against"], yaml.SequenceNode):
                self.add(m["against"], f"against of {owner} must be a list")
            else:
                for an in m["against"].value:
                    a2 = self.against(an, owner)
                    if a2 is not None:
                        against.append(a2)
        downgrade = self.confidence(m["downgrade"], f"downgrade of {owner}") if "downgrade" in m else None
        if downgrade is not None and not against:
            self.add(m["downgrade"], f"downgrade of {owner} needs `against` entries")
        tnames = names | {a2.name for a2 in against}
        headline = self.template(m["headline"], f"headline of {owner}", tnames) if "headline" in m else ""
        statement = self.template(m["statement"], f"statement of {owner}", tnames) if "statement" in m else None
        fold_stmt = (self.template(m["fold_statement"], f"fold_statement of {owner}", tnames)
                     if "fold_statement" in m else "")
        if fold_stmt and not fold:
            self.add(m["fold_statement"], f"fold_statement of {owner} is only used with `fold: true`")
        alts = self.templates(m["alternatives"], f"alternatives of {owner}", tnames) if "alternatives" in m else ()
        steps_t = self.templates(m["next_steps"], f"next_steps of {owner}", tnames) if "next_steps" in m else ()
        refs = self.strings(m["references"], f"references of {owner}") if "references" in m else ()
        fixtures = self.fixtures(m["fixtures"], owner, fixture_dir) if "fixtures" in m else Fixtures()
        if None in (cid, title, conf, anchor, cause, window, statement, prio) or not steps:
            return None
        assert cid and title and conf and anchor and cause and window is not None and statement is not None
        return Correlation(
            id=cid, title=" ".join(title.split()), confidence=conf, anchor=anchor, cause=cause, window=window,
            steps=tuple(steps), statement=statement, pack=pack, location=self.loc(node), description=desc,
            kind=kind, priority=prio or 0, group=group, fold=fold, suspected=suspected, ordered=ordered,
            slack=slack if slack is not None else 1.0, join=join,
            explains=tuple(e for e in explains if e in names and (e != cause or suspected)),
            exclusive=tuple(e for e in exclusive if e in names and e != anchor), roles=tuple(roles),
            coverage=tuple(coverage), against=tuple(against), downgrade=downgrade, headline=headline or "",
            fold_statement=fold_stmt or "", alternatives=alts, next_steps=steps_t, references=refs,
            fixtures=fixtures)

    def step_ref(self, m: dict[str, yaml.Node], key: str, owner: str, names: set[str]) -> str | None:
        if key not in m:
            return None
        s = self.string(m[key], f"{key} of {owner}")
        if s is not None and names and s not in names:
            self.add(m[key], f"{key} of {owner}: no step '{s}' (steps: {', '.join(sorted(names))})")
            return None
        return s

    def pack(self, fixture_dir: Path) -> list[Correlation]:
        try:
            root = self.compose()
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
            self.add((mark.line + 1) if mark else 1, f"not valid YAML: {getattr(e, 'problem', e)}")
            return []
        if root is None:
            self.add(1, "empty correlation file")
            return []
        top = self.mapping(root, "a correlation file", PACK_KEYS)
        if top is None:
            return []
        name = self.string(top["pack"], "pack") if "pack" in top else Path(self.path).stem
        if "correlations" not in top or not isinstance(top["correlations"], yaml.SequenceNode):
            self.add(top.get("correlations", root), "a correlation file needs `correlations:` (a list)")
            return []
        out: list[Correlation] = []
        seen: dict[str, int] = {}
        for cn in top["correlations"].value:
            c = self.correlation(cn, name or "", fixture_dir)
            if c is None:
                continue
            if c.id in seen:
                self.add(cn, f"duplicate correlation id '{c.id}' (first at line {seen[c.id]})")
                continue
            seen[c.id] = c.location.line
            out.append(c)
        return out


def _as_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def known_kinds() -> set[str]:
    try:
        from .rulepacks import KINDS
    except ImportError:  # pragma: no cover - rulepacks ships with the package
        return set()
    return set(KINDS)


def load_file(path: Path | str, kinds: Iterable[str] | None = None,
              fixture_dir: Path = FIXTURE_DIR) -> tuple[list[Correlation], list[tuple[str, int, str]]]:
    """One file's correlations and its errors (does not raise)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return [], [(str(p), 1, f"cannot read: {e}")]
    r = _Reader(str(p), text, known_kinds() if kinds is None else kinds)
    out = r.pack(fixture_dir)
    return out, r.errors


def load_correlations(extra_dirs: Sequence[Path | str] = (), *, builtin: bool = True,
                      kinds: Iterable[str] | None = None, fixture_dir: Path = FIXTURE_DIR,
                      keep: bool = False) -> tuple[Correlation, ...]:
    """The built-in correlations, then those of `extra_dirs` (a later one replaces an earlier of the same id).
    Raises CorrelationError listing every problem of every file. With `keep`, the correlations read (checked) are
    kept between runs and read back while the same files are unchanged (`_kept_path`): reading the packs takes
    about 86 ms of every report, reading them back 5 ms."""
    dirs = ([BUILTIN_DIR] if builtin else []) + [Path(d) for d in extra_dirs]
    known = known_kinds() if kinds is None else set(kinds)
    path = _kept_path(dirs, known, fixture_dir) if keep else None
    if path is not None and (kept := _kept(path, fixture_dir)) is not None:
        return kept
    out = _load_dirs(dirs, known, fixture_dir)
    if path is not None:
        keep_pickled(out, path, CORRELATIONS_KEPT)
    return out


def _load_dirs(dirs: Sequence[Path], known: set[str], fixture_dir: Path) -> tuple[Correlation, ...]:
    by_id: dict[str, Correlation] = {}
    errors: list[tuple[str, int, str]] = []
    for d in dirs:
        if not d.is_dir():
            errors.append((str(d), 0, "correlation directory does not exist"))
            continue
        layer: dict[str, Correlation] = {}
        for f in sorted(d.glob("*.yaml")):
            cs, errs = load_file(f, known, fixture_dir)
            errors.extend(errs)
            for c in cs:
                if c.id in layer:
                    errors.append((str(f), c.location.line,
                                   f"duplicate correlation id '{c.id}' (also at {layer[c.id].location})"))
                    continue
                layer[c.id] = c
        for cid, c in layer.items():
            by_id.pop(cid, None)
            by_id[cid] = c
    if errors:
        raise CorrelationError(errors)
    return tuple(by_id.values())


CORRELATIONS_KEPT = 4   # the newest sets of correlations kept in the private cache directory
# what reading the packs depends on besides their files: this module and the ones it reads them with
_READ_BY = ("correlate.py", "yamlread.py", "model.py", "asides.py", "kubepods.py", "schema.py", "sizes.py")


def _kept_path(dirs: Sequence[Path], known: set[str], fixture_dir: Path) -> Path | None:
    """Where the correlations of these directories are kept, in the private cache directory (None: there is
    none, or a directory is missing, an error to report). Named after each pack file's path and digest, the kinds
    they may name, the fixture directory, the code that reads them and the versions of YAML and Python (pickles);
    which fixtures exist is checked when they are read back (`_kept`)."""
    d = private_dir()
    if d is None or not all(x.is_dir() for x in dirs):
        return None
    files = []
    try:
        for x in dirs:
            for f in sorted(x.glob("*.yaml")):
                files.append((str(f.resolve()), hashlib.sha256(f.read_bytes()).hexdigest()))
    except OSError:
        return None   # unreadable: the full read reports it
    here = Path(__file__).parent
    what = [code_digest(*(str(here / m) for m in _READ_BY)), files, sorted(known), str(fixture_dir.resolve()),
            yaml.__version__, sys.version]
    return d / f"correlations~{hashlib.sha256(json.dumps(what).encode()).hexdigest()[:32]}.pickle"


def _kept(path: Path, fixture_dir: Path) -> tuple[Correlation, ...] | None:
    """The correlations kept at `path` (by `load_correlations`), or None: not kept yet, written by another version,
    or a fixture they name is gone (the full read then says which)."""
    corrs = read_pickled(path)
    if not isinstance(corrs, tuple) or not all(isinstance(c, Correlation) for c in corrs):
        return None
    named = {f for c in corrs for f in (*c.fixtures.must_fire, *c.fixtures.must_not_fire)}
    if not all((fixture_dir / f).is_file() for f in named):
        return None
    return corrs


# ----------------------------------------------------------------------------------------------------------
# events as the engine sees them


@dataclass(frozen=True)
class EventView:
    """One event row, with its fields parsed and its entities resolved (internal to correlation)."""

    seq: int                      # position in the deterministic order of the frame
    id: str                       # `<source_id>:<line>:<rule>`
    ts: datetime | None
    t: float | None               # epoch seconds
    ts_source: str
    kind: str
    rule: str
    severity: str
    role: str
    host: str | None
    unit: str | None
    pid: int | None
    title: str
    fields: Mapping[str, Any]
    message: str
    source_id: str
    path: str
    line: int
    line_end: int
    format: str
    entities: Mapping[str, str]

    @classmethod
    def of(cls, **values: Any) -> EventView:
        """A view from the value of every field, built without the frozen dataclass's `__init__`, which sets each
        field with `object.__setattr__` (5 us a view: 0.1 s of a report on a busy day's 20 k events). It is as
        frozen as one built by `__init__`."""
        if values.keys() != _VIEW_FIELDS:
            raise TypeError(f"EventView.of: {sorted(_VIEW_FIELDS ^ values.keys())} missing or unknown")
        view = object.__new__(cls)
        view.__dict__.update(values)
        return view

    def value(self, name: str) -> Any:
        if name in self.fields:
            return self.fields[name]
        if name in self.entities:
            return self.entities[name]
        return getattr(self, name, None) if name in _COLUMNS else None


_VIEW_FIELDS = frozenset(f.name for f in dataclass_fields(EventView))
_COLUMNS = ("kind", "rule", "severity", "role", "host", "unit", "pid", "title", "message", "path", "line",
            "format", "ts_source", "source_id")


def unit_of_cgroup(cgroup: str | None) -> str | None:
    """`/system.slice/sglang.service` -> `sglang.service` (the innermost unit named in a cgroup path)."""
    if not cgroup:
        return None
    for part in reversed(str(cgroup).strip("/").split("/")):
        m = _UNIT_SUFFIX.search(part)
        if m and not part.endswith(".slice"):
            return m.group(1)
    return None


def _norm_pci(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v).lower().strip()
    s = re.sub(r"^pci:", "", s)
    m = re.match(r"^(?:([0-9a-f]{4,8}):)?([0-9a-f]{2}):([0-9a-f]{2})(?:\.[0-7])?$", s)
    if not m:
        return s
    return f"{(m.group(1) or '0000')[-4:]}:{m.group(2)}:{m.group(3)}"


def entities_of(kind: str, host: str | None, unit: str | None, pid: int | None,
                fields: Mapping[str, Any]) -> dict[str, str]:
    """The join keys of one event. `pid` is the process the line is about (a field), or the logging process
    for lines a process writes about itself; never systemd's or journald's own pid."""
    ents: dict[str, str] = {}
    if host:
        ents["host"] = str(host)
    cgroup = fields.get("cgroup") or fields.get("task_memcg") or fields.get("oom_memcg")
    u = unit or fields.get("unit") or unit_of_cgroup(cgroup)
    if u:
        ents["unit"] = str(u)
    p = fields.get("main_pid") or fields.get("pid")
    if p is None and pid is not None and kind not in _LOGGER_PID_KINDS and pid != 1:
        p = pid
    if p is not None and str(p).strip():
        ents["pid"] = _as_text(p)
    if cgroup:
        ents["cgroup"] = str(cgroup)
    pci = _norm_pci(fields.get("pci"))
    if pci:
        ents["pci"] = pci
    rank = fields.get("rank") if fields.get("rank") is not None else fields.get("tp_rank")
    if rank is not None:
        ents["rank"] = _as_text(rank)
    if fields.get("gpu") is not None:
        ents["gpu"] = _as_text(fields["gpu"])
    pod = fields.get("pod")
    if pod:                                  # a Kubernetes pod, `namespace/name`, and a container of it by name
        ents["pod"] = f"{fields['namespace']}/{pod}" if fields.get("namespace") else str(pod)
        if fields.get("container"):
            ents["container"] = f"{ents['pod']}/{fields['container']}"
    # a container by its runtime's id: the kubelet's ContainerDied prints it, the kernel's OOM report names its
    # cgroup (task_memcg before the pod's oom_memcg), the kubelet's kill lines its scope
    # (each path read once, and only when it names the kubelet's tree)
    kubes = [k for p in (fields.get("task_memcg"), cgroup) if p and "kubepods" in str(p) and (k := parse_kubepods(p))]
    cid = fields.get("container_id")
    if not (isinstance(cid, str) and len(cid) == 64):
        cid = next((k.container_id for k in kubes if k.container_id), None) or scope_id(u)
    if cid:
        ents["container_id"] = cid
    puid = fields.get("pod_uid") or next((k.pod_uid for k in kubes), None)
    if puid:
        ents["pod_uid"] = str(puid)
    return ents


def event_id(source_id: str | None, line: int | None, rule: str | None) -> str:
    return f"{source_id or ''}:{line or 0}:{rule or ''}"


def sort_events(events: pl.DataFrame) -> pl.DataFrame:
    """The deterministic order of events everywhere: time (untimed last), path, line, rule."""
    return events.sort(["ts", "path", "line", "rule"], nulls_last=True, maintain_order=True)


def views(events: pl.DataFrame, enrich: Any = None,
          host_gpus: Mapping[str, tuple[str | None, str]] | None = None, *, seq: str | None = None) -> list[EventView]:
    """EventViews of a frame (sorted first). `enrich(kind, fields, message) -> fields` may add derived fields
    (into a new dict: the one it is given is shared by the events whose fields read the same), and reads the
    message only of the kinds in its attribute `message_kinds`, when it has one;
    `host_gpus` (host -> (sm, GPU name) as the logs show them) names the GPU of an architecture error
    (`gpus_desc`) instead of the architecture's whole family. `seq` names a column holding each row's position
    in the deterministic order of a larger frame (a selection of a store's events): rows are taken in that
    order and keep those positions."""
    if seq is not None:
        df = events.sort(seq)
        seqs = df[seq].to_list()
    else:
        df = sort_events(events)
        seqs = list(range(df.height))
    names = ("ts", "ts_source", "kind", "rule", "severity", "role", "host", "unit", "pid", "title", "fields",
             "message", "source_id", "path", "line", "line_end", "format")
    cols = [df[n].to_list() if n in df.columns else [None] * df.height for n in names]
    out: list[EventView] = []
    utc = timezone.utc
    # A crash-looping unit's events repeat their kind and fields, and most of them their host, unit and pid too:
    # each distinct one is decoded, enriched and resolved once, and its dicts are shared (no one changes an event's
    # fields or entities in place: a change is a new view with new dicts, `dataclasses.replace`). The message is
    # part of that key for the kinds `enrich` reads it of (its `message_kinds`; every kind, when it does not say).
    reads_message = frozenset() if enrich is None else getattr(enrich, "message_kinds", None)
    enriched: dict[tuple[str, str | None, str | None], dict[str, Any]] = {}
    resolved: dict[tuple, dict[str, str]] = {}   # (the fields' key, host, unit, pid) -> entities
    for i, ts, ts_source, kind, rule, severity, role, host, unit, pid, title, raw, message, source_id, path, line, \
            line_end, fmt in zip(seqs, *cols):
        kind = kind or ""
        key = (kind, raw, message if reads_message is None or kind in reads_message else None)
        fields = enriched.get(key)
        if fields is None:
            fields = enriched[key] = _fields_of(raw, kind, message, enrich)
        ekey = (key, host, unit, pid)
        ents = resolved.get(ekey)
        if ents is None:
            ents = resolved[ekey] = entities_of(kind, host, unit, pid, fields)
        if host_gpus and fields.get("sm") and host in host_gpus:   # (the GPU's name is no entity)
            sm, name = host_gpus[host]
            if sm in (None, fields["sm"]):
                fields = {**fields, "gpus_desc": name}
        if ts is not None and ts.tzinfo is None:
            ts = ts.replace(tzinfo=utc)
        out.append(EventView.of(
            seq=i, id=event_id(source_id, line, rule), ts=ts,
            t=ts.timestamp() if ts is not None else None, ts_source=ts_source or "none", kind=kind,
            rule=rule or "", severity=severity or "info", role=role or "context",
            host=host, unit=ents.get("unit"), pid=pid, title=title or "",
            fields=fields, message=message or "", source_id=source_id or "",
            path=path or "", line=int(line or 0), line_end=int(line_end or line or 0),
            format=fmt or "", entities=ents))
    return out


def _fields_of(raw: str | None, kind: str, message: str | None, enrich: Any) -> dict[str, Any]:
    """An event's fields: its `fields` JSON decoded (a JSON that is not an object: none), then enriched."""
    fields: dict[str, Any] = {}
    if raw:
        try:
            decoded = json.loads(raw)
        except (TypeError, ValueError):
            decoded = None
        if isinstance(decoded, dict):
            fields = decoded
    if enrich is not None:
        return enrich(kind, fields, message or "")
    return fields


# ----------------------------------------------------------------------------------------------------------
# coverage: which logs were ingested for a host and a window


@dataclass(frozen=True)
class SourceSpan:
    """What one source holds for one host: a class of log lines (`kernel`, `systemd`, `service`) and unit,
    with the time span they cover."""

    path: str
    format: str
    host: str | None
    log: str                          # kernel | systemd | service
    unit: str | None
    first: datetime | None
    last: datetime | None
    records: int
    untimed: int = 0                  # records of this class without a wall time (unanchored kernel seconds)


@dataclass(frozen=True)
class CoverageReport:
    kernel: bool                      # a kernel log whose span reaches the moment
    unit_output: bool                 # the service's own output (not only systemd's lines about it)
    ingested: tuple[str, ...]         # "journal.log (systemd lines for x.service)" ...
    missing: tuple[str, ...]          # "the kernel log (dmesg or journalctl -k) of h around 20:17:19" ...
    notes: tuple[str, ...] = ()       # e.g. "dmesg.log: 12 kernel lines have no wall time (not anchored)"

    def as_values(self) -> dict[str, str]:
        return {"ingested": "; ".join(self.ingested) or "nothing",
                "missing": "; ".join(self.missing) or "nothing",
                "notes": " ".join(self.notes),
                "kernel": "yes" if self.kernel else "no",
                "unit_output": "yes" if self.unit_output else "no",
                "kernel_seen": ("a" if self.kernel else "no") + " kernel log covering the moment was ingested",
                "unit_output_seen": "the service's own output was " + ("" if self.unit_output else "not ") + "ingested"}


_LOG_WORDS = {"kernel": "kernel lines", "systemd": "systemd lines", "service": "the service's own output"}


class Coverage:
    """The sources' spans per host; answers "what was ingested around this moment, and what was not"."""

    def __init__(self, spans: Sequence[SourceSpan]):
        self._spans: tuple[SourceSpan, ...] | None = tuple(sorted(spans, key=lambda s: (s.path, s.host or "", s.log,
                                                                                        s.unit or "")))
        self._frame: pl.DataFrame | None = None
        self._hosts: dict[str | None, _HostSpans] = {}
        self._memo: dict[tuple, CoverageReport] = {}
        self._windows: dict[tuple, dict[str, dict[str, _WindowUnits]]] = {}

    @classmethod
    def from_frame(cls, df: pl.DataFrame) -> Coverage:
        """Coverage of spans given as a frame (path, format, host, log, unit, first, last, records, untimed):
        a store has one span per unit a journal names, often a hundred thousand; a host's are only read (into
        the indexes its reports use) when a report about it is asked for."""
        cov = cls(())
        cov._spans = None
        cov._frame = (df.with_columns(pl.col("host").fill_null("").alias("_h"), pl.col("unit").fill_null("").alias("_u"))
                      .sort(["path", "_h", "log", "_u"], maintain_order=True).drop("_h", "_u"))
        return cov

    @property
    def spans(self) -> tuple[SourceSpan, ...]:
        if self._spans is None:
            assert self._frame is not None
            cols = [self._frame[c].to_list() for c in ("path", "format", "host", "log", "unit", "first", "last",
                                                       "records", "untimed")]
            self._spans = tuple(SourceSpan(path=p, format=f or "", host=h, log=lg, unit=u, first=a, last=z, records=n,
                                           untimed=un) for p, f, h, lg, u, a, z, n, un in zip(*cols))
        return self._spans

    def _host(self, host: str | None) -> _HostSpans:
        hs = self._hosts.get(host)
        if hs is None:
            if self._frame is not None:
                mine = pl.col("host").is_null() if host is None else (pl.col("host") == host) | pl.col("host").is_null()
                hs = _HostSpans.of_frame(self._frame.filter(mine))
            else:
                hs = _HostSpans.of([s for s in self.spans if s.host == host or s.host is None])
            self._hosts[host] = hs
        return hs

    @classmethod
    def from_views(cls, evs: Sequence[EventView]) -> Coverage:
        """Coverage as far as the events themselves show (fixture timelines, stores without records)."""
        acc: dict[tuple, list] = {}
        for e in evs:
            log = "kernel" if e.kind in KERNEL_KINDS else "systemd" if e.kind in SYSTEMD_KINDS else "service"
            key = (e.path, e.format, e.host, log, e.unit if log != "kernel" else None)
            a = acc.setdefault(key, [None, None, 0, 0])
            if e.ts is None:
                a[3] += 1
            else:
                a[0] = e.ts if a[0] is None or e.ts < a[0] else a[0]
                a[1] = e.ts if a[1] is None or e.ts > a[1] else a[1]
            a[2] += 1
        return cls([SourceSpan(path=k[0], format=k[1], host=k[2], log=k[3], unit=k[4], first=v[0], last=v[1],
                               records=v[2], untimed=v[3]) for k, v in acc.items()])

    def report(self, host: str | None, unit: str | None, at: datetime, since: datetime,
               until: datetime) -> CoverageReport:
        key = (host, unit, at, since, until)
        rep = self._memo.get(key)
        if rep is None:
            rep = self._memo[key] = self._report(host, unit, at, since, until)
        return rep

    def _ingested(self, host: str | None, since: datetime, until: datetime) -> dict[str, dict[str, _WindowUnits]]:
        """path -> log -> the units of the spans overlapping [since, until] (for the logs with such a span)."""
        key = (host, since, until)
        ingested = self._windows.get(key)
        if ingested is None:
            ingested = self._windows[key] = self._host(host).window(since, until)
        return ingested

    def _report(self, host: str | None, unit: str | None, at: datetime, since: datetime,
                until: datetime) -> CoverageReport:
        hs = self._host(host)
        ingested = self._ingested(host, since, until)
        notes: list[str] = []
        kernel_spans = hs.kernel
        kernel = any(s.first is not None and s.last is not None and s.first <= at
                     and s.last >= at - timedelta(seconds=5) for s in kernel_spans)
        for s in kernel_spans:
            if s.untimed:
                notes.append(f"{s.path}: {s.untimed} kernel line(s) have no wall-clock time (kernel seconds not "
                             f"anchored to a boot time), so they cannot be placed in the window.")
            elif not kernel and s.last is not None and s.last < at:
                notes.append(f"{s.path}: the kernel log ends at {_hms(s.last)}, before {_hms(at)}.")
            elif not kernel and s.first is not None and s.first > at:
                notes.append(f"{s.path}: the kernel log starts at {_hms(s.first)}, after {_hms(at)}.")
        unit_output = False
        for s in hs.service:
            if unit is not None and s.unit not in (unit, None):
                continue
            reaches = hs.reach[s.path]
            if s.first <= at and reaches >= at - timedelta(seconds=60):
                unit_output = True
        missing = []
        h = host or "the host"
        if not kernel:
            missing.append(f"the kernel log (dmesg or journalctl -k) of {h} around {_hms(at)}")
        if not unit_output:
            missing.append(f"the service's own output (journalctl -u {unit})" if unit else
                           "the service's own output")
        ing = tuple(f"{p} (" + ", ".join(_log_words(log, us, unit) for log, us in sorted(logs.items())) + ")"
                    for p, logs in sorted(ingested.items()))
        return CoverageReport(kernel=kernel, unit_output=unit_output, ingested=ing, missing=tuple(missing),
                              notes=tuple(dict.fromkeys(notes)))


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US = timedelta(microseconds=1)


def _us(t: datetime) -> int:
    return (t - _EPOCH) // _US


class _SpanGroup:
    """The timed spans of one path and class of log, for counting those that overlap a window (times in
    microseconds): n - (ended before it) - (started after it), by bisection; the distinct units likewise (a
    unit's spans as one interval when they touch, `u_firsts`/`u_lasts`; a unit whose spans leave gaps,
    `multi`, is checked span by span). `units()`: unit -> its intervals; `order()`: (unit, first, last) of the
    spans in coverage order, for naming the units (both made when first asked for)."""

    def __init__(self, firsts: list[int], lasts: list[int], u_firsts: list[int], u_lasts: list[int],
                 multi: list[list[tuple[int, int]]],
                 units: Callable[[], Mapping[str, list[tuple[int, int]]]],
                 order: Callable[[], list[tuple[str | None, int, int]]]):
        self.firsts, self.lasts, self.u_firsts, self.u_lasts, self.multi = firsts, lasts, u_firsts, u_lasts, multi
        self._units_fn, self._order_fn = units, order
        self._units: Mapping[str, list[tuple[int, int]]] | None = None
        self._order: list[tuple[str | None, int, int]] | None = None

    @classmethod
    def of(cls, timed: Sequence[tuple[str | None, int, int]], log: str) -> _SpanGroup:
        """From the (unit, first, last) of the timed spans, in coverage order."""
        units: dict[str, list[tuple[int, int]]] = {}
        if log != "kernel":
            for u, a, z in timed:
                if u:
                    units.setdefault(u, []).append((a, z))
        single: list[tuple[int, int]] = []
        multi: list[list[tuple[int, int]]] = []
        for v in units.values():
            span = _one_interval(v)
            if span is None:
                multi.append(v)
            else:
                single.append(span)
        order = list(timed)
        return cls(sorted(a for _, a, _ in timed), sorted(z for _, _, z in timed), sorted(a for a, _ in single),
                   sorted(z for _, z in single), multi, lambda: units, lambda: order)

    def units(self) -> Mapping[str, list[tuple[int, int]]]:
        if self._units is None:
            self._units = self._units_fn()
        return self._units

    def order(self) -> list[tuple[str | None, int, int]]:
        if self._order is None:
            self._order = self._order_fn()
        return self._order

    @staticmethod
    def _count(firsts: list[int], lasts: list[int], since: int, until: int) -> int:
        return len(firsts) - bisect_left(lasts, since) - (len(firsts) - bisect_right(firsts, until))

    def window(self, since: int, until: int) -> _WindowUnits | None:
        if not self._count(self.firsts, self.lasts, since, until):
            return None
        n = self._count(self.u_firsts, self.u_lasts, since, until)
        n += sum(1 for v in self.multi if any(a <= until and z >= since for a, z in v))
        return _WindowUnits(self, since, until, n)


def _one_interval(iv: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    """The union of intervals when it is one interval (they touch or overlap), else None."""
    iv = sorted(iv)
    lo, hi = iv[0]
    for a, z in iv[1:]:
        if a > hi:
            return None
        hi = max(hi, z)
    return lo, hi


class _UnitIntervals(Mapping):
    """unit -> its spans' intervals, from a frame (unit, as, zs) with one row per unit: a journal names up to a
    hundred thousand units, and a report asks about a few, so a unit is looked for by one vectorised comparison
    (no index of them all is made), and its intervals become Python objects when first asked for."""

    def __init__(self, df: pl.DataFrame):
        self._df = df
        self._units = df.get_column("unit")
        self._done: dict[str, list[tuple[int, int]]] = {}

    def _row(self, unit: object) -> int | None:
        if not isinstance(unit, str):
            return None
        at = (self._units == unit).arg_true()
        return int(at[0]) if at.len() else None

    def __getitem__(self, unit: str) -> list[tuple[int, int]]:
        iv = self._done.get(unit)
        if iv is None:
            i = self._row(unit)
            if i is None:
                raise KeyError(unit)
            iv = self._done[unit] = list(zip(self._df["as"][i].to_list(), self._df["zs"][i].to_list()))
        return iv

    def __contains__(self, unit: object) -> bool:
        return self._row(unit) is not None

    def __iter__(self):  # noqa: ANN204
        return iter(self._units.to_list())

    def __len__(self) -> int:
        return self._units.len()


class _WindowUnits:
    """The distinct units of the spans of a _SpanGroup overlapping a window: their number, membership, and
    (iterating) the units themselves in span order."""

    def __init__(self, group: _SpanGroup, since: int, until: int, n: int):
        self.group, self.since, self.until, self.n = group, since, until, n

    def __len__(self) -> int:
        return self.n

    def __contains__(self, unit: object) -> bool:
        return any(a <= self.until and z >= self.since for a, z in self.group.units().get(unit, ()))  # type: ignore[call-overload]

    def __iter__(self):  # noqa: ANN204
        units = set(self.group.units())
        return iter(dict.fromkeys(u for u, a, z in self.group.order() if u and u in units
                                  and a <= self.until and z >= self.since))


class _HostSpans:
    """The spans one host's reports read (its own and those without a host): the kernel and service spans
    themselves, the last time each path reaches, and the spans of each path and log as a _SpanGroup."""

    def __init__(self, kernel: list[SourceSpan], service: list[SourceSpan], reach: dict[str, datetime],
                 groups: dict[tuple[str, str], _SpanGroup]):
        self.kernel, self.service, self.reach, self.groups = kernel, service, reach, groups

    @classmethod
    def of(cls, spans: Sequence[SourceSpan]) -> _HostSpans:
        reach: dict[str, datetime] = {}
        for s in spans:
            if s.last is not None and (s.path not in reach or s.last > reach[s.path]):
                reach[s.path] = s.last
        acc: dict[tuple[str, str], list[tuple[str | None, int, int]]] = {}
        for s in spans:
            g = acc.setdefault((s.path, s.log), [])
            if s.first is not None and s.last is not None:
                g.append((s.unit, _us(s.first), _us(s.last)))
        return cls([s for s in spans if s.log == "kernel"],
                   [s for s in spans if s.log == "service" and s.first is not None and s.last is not None],
                   reach, {k: _SpanGroup.of(v, k[1]) for k, v in acc.items()})

    @classmethod
    def of_frame(cls, df: pl.DataFrame) -> _HostSpans:
        """The same from a frame of spans (path, format, host, log, unit, first, last, records, untimed) in
        coverage order, without making an object of each span: the sorted times and the units' intervals
        are gathered by polars."""
        def objs(part: pl.DataFrame) -> list[SourceSpan]:
            return [SourceSpan(path=r["path"], format=r["format"] or "", host=r["host"], log=r["log"], unit=r["unit"],
                               first=r["first"], last=r["last"], records=r["records"], untimed=r["untimed"])
                    for r in part.iter_rows(named=True)]

        kernel = objs(df.filter(pl.col("log") == "kernel"))
        service = objs(df.filter((pl.col("log") == "service") & pl.col("first").is_not_null()
                                 & pl.col("last").is_not_null()))
        r = df.filter(pl.col("last").is_not_null()).group_by("path").agg(pl.col("last").max())
        reach = dict(zip(r["path"].to_list(), r["last"].to_list()))
        timed = df.filter(pl.col("first").is_not_null() & pl.col("last").is_not_null()).select(
            "path", "log", "unit", pl.col("first").dt.epoch("us").alias("a"), pl.col("last").dt.epoch("us").alias("z"))
        times = timed.group_by("path", "log").agg(pl.col("a").sort(), pl.col("z").sort())
        named = (timed.filter(pl.col("unit").is_not_null() & (pl.col("unit") != "") & (pl.col("log") != "kernel"))
                 .group_by("path", "log", "unit").agg(pl.len().alias("n"), pl.col("a").min(), pl.col("z").max(),
                                                      pl.col("a").alias("as"), pl.col("z").alias("zs")))
        ones = named.filter(pl.col("n") == 1).group_by("path", "log").agg(pl.col("a").sort(), pl.col("z").sort())
        single: dict[tuple[str, str], tuple[list[int], list[int]]] = {
            (p, lg): (a, z) for p, lg, a, z in ones.iter_rows()}
        more: dict[tuple[str, str], tuple[list[tuple[int, int]], list[list[tuple[int, int]]]]] = {}
        for p, lg, _u, _n, _a, _z, a_s, z_s in named.filter(pl.col("n") > 1).iter_rows():
            iv = list(zip(a_s, z_s))
            one = _one_interval(iv)
            m = more.setdefault((p, lg), ([], []))
            if one is None:
                m[1].append(iv)
            else:
                m[0].append(one)

        def units_of(path: str, log: str) -> Callable[[], Mapping[str, list[tuple[int, int]]]]:
            return lambda: _UnitIntervals(named.filter((pl.col("path") == path) & (pl.col("log") == log))
                                          .select("unit", "as", "zs"))

        def order_of(path: str, log: str) -> Callable[[], list[tuple[str | None, int, int]]]:
            return lambda: list(timed.filter((pl.col("path") == path) & (pl.col("log") == log))
                                .select("unit", "a", "z").iter_rows())

        groups = {(p, lg): _SpanGroup([], [], [], [], [], dict, list) for p, lg in df.select("path", "log").unique().iter_rows()}
        for p, lg, a, z in times.iter_rows():
            uf, ul = single.get((p, lg), ([], []))
            extra, multi = more.get((p, lg), ([], []))
            if extra:
                uf = sorted([*uf, *(x for x, _ in extra)])
                ul = sorted([*ul, *(y for _, y in extra)])
            groups[(p, lg)] = _SpanGroup(a, z, uf, ul, multi, units_of(p, lg), order_of(p, lg))
        return cls(kernel, service, reach, groups)

    def window(self, since: datetime, until: datetime) -> dict[str, dict[str, _WindowUnits]]:
        lo, hi = _us(since), _us(until)
        out: dict[str, dict[str, _WindowUnits]] = {}
        for (path, log), g in self.groups.items():
            w = g.window(lo, hi)
            if w is not None:
                out.setdefault(path, {})[log] = w
        return out


def _log_words(log: str, units: Sequence[str] | _WindowUnits, unit: str | None) -> str:
    base = _LOG_WORDS[log]
    if not units:
        return base
    if unit in units:
        n = len(units) - 1
        return f"{base} of {unit}" + (f" and of {n} other unit{'s' if n > 1 else ''}" if n else "")
    if len(units) <= 2:
        return f"{base} of {' and '.join(units)}"
    return f"{base} of {len(units)} other units"


def _hms(t: datetime) -> str:
    u = t.astimezone(timezone.utc)
    return f"{u.hour:02d}:{u.minute:02d}:{u.second:02d}"


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
                vals = {_as_text(v) for e in [anchor, *evs] if (v := e.value(s.distinct)) is not None}
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
    for col in _COLUMNS:
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
        vals["time"] = _hms(e.ts)
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
            if _as_text(v) not in lst:
                lst.append(_as_text(v))
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
        vals["last_time"] = _hms(evs[-1].ts)
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
                if v is not None and _as_text(v) not in dv:
                    dv.append(_as_text(v))
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
# fixture timelines: small YAML files of events, the regression samples of each correlation


@dataclass(frozen=True)
class TimelineFixture:
    path: str
    description: str
    events: pl.DataFrame
    coverage: Coverage | None          # from `sources:`; None = what the events show
    expect: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]   # correlation id -> expected attributes


_TL_KEYS = ("description", "host", "date", "sources", "events", "expect")
_TL_EVENT_KEYS = ("at", "kind", "host", "unit", "pid", "fields", "severity", "role", "rule", "title", "message",
                  "path", "line", "ts_source", "format")
_TL_SOURCE_KEYS = ("path", "format", "host", "log", "unit", "first", "last", "records", "untimed")
_TL_EXPECT_KEYS = ("confidence", "kind", "explains", "cause", "statement_contains", "unit")
_DEFAULT_SEVERITY = {"cause": "error", "symptom": "warning", "context": "info"}


def _fixture_time(value: Any, date: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    text = str(value).strip()
    if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?", text):
        text = f"{date} {text}"
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def load_timeline(path: Path | str) -> TimelineFixture:
    """A fixture timeline (see tests/fixtures/timelines/README.md). Raises CorrelationError with file:line."""
    from .rulepacks import KINDS

    p = Path(path)
    r = _Reader(str(p), p.read_text(encoding="utf-8"), KINDS)
    try:
        root = r.compose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise CorrelationError([(str(p), (mark.line + 1) if mark else 1, f"not valid YAML: {getattr(e, 'problem', e)}")])
    top = r.mapping(root, "a timeline", _TL_KEYS) if root is not None else None
    if top is None or "events" not in top or not isinstance(top["events"], yaml.SequenceNode):
        r.add(root if root is not None else 1, "a timeline needs `events:` (a list)")
        raise CorrelationError(r.errors)
    host = r.value(top["host"]) if "host" in top else "host1"
    date = str(r.value(top["date"])) if "date" in top else "2025-05-25"
    rows = []
    for i, en in enumerate(top["events"].value, start=1):
        m = r.mapping(en, f"event {i}", _TL_EVENT_KEYS)
        if m is None:
            continue
        v = {k: r.value(n) for k, n in m.items()}
        kind = v.get("kind")
        if kind not in KINDS:
            r.add(en, f"event {i}: unknown or missing kind {kind!r}")
            continue
        role = v.get("role") or KINDS[kind].value
        path_ = v.get("path") or "fixture.log"
        try:
            ts = _fixture_time(v.get("at"), date)
        except ValueError:
            r.add(en, f"event {i}: bad time {v.get('at')!r} (use HH:MM:SS or an ISO date-time)")
            continue
        fields = v.get("fields") or {}
        if not isinstance(fields, dict):
            r.add(en, f"event {i}: fields must be a mapping")
            continue
        unit = v.get("unit", fields.get("unit"))
        rows.append({
            "ts": ts, "ts_source": v.get("ts_source") or ("none" if ts is None else "exact"), "kind": kind,
            "rule": v.get("rule") or f"fixture.{kind}", "severity": v.get("severity") or _DEFAULT_SEVERITY[role],
            "role": role, "host": v.get("host", host), "unit": unit, "pid": v.get("pid"),
            "title": v.get("title") or kind, "fields": json.dumps(fields, sort_keys=True),
            "message": v.get("message") or v.get("title") or kind, "source_id": "fx" + _short(path_),
            "path": path_, "line": int(v.get("line") or en.start_mark.line + 1),
            "line_end": int(v.get("line") or en.start_mark.line + 1), "format": v.get("format") or "fixture"})
    coverage = None
    if "sources" in top:
        spans = []
        for sn in top["sources"].value if isinstance(top["sources"], yaml.SequenceNode) else []:
            m = r.mapping(sn, "a source", _TL_SOURCE_KEYS)
            if m is None:
                continue
            v = {k: r.value(n) for k, n in m.items()}
            if v.get("log") not in ("kernel", "systemd", "service"):
                r.add(sn, "a source needs `log:` kernel, systemd or service")
                continue
            spans.append(SourceSpan(path=v.get("path") or "fixture.log", format=v.get("format") or "fixture",
                                    host=v.get("host", host), log=v["log"], unit=v.get("unit"),
                                    first=_fixture_time(v.get("first"), date), last=_fixture_time(v.get("last"), date),
                                    records=int(v.get("records") or 1), untimed=int(v.get("untimed") or 0)))
        coverage = Coverage(spans)
    expect = []
    if "expect" in top:
        for cid, en in (r.mapping(top["expect"], "expect") or {}).items():
            m = r.mapping(en, f"expect.{cid}", _TL_EXPECT_KEYS)
            if m is not None:
                expect.append((cid, tuple((k, r.value(n)) for k, n in m.items())))
    if r.errors:
        raise CorrelationError(r.errors)
    from .schema import EVENT_SCHEMA

    df = pl.DataFrame(rows, schema=EVENT_SCHEMA) if rows else pl.DataFrame(schema=EVENT_SCHEMA)
    desc = " ".join(str(r.value(top["description"])).split()) if "description" in top else ""
    return TimelineFixture(path=str(p), description=desc, events=df, coverage=coverage, expect=tuple(expect))


def _short(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:14]


def check_fixture(fx: TimelineFixture, correlations: Sequence[Correlation], knowledge: Any = None) -> list[Finding]:
    """The findings of all `correlations` over one fixture timeline."""
    return findings(fx.events, correlations, fx.coverage, knowledge)


def fired(found: Sequence[Finding], correlation_id: str) -> list[Finding]:
    """The findings a correlation contributed to (as the winner or merged into another)."""
    return [f for f in found if correlation_id in f.rules]


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
