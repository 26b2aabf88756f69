"""Statement templates: `{name}` and `{step.field}` placeholders filled from a match's values; a missing value
stays visible as its placeholder, or, in prose, its parenthesised aside is left out."""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any

from .asides import drop_asides
from .sizes import format_value


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
