"""Correlation packs: YAML (`rules/correlations/*.yaml`) -> validated `Correlation`s, every error of a file at
once with its `path:line`; the checked set of the built-in and user packs kept in the private cache.

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
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .cachefiles import code_digest, file_digest, keep_pickled, pickle_path, read_pickled
from .coverage import COVERAGE_LOGS, COVERAGE_STATES
from .eventview import ENTITIES, as_text
from .model import Confidence
from .statements import template_names
from .yamlread import Location, PackError, construct

# libyaml's safe loader when PyYAML has it (same nodes and marks, several times faster)
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
ROOT = Path(__file__).resolve().parent.parent
BUILTIN_DIR = ROOT / "rules" / "correlations"
FIXTURE_DIR = ROOT / "tests" / "fixtures" / "timelines"
NULL = "\x00null"                   # a `where` value that matches an absent field
ROLE_NAMES = ("cause", "symptom", "context")
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
_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class CorrelationError(PackError):
    """Problems in correlation files: `errors` is a list of (path, line, message), all of them at once."""


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
        text = as_text(v)
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
            texts = [NULL if v is None else as_text(v) for v in vals]
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


def known_kinds() -> set[str]:
    try:
        from .rulemodel import KINDS
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
_READ_BY = ("correlation_packs.py", "coverage.py", "eventview.py", "statements.py", "yamlread.py", "model.py",
            "asides.py", "kubepods.py", "sizes.py")


def _kept_path(dirs: Sequence[Path], known: set[str], fixture_dir: Path) -> Path | None:
    """Where the correlations of these directories are kept, in the private cache directory (None: there is
    none, or a directory is missing, an error to report). Named after each pack file's path and digest, the kinds
    they may name, the fixture directory, the code that reads them and the versions of YAML and Python (pickles);
    which fixtures exist is checked when they are read back (`_kept`)."""
    if not all(x.is_dir() for x in dirs):
        return None   # the full read reports it
    try:
        files = [(str(f.resolve()), file_digest(f)) for x in dirs for f in sorted(x.glob("*.yaml"))]
    except OSError:
        return None   # unreadable: the full read reports it
    here = Path(__file__).parent
    return pickle_path("correlations", [code_digest(*(str(here / m) for m in _READ_BY)), files, sorted(known),
                                        str(fixture_dir.resolve()), yaml.__version__, sys.version])


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
