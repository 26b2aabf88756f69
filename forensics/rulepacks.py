"""Rule packs: YAML data (`rules/*.yaml`) -> validated, frozen `Rule`s in a layered `RuleSet` (what a rule is, the
vocabulary and the model, is `forensics.rulemodel`).

The rule is data, the engine (`forensics/match.py`) is code. A pack file is read with PyYAML's safe
composer (node API, so every error names `pack.yaml:line`) and validated strictly: an unknown key, a bad
pattern, an unknown kind or cast, a rule without both a matching and a near-miss example are errors, and
all errors of a file are reported in one pass (`RulePackError`).

Layers: the built-in packs (`<repo>/rules/*.yaml`), then each directory of `FORENSICS_RULES`
(os.pathsep-separated), then each `--rules DIR`. A later layer's rule replaces an earlier rule of the same
id (and a later lookup table one of the same name); two rules with one id inside one layer are an error.

Pack file (see `rules/systemd.yaml` for a full example):

    pack: systemd                    # name (defaults to the file stem)
    version: '2025.05'               # optional; reports cite it with the file's sha256 digest
    description: ...
    kinds: {my_kind: {role: cause, description: ...}}    # optional: kinds beyond event-kinds.md
    lookups: {xid: {79: "GPU has fallen off the bus"}}   # optional: tables for `derive: lookup:`
    rules:
      - id: systemd.main_killed      # unique
        kind: service_killed         # a kind of KINDS (event-kinds.md) or of the pack's `kinds:`
        severity: error              # critical | error | warning | info
        role: symptom                # cause | symptom | context
        applies: {formats: [journal*], idents: [systemd], units: ['*.service'], ranks: ['*TP0*']}
        pattern: '(?m)^(?P<unit>[^\\s:]+): Main process exited, code=killed, status=(?P<status>\\d+)/(?P<signal>\\w+)'
        literals: [...]              # optional: the prefilter literals (derived from the pattern if absent)
        ignore_case: false           # optional: prefilter case-insensitively (use `(?i)` in the pattern too)
        engine: auto                 # optional: auto | polars | regex (look-around needs `regex`)
        exclude: '...'               # optional: a record whose message matches this is skipped
        casts: {status: int}         # int float str kb bytes duration duration_ms flags signal sm_arch ...
        derive:                      # optional: computed fields, applied in order, never overwrite
          - {field: constraint, from: [constraint_name], lookup: oom_constraint}
          - {field: cgroup, from: [oom_memcg, task_memcg]}
          - {field: unit, from: [cgroup], cast: cgroup_unit}
          - {field: signal, value: KILL}           # a constant; with `from:` only when a source is set
        context:                     # optional: extra lines of the same event in nearby records
          - {name: trigger, pattern: '...', direction: before, lines: 5000, seconds: 30, same: [pid]}
        title: '{unit}: main process killed by SIG{signal}'
        explain: what the line means and why it matters
        next_steps: ['journalctl -u {unit} --since "{since}" --until "{until}"']
        references: ['systemd/systemd src/core/unit.c unit_log_process_exit() (v256)']
        versions: ['v249+: ...']     # where the wording drifted, which versions this pattern matches
        examples:
          match:
            - line: 'May 25 20:17:19 host systemd[1]: x.service: Main process exited, code=killed, status=9/KILL'
              fields: {unit: x.service, signal: KILL, status: 9}
          near_miss:
            - 'May 25 20:17:19 host systemd[1]: x.service: Main process exited, code=exited, status=1/FAILURE'
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import regex
import yaml

from .cachefiles import (code_digest, file_digest, generation, keep_pickled, pickle_path, prune, read_pickled,
                         write_atomic)
from .literals import MIN_LITERAL, derive_literals
from .rulemodel import (
    CAST_NAMES,
    KINDS,
    NUMERIC_CASTS,
    STANDARD_PLACEHOLDERS,
    Applies,
    Context,
    Derive,
    Direction,
    Engine,
    Example,
    Lookup,
    Role,
    Rule,
    RulePack,
    RuleSet,
    Severity,
    group_names,
    lookup_key,
    placeholders,
    polars_compiles,
    size_fields,
    split_flags,
    wrap,
)
from .yamlread import Location, PackError, construct

BUILTIN_DIR = Path(__file__).resolve().parent.parent / "rules"
ENV_VAR = "FORENSICS_RULES"


PACK_KEYS = ("pack", "version", "description", "kinds", "lookups", "rules")
RULE_KEYS = ("id", "kind", "severity", "role", "applies", "pattern", "literals", "ignore_case", "engine", "exclude",
             "casts", "derive", "context", "title", "explain", "next_steps", "references", "versions", "examples")
RULE_REQUIRED = ("id", "kind", "severity", "role", "pattern", "title", "explain", "examples")
APPLIES_KEYS = ("formats", "idents", "units", "ranks")
DERIVE_KEYS = ("field", "from", "lookup", "cast", "value")
CONTEXT_KEYS = ("name", "pattern", "direction", "lines", "seconds", "same", "literals", "casts")
CONTEXT_SAME = ("pid", "unit", "ident", "rank", "boot_id")
EXAMPLE_KEYS = ("line", "fields", "format", "note")
EXAMPLES_KEYS = ("match", "near_miss")
KIND_KEYS = ("role", "description")

# libyaml's safe loader when PyYAML has it (same nodes and marks, several times faster), else the Python one
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


# ----------------------------------------------------------------------------------------------------------
# errors


class RulePackError(PackError):
    """One or more problems in rule pack files: `errors` is a list of (path, line, message)."""


class _Errors:
    def __init__(self, path: str):
        self.path = path
        self.items: list[tuple[str, int, str]] = []

    def add(self, node: yaml.Node | int, msg: str) -> None:
        line = node if isinstance(node, int) else node.start_mark.line + 1
        self.items.append((self.path, line, msg))


# ----------------------------------------------------------------------------------------------------------
# the model


# ----------------------------------------------------------------------------------------------------------
# templates


# ----------------------------------------------------------------------------------------------------------
# patterns


# ----------------------------------------------------------------------------------------------------------
# loading: YAML nodes -> model, collecting every error of a file


class _Reader:
    """Walks the composed YAML node tree of one file, converting values and collecting errors."""

    def __init__(self, path: str, text: str, known_kinds: Mapping[str, Role]):
        self.path = path
        self.err = _Errors(path)
        self.kinds = dict(known_kinds)
        self.loader = _SAFE_LOADER(text)
        self.digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
        self.key_line: dict[int, int] = {}     # id(value node) -> line of its key

    # -- primitives
    def loc(self, node: yaml.Node) -> Location:
        return Location(self.path, node.start_mark.line + 1)

    def value(self, node: yaml.Node) -> Any:
        return construct(self.loader, node, self.err.add)

    def mapping(self, node: yaml.Node, what: str, allowed: Sequence[str] | None = None,
                owner: str = "") -> dict[str, yaml.Node] | None:
        if not isinstance(node, yaml.MappingNode):
            self.err.add(node, f"{what} must be a mapping")
            return None
        out: dict[str, yaml.Node] = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                self.err.add(k, f"{what}: keys must be plain names")
                continue
            key = str(self.value(k))
            if key in out:
                self.err.add(k, f"duplicate key '{key}' in {what}{owner}")
                continue
            if allowed is not None and key not in allowed:
                hint = difflib.get_close_matches(key, allowed, n=1)
                fix = f" (did you mean '{hint[0]}'?)" if hint else f" (allowed: {', '.join(allowed)})"
                where = (owner.strip()[3:] if what == "a rule" else f"{what} of {owner.strip()[3:]}") if owner else what
                self.err.add(k, f"unknown key '{key}' in {where}{fix}")
                continue
            out[key] = v
            self.key_line[id(v)] = k.start_mark.line + 1
        return out

    def string(self, node: yaml.Node, what: str, allow_empty: bool = False) -> str | None:
        if not isinstance(node, yaml.ScalarNode):
            self.err.add(node, f"{what} must be a string")
            return None
        v = self.value(node)
        if v is None or isinstance(v, (dict, list)):
            self.err.add(node, f"{what} must be a string")
            return None
        s = str(v) if not isinstance(v, bool) else ("true" if v else "false")
        if not s.strip() and not allow_empty:
            self.err.add(node, f"{what} must not be empty")
            return None
        return s

    def strings(self, node: yaml.Node, what: str) -> tuple[str, ...]:
        if isinstance(node, yaml.ScalarNode):
            s = self.string(node, what)
            return (s,) if s is not None else ()
        if not isinstance(node, yaml.SequenceNode):
            self.err.add(node, f"{what} must be a string or a list of strings")
            return ()
        out = []
        for item in node.value:
            s = self.string(item, f"an item of {what}")
            if s is not None:
                out.append(s)
        return tuple(out)

    def number(self, node: yaml.Node, what: str, integer: bool = False) -> float | int | None:
        v = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)) or v < 0:
            self.err.add(node, f"{what} must be a non-negative {'integer' if integer else 'number'}")
            return None
        return v

    def boolean(self, node: yaml.Node, what: str) -> bool:
        v = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(v, bool):
            self.err.add(node, f"{what} must be true or false")
            return False
        return v

    def enum(self, node: yaml.Node, what: str, enum: type[Enum]) -> Any:
        s = self.string(node, what)
        if s is None:
            return None
        try:
            return enum(s)
        except ValueError:
            choices = [e.value for e in enum]
            hint = difflib.get_close_matches(s, choices, n=1)
            fix = f" (did you mean '{hint[0]}'?)" if hint else ""
            self.err.add(node, f"{what} '{s}' is not one of {', '.join(choices)}{fix}")
            return None

    # -- patterns
    def pattern(self, node: yaml.Node, what: str, engine: Engine = Engine.AUTO) -> tuple[str, Engine] | None:
        p = self.string(node, what)
        if p is None:
            return None
        flags, _ = split_flags(p)
        bad_flags = set(flags[2:-1]) - set("ims")
        if bad_flags:
            self.err.add(node, f"{what}: inline flags {''.join(sorted(bad_flags))!r} are not supported (use i, m, s)")
            return None
        try:
            rx = regex.compile(p)
        except regex.error as e:
            self.err.add(node, f"bad {what}: {e}")
            return None
        for g in rx.groupindex:
            if g == "_m" or g.startswith("__"):
                self.err.add(node, f"{what}: group name '{g}' is reserved (`_m` and names starting with `__`)")
        pol = polars_compiles(wrap(p))
        if engine is Engine.POLARS and pol:
            self.err.add(node, f"{what} does not compile in polars' regex engine ({pol}); use engine: regex")
            return None
        resolved = engine if engine is not Engine.AUTO else (Engine.REGEX if pol else Engine.POLARS)
        return p, resolved

    def literals_for(self, node: yaml.Node, pattern: str, declared: tuple[str, ...] | None,
                     ignore_case: bool | None, what: str) -> tuple[tuple[str, ...], bool]:
        if declared is not None:
            short = [x for x in declared if len(x) < 3]
            if short:
                self.err.add(node, f"{what}: literals must be at least 3 characters ({short[0]!r})")
            ic = bool(ignore_case)
            lits = tuple(x.lower() for x in declared) if ic else declared
            return lits, ic
        got = derive_literals(pattern)
        if got is None:
            self.err.add(node, f"{what} has no required literal of {MIN_LITERAL}+ characters to prefilter on; "
                               f"declare `literals:` (text one of which every match contains)")
            return (), False
        lits, ic = got
        return lits, (ic if ignore_case is None else ignore_case or ic)

    # -- pieces of a rule
    def applies(self, node: yaml.Node, owner: str) -> Applies:
        m = self.mapping(node, "applies", APPLIES_KEYS, owner)
        if m is None:
            return Applies()
        return Applies(**{k: self.strings(v, f"applies.{k}") for k, v in m.items()})

    def casts(self, node: yaml.Node, owner: str, fields: Sequence[str]) -> tuple[tuple[str, str], ...]:
        m = self.mapping(node, "casts", None, owner)
        if m is None:
            return ()
        out = []
        for name, vnode in m.items():
            c = self.string(vnode, f"cast of '{name}'")
            if c is None:
                continue
            if c not in CAST_NAMES:
                hint = difflib.get_close_matches(c, CAST_NAMES, n=1)
                fix = f" (did you mean '{hint[0]}'?)" if hint else f" (known: {', '.join(CAST_NAMES)})"
                self.err.add(vnode, f"unknown cast '{c}' for '{name}'{owner}{fix}")
                continue
            if name not in fields:
                hint = difflib.get_close_matches(name, fields, n=1)
                fix = f" (did you mean '{hint[0]}'?)" if hint else ""
                self.err.add(vnode, f"cast of '{name}'{owner}: the pattern has no group '{name}'{fix}")
                continue
            out.append((name, c))
        return tuple(out)

    def derive(self, node: yaml.Node, owner: str, known: list[str], lookups: set[str]) -> tuple[Derive, ...]:
        if not isinstance(node, yaml.SequenceNode):
            self.err.add(node, "derive must be a list")
            return ()
        out = []
        for item in node.value:
            m = self.mapping(item, "a derive entry", DERIVE_KEYS, owner)
            if m is None:
                continue
            if "field" not in m:
                self.err.add(item, f"derive entry{owner} needs `field`")
                continue
            name = self.string(m["field"], "derive.field")
            if name is None:
                continue
            if "from" not in m and "value" not in m:
                self.err.add(item, f"derive '{name}'{owner} needs `from` (source fields) or `value` (a constant)")
                continue
            sources = self.strings(m["from"], "derive.from") if "from" in m else ()
            for s in sources:
                if s not in known:
                    hint = difflib.get_close_matches(s, known, n=1)
                    fix = f" (did you mean '{hint[0]}'?)" if hint else ""
                    self.err.add(m["from"], f"derive '{name}'{owner}: unknown field '{s}'{fix}")
            lookup = self.string(m["lookup"], "derive.lookup") if "lookup" in m else None
            if lookup is not None and lookups is not None:
                lookups.add(lookup)
            cast = self.string(m["cast"], "derive.cast") if "cast" in m else None
            if cast is not None and cast not in CAST_NAMES:
                self.err.add(m["cast"], f"unknown cast '{cast}' in derive '{name}'{owner}")
                cast = None
            value = self.value(m["value"]) if "value" in m else None
            out.append(Derive(field=name, sources=sources, lookup=lookup, cast=cast, value=value,
                              location=self.loc(item)))
            known.append(name)
        return tuple(out)

    def contexts(self, node: yaml.Node, owner: str) -> tuple[Context, ...]:
        if not isinstance(node, yaml.SequenceNode):
            self.err.add(node, "context must be a list")
            return ()
        out = []
        names: set[str] = set()
        for item in node.value:
            m = self.mapping(item, "a context entry", CONTEXT_KEYS, owner)
            if m is None:
                continue
            missing = [k for k in ("name", "pattern", "direction") if k not in m]
            if missing:
                self.err.add(item, f"context entry{owner} needs {', '.join(missing)}")
                continue
            name = self.string(m["name"], "context.name")
            if name in names:
                self.err.add(m["name"], f"duplicate context name '{name}'{owner}")
            names.add(name or "")
            pat = self.pattern(m["pattern"], f"context pattern '{name}'", Engine.POLARS)
            direction = self.enum(m["direction"], "context.direction", Direction)
            lines = self.number(m["lines"], "context.lines", integer=True) if "lines" in m else 50
            seconds = self.number(m["seconds"], "context.seconds") if "seconds" in m else None
            same = self.strings(m["same"], "context.same") if "same" in m else ()
            for s in same:
                if s not in CONTEXT_SAME:
                    self.err.add(m["same"], f"context.same: '{s}' is not one of {', '.join(CONTEXT_SAME)} "
                                            f"(source and host are always the same)")
            if pat is None or direction is None or name is None:
                continue
            declared = self.strings(m["literals"], "context.literals") if "literals" in m else None
            lits, ic = self.literals_for(m["pattern"], pat[0], declared, None, f"context pattern '{name}'")
            groups = group_names(pat[0])
            casts = self.casts(m["casts"], owner, groups) if "casts" in m else ()
            out.append(Context(name=name, pattern=pat[0], direction=direction, lines=int(lines or 0),
                               seconds=None if seconds is None else float(seconds), same=same, literals=lits,
                               ignore_case=ic, casts=casts, groups=groups, location=self.loc(item)))
        return tuple(out)

    def examples(self, node: yaml.Node, owner: str) -> tuple[tuple[Example, ...], tuple[Example, ...]]:
        m = self.mapping(node, "examples", EXAMPLES_KEYS, owner)
        if m is None:
            return (), ()
        got: dict[str, tuple[Example, ...]] = {}
        for key in EXAMPLES_KEYS:
            if key not in m:
                self.err.add(self.key_line.get(id(node), node),
                             f"{owner.strip()[3:] or 'rule (no id)'} needs at least one `examples.{key}` example "
                                   f"({'a real line it must match' if key == 'match' else 'a close real line it must not match'})")
                got[key] = ()
                continue
            seq = m[key]
            if not isinstance(seq, yaml.SequenceNode) or not seq.value:
                self.err.add(seq, f"examples.{key}{owner} must be a non-empty list")
                got[key] = ()
                continue
            items = []
            for item in seq.value:
                ex = self.example(item, owner, key == "match")
                if ex is not None:
                    items.append(ex)
            got[key] = tuple(items)
        return got["match"], got["near_miss"]

    def example(self, node: yaml.Node, owner: str, with_fields: bool) -> Example | None:
        if isinstance(node, yaml.ScalarNode):
            text = self.string(node, "an example")
            return Example(text=text.rstrip("\n"), location=self.loc(node)) if text is not None else None
        m = self.mapping(node, "an example", EXAMPLE_KEYS, owner)
        if m is None:
            return None
        if "line" not in m:
            self.err.add(node, f"example{owner} needs `line` (the full log line or lines)")
            return None
        text = self.string(m["line"], "example line")
        if text is None:
            return None
        fields: tuple[tuple[str, Any], ...] = ()
        if "fields" in m:
            if not with_fields:
                self.err.add(m["fields"], f"a near-miss example{owner} yields no fields")
            fm = self.mapping(m["fields"], "example fields", None, owner)
            if fm is not None:
                fields = tuple((k, self.value(v)) for k, v in fm.items())
        fmt = self.string(m["format"], "example format") if "format" in m else None
        note = self.string(m["note"], "example note") if "note" in m else ""
        return Example(text=text.rstrip("\n"), location=self.loc(m["line"]), fields=fields, format=fmt,
                       note=note or "")

    def template(self, node: yaml.Node, what: str, known: Sequence[str], owner: str) -> str | None:
        s = self.string(node, what)
        if s is None:
            return None
        try:
            names = placeholders(s)
        except ValueError as e:
            self.err.add(node, f"{what}{owner}: {e}")
            return s
        for n in names:
            if n not in known and n not in STANDARD_PLACEHOLDERS:
                hint = difflib.get_close_matches(n, list(known) + list(STANDARD_PLACEHOLDERS), n=1)
                fix = f" (did you mean '{hint[0]}'?)" if hint else ""
                self.err.add(node, f"{what}{owner}: unknown placeholder {{{n}}}{fix}")
        return s

    # -- a rule
    def rule(self, node: yaml.Node, pack: str, lookups_used: dict[str, Location]) -> Rule | None:
        rid = None
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == "id":
                    rid = self.string(v, "rule id")
        owner = f" in rule '{rid}'" if rid else ""
        m = self.mapping(node, "a rule", RULE_KEYS, owner)
        if m is None:
            return None
        if rid is not None and not _ID.match(rid):
            self.err.add(m["id"], f"rule id '{rid}' must be lower case letters, digits, '.', '_' or '-'")
        missing = [k for k in RULE_REQUIRED if k not in m]
        if missing:
            self.err.add(node, f"rule {repr(rid) if rid else '(no id)'} is missing {', '.join(missing)}")
        kind = None
        if "kind" in m:
            kind = self.string(m["kind"], "kind")
            if kind is not None and kind not in self.kinds:
                hint = difflib.get_close_matches(kind, list(self.kinds), n=1)
                fix = f" (did you mean '{hint[0]}'?)" if hint else " (declare it under the pack's `kinds:`)"
                self.err.add(m["kind"], f"unknown kind '{kind}'{owner}{fix}")
        severity = self.enum(m["severity"], "severity", Severity) if "severity" in m else None
        role = self.enum(m["role"], "role", Role) if "role" in m else None
        engine = self.enum(m["engine"], "engine", Engine) if "engine" in m else Engine.AUTO
        pat = self.pattern(m["pattern"], "pattern", engine or Engine.AUTO) if "pattern" in m else None
        groups = group_names(pat[0]) if pat else ()
        ignore_case = self.boolean(m["ignore_case"], "ignore_case") if "ignore_case" in m else None
        lits: tuple[str, ...] = ()
        ic = False
        if pat:
            declared = self.strings(m["literals"], "literals") if "literals" in m else None
            lits, ic = self.literals_for(m["pattern"], pat[0], declared, ignore_case, "pattern")
        exclude = None
        if "exclude" in m:
            ex = self.pattern(m["exclude"], "exclude pattern", Engine.POLARS)
            exclude = ex[0] if ex else None
        applies = self.applies(m["applies"], owner) if "applies" in m else Applies()
        casts = self.casts(m["casts"], owner, groups) if "casts" in m else ()
        context = self.contexts(m["context"], owner) if "context" in m else ()
        known = [g for g in groups if g != "_m"]
        for c in context:
            known += [g for g in c.groups if g not in known]
        lookups: set[str] = set()
        derive = self.derive(m["derive"], owner, known, lookups) if "derive" in m else ()
        for name in lookups:
            lookups_used.setdefault(name, self.loc(m["derive"]))
        title = self.template(m["title"], "title", known, owner) if "title" in m else None
        if title is not None and "\n" in title.strip():
            self.err.add(m["title"], f"title{owner} must be one line")
        explain = self.template(m["explain"], "explain", known, owner) if "explain" in m else None
        steps = self.strings(m["next_steps"], "next_steps") if "next_steps" in m else ()
        if "next_steps" in m:
            for s in steps:
                try:
                    bad = [n for n in placeholders(s) if n not in known and n not in STANDARD_PLACEHOLDERS]
                except ValueError as e:
                    self.err.add(m["next_steps"], f"next_steps{owner}: {e}")
                    continue
                for n in bad:
                    self.err.add(m["next_steps"], f"next_steps{owner}: unknown placeholder {{{n}}}")
        numeric = {n for n, c in casts if c in NUMERIC_CASTS} | {d.field for d in derive if d.cast in NUMERIC_CASTS}
        numeric |= {n for c in context for n, cc in c.casts if cc in NUMERIC_CASTS}
        for key, texts in (("title", [title]), ("explain", [explain]), ("next_steps", list(steps))):
            for name in sorted({n for t in texts if t for n in size_fields(t)} - numeric):
                self.err.add(m[key], f"{key}{owner}: {{{name}:kB}} or {{{name}:B}} prints a size, but '{name}' is "
                                     f"not cast to a number (casts: {{{name}: int}}, or kb or bytes)")
        refs = self.strings(m["references"], "references") if "references" in m else ()
        versions = self.strings(m["versions"], "versions") if "versions" in m else ()
        examples, near = self.examples(m["examples"], owner) if "examples" in m else ((), ())
        for ex in examples:
            for k, _ in ex.fields:
                if k not in known and k not in ("unit", "pid", "host"):
                    self.err.add(ex.location.line, f"example{owner} expects field '{k}' the rule cannot produce")
        if None in (rid, kind, severity, role, pat, title, explain) or kind not in self.kinds:
            return None
        assert pat is not None and rid is not None and kind is not None
        return Rule(id=rid, kind=kind, severity=severity, role=role, pattern=pat[0], title=title.strip(),
                    explain=" ".join(explain.split()), pack=pack, location=self.loc(node), applies=applies,
                    engine=pat[1], literals=lits, ignore_case=ic, exclude=exclude, casts=casts, derive=derive,
                    context=context, next_steps=steps, references=refs, versions=versions, examples=examples,
                    near_misses=near, groups=groups)

    # -- a file
    def pack(self) -> RulePack | None:
        try:
            root = self.loader.get_single_node()
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
            self.err.add((mark.line + 1) if mark else 1, f"not valid YAML: {getattr(e, 'problem', e)}")
            return None
        if root is None:
            self.err.add(1, "empty rule pack")
            return None
        top = self.mapping(root, "a rule pack", PACK_KEYS)
        if top is None:
            return None
        name = self.string(top["pack"], "pack") if "pack" in top else Path(self.path).stem
        version = self.string(top["version"], "version") if "version" in top else ""
        desc = self.string(top["description"], "description") if "description" in top else ""
        kinds: list[tuple[str, Role]] = []
        if "kinds" in top:
            km = self.mapping(top["kinds"], "kinds")
            for kname, knode in (km or {}).items():
                spec = self.mapping(knode, f"kind '{kname}'", KIND_KEYS)
                if spec is None:
                    continue
                if "role" not in spec:
                    self.err.add(knode, f"kind '{kname}' needs a default `role`")
                    continue
                r = self.enum(spec["role"], "role", Role)
                if r is not None:
                    if kname in self.kinds and self.kinds[kname] is not r:
                        self.err.add(knode, f"kind '{kname}' already exists with role {self.kinds[kname].value}")
                    kinds.append((kname, r))
                    self.kinds[kname] = r
        lookups: list[Lookup] = []
        if "lookups" in top:
            lm = self.mapping(top["lookups"], "lookups")
            for lname, lnode in (lm or {}).items():
                tm = self.mapping(lnode, f"lookup '{lname}'")
                if tm is None:
                    continue
                table = []
                for k, v in tm.items():
                    s = self.string(v, f"lookup '{lname}' value")
                    if s is not None:
                        table.append((lookup_key(k), " ".join(s.split())))
                lookups.append(Lookup(lname, tuple(table), self.loc(lnode)))
        rules: list[Rule] = []
        used: dict[str, Location] = {}
        if "rules" not in top:
            self.err.add(root, "a rule pack needs `rules:`")
        elif not isinstance(top["rules"], yaml.SequenceNode):
            self.err.add(top["rules"], "`rules` must be a list")
        else:
            seen: dict[str, int] = {}
            for rnode in top["rules"].value:
                r = self.rule(rnode, name or "", used)
                if r is None:
                    continue
                if r.id in seen:
                    self.err.add(rnode, f"duplicate rule id '{r.id}' (first at line {seen[r.id]})")
                    continue
                seen[r.id] = r.location.line
                rules.append(r)
        self._used_lookups = used
        return RulePack(name=name or "", path=self.path, description=desc or "", rules=tuple(rules),
                        lookups=tuple(lookups), kinds=tuple(kinds), version=version or "", digest=self.digest)


def load_pack(path: Path | str, known_kinds: Mapping[str, Role] = KINDS,
              known_lookups: Iterable[str] = ()) -> RulePack:
    """One pack file, validated on its own (lookups must come from this file or `known_lookups`)."""
    pack, errors, used = _read_pack(Path(path), known_kinds)
    names = {t.name for t in pack.lookups} | set(known_lookups) if pack else set(known_lookups)
    for lname, loc in used.items():
        if lname not in names:
            errors.append((loc.path, loc.line, f"unknown lookup table '{lname}'"))
    if errors:
        raise RulePackError(errors)
    assert pack is not None
    return pack


def display_path(path: Path | str) -> str:
    """A path as shown in messages: relative to the current directory when it lies below it."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(p)


def _read_pack(path: Path, known_kinds: Mapping[str, Role]) -> tuple[RulePack | None, list, dict]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return None, [(display_path(path), 1, f"cannot read: {e}")], {}
    reader = _Reader(display_path(path), text, known_kinds)
    pack = reader.pack()
    return pack, sorted(reader.err.items, key=lambda e: e[1]), getattr(reader, "_used_lookups", {})


def pack_files(directory: Path) -> list[Path]:
    return sorted(p for p in Path(directory).glob("*.yaml") if p.is_file())


def _load_layer(files: Sequence[Path], kinds: dict[str, Role]) -> tuple[list[RulePack], list, dict]:
    packs, errors, used = [], [], {}
    for f in files:
        pack, errs, u = _read_pack(f, kinds)
        errors.extend(errs)
        used.update(u)
        if pack is not None:
            kinds.update(dict(pack.kinds))
            packs.append(pack)
    seen: dict[str, Rule] = {}
    for p in packs:
        for r in p.rules:
            if r.id in seen:
                first = seen[r.id].location
                errors.append((r.location.path, r.location.line,
                               f"duplicate rule id '{r.id}' in one layer (also at {first})"))
            else:
                seen[r.id] = r
    return packs, errors, used


def env_dirs(env: Mapping[str, str] | None = None) -> list[Path]:
    raw = (os.environ if env is None else env).get(ENV_VAR, "")
    return [Path(p) for p in raw.split(os.pathsep) if p.strip()]


def load_rules(extra_dirs: Sequence[Path | str] = (), *, builtin: bool = True,
               env: Mapping[str, str] | None = None, keep: bool = False) -> RuleSet:
    """The built-in packs, then the `FORENSICS_RULES` directories, then `extra_dirs` (e.g. `--rules`), each a
    layer whose rules replace earlier ones of the same id. Raises RulePackError listing every problem. With
    `keep`, the rule set loaded (checked, every pattern compiled) is kept between runs, and read back while the
    same files are unchanged (`_kept_set`): loading takes 0.3 s of an ingest, reading it back 20 ms."""
    layers, errors, key = _layers(extra_dirs, builtin, env)
    if not errors and key in _LOADED:
        return _LOADED[key]
    path = _set_path(key) if keep and not errors else None
    rules = _kept_set(path) if path is not None else None
    if rules is None:
        rules = _load_layers(layers, errors)
        if path is not None:
            keep_pickled(rules, path, SETS_KEPT)
    _LOADED.clear()  # one rule set kept: the last one asked for
    _LOADED[key] = rules
    return rules


_LOADED: dict[tuple, RuleSet] = {}
SETS_KEPT = 8   # the newest rule sets kept in the private cache directory (one per set of packs used lately)
# what reading and checking the packs depends on besides their files: this module and those it reads them with
_SET_CODE = code_digest(__file__, *(str(Path(__file__).with_name(m))
                                     for m in ("rulemodel.py", "literals.py", "asides.py", "sizes.py", "yamlread.py")))


def _set_path(key: tuple) -> Path | None:
    """Where the rule set of these pack files (`key`: their paths and digests) is kept, in the private cache
    directory (None: there is none). Named also after the code that reads them, the versions of what checks the
    patterns and of Python (pickles), and the working directory (rules locate themselves relative to it)."""
    import polars as pl

    return pickle_path("ruleset", [_SET_CODE, key, os.getcwd(), pl.__version__, regex.__version__, yaml.__version__,
                                   sys.version])


def _kept_set(path: Path) -> RuleSet | None:
    """The rule set kept at `path` (by `load_rules`), or None."""
    rules = read_pickled(path)
    return rules if isinstance(rules, RuleSet) else None


def _layers(extra_dirs: Sequence[Path | str], builtin: bool, env: Mapping[str, str] | None
            ) -> tuple[list[list[Path]], list[tuple[str, int, str]], tuple]:
    """The pack files of each layer, the directories that do not exist, and what identifies them all (each
    file's path and digest): the same files, unchanged, give the same (frozen) rule set."""
    layers: list[list[Path]] = []
    errors: list[tuple[str, int, str]] = []
    if builtin:
        layers.append(pack_files(BUILTIN_DIR))
    for d in [*env_dirs(env), *map(Path, extra_dirs)]:
        if not d.is_dir():
            errors.append((str(d), 0, "rules directory does not exist"))
            continue
        layers.append(pack_files(d))
    key = (tuple(tuple((str(f), *_stamp(f)) for f in files) for files in layers), tuple(errors))
    return layers, errors, key


@dataclass(frozen=True)
class RuleTexts:
    """What a report reads of the packs in force (built-ins plus FORENSICS_RULES): each rule's `explain` and
    `next_steps`, and each pack's version. Loading the packs compiles every pattern (a quarter of a second,
    holding the interpreter), so the texts are kept as JSON in a cache directory, named after the packs' files
    and digests."""

    texts: Mapping[str, tuple[str, tuple[str, ...]]]
    versions: tuple[tuple[str, str], ...]

    def get(self, rule_id: str) -> tuple[str, tuple[str, ...]] | None:
        return self.texts.get(rule_id)


TEXTS_KEPT = 4                 # the newest rule-text files kept in a cache directory
# how the packs are read, and into what, names the texts too
_CODE = code_digest(__file__, str(Path(__file__).with_name("rulemodel.py")))


def rule_texts(cache_dir: Path | None = None, env: Mapping[str, str] | None = None) -> RuleTexts:
    """The RuleTexts of the packs in force: read from `cache_dir` when kept there, else from the packs
    (kept when `cache_dir` is writable). Raises RulePackError as load_rules does."""
    _, errors, key = _layers((), True, env)
    path = _texts_path(cache_dir, key) if cache_dir is not None and not errors else None
    if path is not None:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return RuleTexts(texts={k: (e, tuple(n)) for k, (e, n) in raw["texts"].items()},
                             versions=tuple((a, b) for a, b in raw["versions"]))
        except (OSError, ValueError, KeyError, TypeError):  # not kept yet, or being replaced
            pass
    out = _texts_of(load_rules(env=env))
    if path is not None:
        _keep_texts(out, path)
    return out


def keep_loaded_texts(cache_dir: Path, env: Mapping[str, str] | None = None) -> bool:
    """Keep in `cache_dir` the RuleTexts of the packs in force (as `rule_texts` would) when this process has them
    loaded already (ingest does, to match), and they are not kept yet: the first report after an ingest then
    does not load the packs again. False when nothing was written (not loaded: loading them here would cost what
    it saves; already kept; a read-only store)."""
    _, errors, key = _layers((), True, env)
    rules = _LOADED.get(key)
    if errors or rules is None:
        return False
    path = _texts_path(cache_dir, key)
    return not path.is_file() and _keep_texts(_texts_of(rules), path)


def _texts_path(cache_dir: Path, key: tuple) -> Path:
    digest = hashlib.sha256(json.dumps([_CODE, key], default=str).encode()).hexdigest()[:32]
    return cache_dir / f"rules~{digest}.json"


def _texts_of(rules: RuleSet) -> RuleTexts:
    return RuleTexts(texts={r.id: (r.explain, tuple(r.next_steps)) for r in rules.rules},
                     versions=rules.pack_versions())


def _keep_texts(t: RuleTexts, path: Path) -> bool:
    text = json.dumps({"texts": {k: [e, list(n)] for k, (e, n) in sorted(t.texts.items())},
                       "versions": [list(v) for v in t.versions]}, ensure_ascii=False)
    if not write_atomic([(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))]):
        return False
    prune(path.parent, "rules", generation(path), TEXTS_KEPT)
    return True


def _stamp(f: Path) -> tuple[str]:
    """What identifies a pack file's content (its digest: cheap for files of a few kB, and exact)."""
    try:
        return (file_digest(f),)
    except OSError:
        return ("",)


def _load_layers(layers: list[list[Path]], errors: list[tuple[str, int, str]]) -> RuleSet:
    kinds = dict(KINDS)
    by_id: dict[str, Rule] = {}
    tables: dict[str, Lookup] = {}
    packs: list[RulePack] = []
    used: dict[str, Location] = {}
    for files in layers:
        lp, errs, u = _load_layer(files, kinds)
        errors.extend(errs)
        used.update(u)
        for p in lp:
            packs.append(p)
            for t in p.lookups:
                tables[t.name] = t
            for r in p.rules:
                by_id.pop(r.id, None)      # a later layer's rule takes the place (and order) of the new one
                by_id[r.id] = r
    for lname, loc in used.items():
        if lname not in tables:
            errors.append((loc.path, loc.line, f"unknown lookup table '{lname}'"))
    if errors:
        raise RulePackError(errors)
    return RuleSet(rules=tuple(by_id.values()), lookups=tuple(tables.values()), packs=tuple(packs),
                   kinds=tuple(kinds.items()))


def ruleset_of(packs: Sequence[RulePack]) -> RuleSet:
    """A RuleSet from already loaded packs (one layer; used by tests and `rules check`)."""
    kinds = dict(KINDS)
    for p in packs:
        kinds.update(dict(p.kinds))
    return RuleSet(rules=tuple(r for p in packs for r in p.rules),
                   lookups=tuple(t for p in packs for t in p.lookups), packs=tuple(packs),
                   kinds=tuple(kinds.items()))
