"""A YAML node's value, as the rule, correlation and knowledge files' readers take it: by the safe loader, and a
value the loader cannot construct (an unquoted `!CUDA error: ` reads as a tag) an error at its line, not a crash."""

from __future__ import annotations

from collections.abc import Callable
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
