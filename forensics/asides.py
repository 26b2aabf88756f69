"""Parenthesised asides of a template: left out when they name a value that is missing.

`a memory cgroup limit ({cgroup})` with no cgroup reads `a memory cgroup limit`, and an event title
`CUDA out of memory: tried to allocate {tried} (GPU {gpu}: {free} free of {total})` without the GPU's figures
reads `CUDA out of memory: tried to allocate 5.24 GiB`. Used by correlations' prose (`statements.fill_prose`) and
by rules' titles (`rulemodel.render_title`, and its polars twin `match._title_expr`).

A title's tail `: {name}` is an aside too (`SGLang Scheduler crashed: {exception}` of a record whose exception line
is not there reads `SGLang Scheduler crashed`, not `...: ?`).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable

ASIDE = re.compile(r" ?\(([^()]*)\)")   # an aside, with the space before it
TAIL = re.compile(r": \{([A-Za-z_][A-Za-z0-9_]*)\}$")   # a title's last words, `: {name}`


def aside_names(text: str) -> list[str]:
    """The placeholders of an aside's text; raises ValueError when it is no template."""
    return [name for _, name, _, _ in string.Formatter().parse(text) if name]


def drop_asides(template: str, missing: Callable[[str], bool],
                names: Callable[[str], list[str]] = aside_names) -> str:
    """`template` without the asides that name a placeholder `missing` says has no value (an aside that is no
    template is kept as written)."""
    def keep(m: re.Match) -> str:
        try:
            used = names(m.group(1))
        except ValueError:
            return m.group(0)
        return "" if any(missing(n) for n in used) else m.group(0)

    return ASIDE.sub(keep, template)


def drop_tail(template: str, missing: Callable[[str], bool]) -> str:
    """`template` without its tail `: {name}` when `missing` says the name has no value, and so on for the tail
    before it (`crashed: {exception}: {message}` with neither reads `crashed`), as the vectorised titles do."""
    m = TAIL.search(template)
    if not m:
        return template
    head = drop_tail(template[:m.start()], missing)
    return head if missing(m.group(1)) else head + template[m.start():]
