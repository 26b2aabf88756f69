"""The Jinja environments: built-in templates trusted, `--template DIR` templates sandboxed and bounded.

Markdown templates print every `{{ value }}` through `mdsafe.inline` (the environment's `finalize`),
so a template that forgets a filter still cannot turn log text into Markdown; filters that produce
Markdown (`code`, `command`, `step`, `prose`, `fence`, `codes`) return `Md`, which is printed as is. HTML templates
autoescape. Both use `StrictUndefined`: a misspelt variable is an error, not an empty string.
User templates are read from their directory only and run in `sandbox.BoundedSandbox`, within the time and
size limits of `sandbox.Limits` (shared by the environments of one report); `render_template` is the one
way both kinds are rendered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jinja2 import BaseLoader, BytecodeCache, ChoiceLoader, Environment, FileSystemBytecodeCache, FileSystemLoader, \
    StrictUndefined
from jinja2.bccache import Bucket

from forensics.render.mdsafe import Md, bold, code, command, fence, inline, prose, step
from forensics.render.sandbox import BoundedSandbox, ConfinedLoader, Limits, render_bounded

BUILTIN_DIR = Path(__file__).resolve().parent.parent.parent / "report_templates"


def codes(values: Iterable[object], sep: str = ", ") -> Md:
    return Md(sep.join(code(v) for v in values))


def hashes(n: int) -> Md:
    """A heading mark: `hashes(2)` is `##`."""
    return Md("#" * max(1, min(6, int(n))))


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"


def _loader(user_dir: Path | None) -> BaseLoader:
    builtin = FileSystemLoader(str(BUILTIN_DIR))
    return ChoiceLoader([ConfinedLoader(user_dir), builtin]) if user_dir else builtin


_BYTECODE: list[BytecodeCache | None] = []


class _QuietCache(FileSystemBytecodeCache):
    """Jinja's file cache of compiled templates, where a file that cannot be read or written means compiling."""

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, ValueError, EOFError):
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def _bytecode_cache() -> BytecodeCache | None:
    """Jinja's cache of compiled templates (in the user's own temporary directory, which Jinja checks is private,
    keyed by each template's source): compiling the built-in templates takes a sixth of a second of every
    report. None when it cannot be made."""
    if not _BYTECODE:
        try:
            _BYTECODE.append(_QuietCache())
        except (OSError, RuntimeError):  # no private temporary directory: compile every time
            _BYTECODE.append(None)
    return _BYTECODE[0]


def _env(user_dir: Path | None, limits: Limits | None, **kw: object) -> Environment:
    opts: dict[str, Any] = dict(loader=_loader(user_dir), undefined=StrictUndefined, trim_blocks=True,
                                lstrip_blocks=True, keep_trailing_newline=True, **kw)
    env = (BoundedSandbox(limits=limits, **opts) if user_dir is not None
           else Environment(bytecode_cache=_bytecode_cache(), **opts))
    env.globals["plural"] = plural
    env.globals["hashes"] = hashes
    return env


def markdown_env(user_dir: Path | None = None, limits: Limits | None = None) -> Environment:
    env = _env(user_dir, limits, autoescape=False, finalize=inline)
    env.filters.update(code=code, command=command, step=step, prose=prose, fence=fence, md=inline, codes=codes,
                       bold=bold)
    return env


def html_env(user_dir: Path | None = None, limits: Limits | None = None) -> Environment:
    return _env(user_dir, limits, autoescape=True)


def render_template(env: Environment, name: str, **context: Any) -> str:
    """Template `name` of `env` with `context`: within the limits when `env` holds user templates."""
    if isinstance(env, BoundedSandbox):
        return render_bounded(env, name, context)
    return env.get_template(name).render(**context)
