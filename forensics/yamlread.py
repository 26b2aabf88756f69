"""What the rule, correlation and knowledge files' readers share: a YAML node's value by the safe loader (a value the
loader cannot construct, an unquoted `!CUDA error: ` read as a tag, is an error at its line, not a crash), where a
definition was read (`Location`), and the error that lists every problem of the files read, each at its line
(`PackError`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml


def construct(loader: Any, node: yaml.Node, add: Callable[[yaml.Node, str], None]) -> Any:
    """A YAML node's value by the safe loader. A tag it cannot construct (`!CUDA error: ` left unquoted) is an error
    at the node, naming the fix; the node's text then stands for its value, so the rest of the file is checked."""
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as e:
        tag = getattr(node, "tag", "") or ""
        add(node, f"cannot read the value tagged '{tag}' ({getattr(e, 'problem', None) or e}); a value that starts "
                  "with '!', '&', '*' or '%' must be quoted")
        return node.value if isinstance(node, yaml.ScalarNode) else None


@dataclass(frozen=True)
class Location:
    """Where a definition was read: `path:line`."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


class PackError(Exception):
    """Problems in pack files: `errors` is a list of (path, line, message), all of them at once."""

    def __init__(self, errors: Sequence[tuple[str, int, str]]):
        self.errors = list(errors)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(f"{p}:{n}: {m}" for p, n, m in self.errors)
