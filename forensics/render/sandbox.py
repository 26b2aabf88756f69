"""User templates (`report --template DIR`): confined to their directory, sandboxed, bounded in time and size.

- `ConfinedLoader` reads templates from DIR only: a name with `..` is not found (as in jinja2), and a file whose
  real path (symlinks resolved) leaves DIR is refused with a `SecurityError`, so `link.j2 -> /etc/passwd`
  cannot put a file into the report.
- `BoundedSandbox` is jinja2's `ImmutableSandboxedEnvironment` (no Python internals, no mutation) that also
  refuses the single expressions that would build a huge value at once (`'a' * 10**9`, `2 ** 10**8`, widths
  such as `'%999999999d'`, `'x'.center(10**9)`, `replace`/`join` blow-ups) and, through `render_bounded`,
  stops a render that runs past its time (`Limits.seconds`, shared by every render of one report), grows
  the process by more than `Limits.memory` bytes, or outputs more than `Limits.chars` characters.
- Every failure of a user template comes out as a `jinja2.TemplateError` naming the template file and line
  (`UserTemplateError` for what jinja2 does not raise itself: `OverflowError`, `MemoryError`, a limit), which
  `forensics report` turns into exit code 2.

Built-in templates never go through here: they render unbounded and deterministically.
"""

from __future__ import annotations

import os
import re
import signal
import string
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

from jinja2 import Environment, FileSystemLoader, TemplateError, TemplateNotFound
from jinja2.loaders import split_template_path
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

SECONDS = 2.0               # total render time of one report's user templates (`report --template-seconds`)
CHARS = 32 << 20            # characters one render, or one value built in it, may have
MEMORY = 1 << 30            # bytes the process may grow by while user templates render


class UserTemplateError(TemplateError):
    """A user template failed or hit a limit; `filename` and `lineno` say where (as in TemplateSyntaxError)."""

    def __init__(self, message: str, filename: str | None = None, lineno: int | None = None):
        super().__init__(message)
        self.filename, self.lineno = filename, lineno


class TemplateLimitError(SecurityError):
    """A single expression of a user template would build a value over the size limit."""


@dataclass
class Limits:
    """What the user templates of one report may use; `spent` adds up the time of its renders (mutable)."""

    seconds: float = SECONDS
    chars: int = CHARS
    memory: int = MEMORY
    spent: float = 0.0


# ------------------------------------------------------------------------------------------------------------
# the loader


class ConfinedLoader(FileSystemLoader):
    """A FileSystemLoader for one directory that refuses templates whose real path leaves it."""

    def __init__(self, directory: str | os.PathLike[str]):
        super().__init__(str(directory))
        self.root = os.path.realpath(directory)

    def get_source(self, environment: Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
        pieces = split_template_path(template)          # TemplateNotFound for `..`
        path = os.path.join(self.root, *pieces)
        if not os.path.isfile(path):
            raise TemplateNotFound(template)
        real = os.path.realpath(path)
        if os.path.commonpath([self.root, real]) != self.root:
            raise SecurityError(f"template {template!r} in {self.root} is a link to {real}, outside the template "
                                f"directory; templates are read from that directory only: copy the file into it "
                                f"instead of linking to it")
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with open(fd, encoding=self.encoding) as fh:
            source = fh.read()
        mtime = os.path.getmtime(real)

        def uptodate() -> bool:
            try:
                return os.path.getmtime(real) == mtime
            except OSError:
                return False

        return source, real, uptodate

    def list_templates(self) -> list[str]:
        return [t for t in super().list_templates() if self._inside(t)]

    def _inside(self, template: str) -> bool:
        real = os.path.realpath(os.path.join(self.root, *split_template_path(template)))
        return os.path.commonpath([self.root, real]) == self.root


# ------------------------------------------------------------------------------------------------------------
# the sandbox: values too big to build are refused before they are built

_PCT_FIELD = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?")
_WIDTH_METHODS = ("center", "ljust", "rjust", "zfill")


def _too_big(what: str, n: int, limit: int) -> TemplateLimitError:
    return TemplateLimitError(f"{what} would build a value of {n:,} characters or items (the limit is {limit:,})")


def _check_percent(fmt: str, limit: int) -> None:
    for m in _PCT_FIELD.finditer(fmt):
        for g in m.groups():
            if g == "*" or (g and len(g) > 6) or (g and int(g) > limit):
                raise TemplateLimitError(f"the %-format {m.group(0)[:40]!r} asks for a width or precision that is "
                                         f"not a small number")


def _check_format(fmt: str, limit: int) -> None:
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return      # str.format raises its own error
    for _, _, spec, _ in fields:
        if spec and ("{" in spec or any(len(d) > 6 or int(d) > limit for d in re.findall(r"\d+", spec))):
            raise TemplateLimitError(f"the format spec {spec[:40]!r} asks for a width or precision that is not a small "
                                     f"number")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The sandbox for user templates; `limits` is shared by the environments of one report."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self, *args: Any, limits: Limits | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.limits = limits or Limits()
        for name in ("center", "indent", "replace", "format"):
            self.filters[name] = self._bounded_filter(name, self.filters[name])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        limit = self.limits.chars
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(n, int) and hasattr(seq, "__len__") and not isinstance(seq, int):
                    size = len(seq) * n
                    if size > limit:
                        raise _too_big("`*`", size, limit)
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
                bits = right * max(1, abs(left).bit_length())
                if bits > 8 * limit or right > 1 << 20:
                    raise TemplateLimitError(f"`**` would build a number of about {bits:,} bits")
        elif operator == "%" and isinstance(left, str):
            _check_percent(left, limit)
        return super().call_binop(context, operator, left, right)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        _check_format(value.__self__, self.limits.chars)
        return wrapped

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805, B902
        for a in (*args, *kwargs.values()):
            if isinstance(a, str) and len(a) > __self.limits.chars:
                raise _too_big("an argument", len(a), __self.limits.chars)
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            args = __self._check_str_method(owner, getattr(__obj, "__name__", ""), args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    def _check_str_method(self, s: str, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple:
        limit = self.limits.chars
        size = 0
        if name in _WIDTH_METHODS and args and isinstance(args[0], int):
            size = args[0]
        elif name == "expandtabs":
            tab = args[0] if args else kwargs.get("tabsize", 8)
            size = len(s) + s.count("\t") * tab if isinstance(tab, int) else 0
        elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            hits = len(s) + 1 if args[0] == "" else s.count(args[0])
            size = len(s) + hits * (len(args[1]) - len(args[0]))
        elif name == "join" and args and isinstance(args[0], Iterable):
            items = list(args[0])
            size = sum(len(x) for x in items if isinstance(x, str)) + len(s) * max(0, len(items) - 1)
            args = (items, *args[1:])
        if size > limit:
            raise _too_big(f"str.{name}()", size, limit)
        return args

    def _bounded_filter(self, name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        skip = 1 if hasattr(f, "jinja_pass_arg") else 0      # pass_eval_context / pass_context filters

        def bounded(*given: Any, **kwargs: Any) -> Any:
            value, args = given[skip] if len(given) > skip else "", given[skip + 1:]
            limit = self.limits.chars
            if name == "center" and args and isinstance(args[0], int) and args[0] > limit:
                raise _too_big("the `center` filter", args[0], limit)
            if name == "indent":
                width = args[0] if args else kwargs.get("width", 4)
                pad = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
                size = len(str(value)) + (str(value).count("\n") + 1) * pad
                if size > limit:
                    raise _too_big("the `indent` filter", size, limit)
            if name == "replace":
                self._check_str_method(str(value), "replace", tuple(str(a) for a in args[:2]), {})
            if name == "format":
                _check_percent(str(value), limit)
            return f(*given, **kwargs)

        bounded.__name__ = getattr(f, "__name__", name)
        if skip:
            bounded.jinja_pass_arg = f.jinja_pass_arg  # type: ignore[attr-defined]
        return bounded


# ------------------------------------------------------------------------------------------------------------
# rendering: time and memory watched by a trace function, output counted as it is produced


class _Stop(BaseException):
    """Raised by the watch inside the render (a BaseException: no `except Exception` on the way swallows it)."""


def _peak_rss() -> int:
    try:
        import resource
    except ImportError:     # not on Unix: no memory watch
        return 0
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb if sys.platform == "darwin" else kb * 1024


class _Watch:
    """Stops the render (raises `_Stop` in it) past the deadline or when the process grew by `memory` bytes.

    In the main thread a SIGALRM interval timer looks every `TICK` seconds (no cost to the render); elsewhere,
    or when SIGALRM is taken, a trace function looks at every Python call and every line of template code
    (a few times slower). Either way a check runs between Python steps: one C call (a single huge string
    operation) is not interrupted, which is why the sandbox refuses such operations up front."""

    TICK = 0.005

    def __init__(self, seconds: float, memory: int):
        now = time.monotonic()
        self.deadline, self.next_rss = now + max(0.0, seconds), now + self.TICK
        self.memory, self.rss0 = memory, _peak_rss()
        self.why = ""
        self.active = False
        self._old_handler: Any = None
        self._old_trace: Any = None
        self._alarm = False

    def __enter__(self) -> _Watch:
        self.active = True
        if self._can_alarm():
            self._alarm = True
            self._old_handler = signal.signal(signal.SIGALRM, self._on_alarm)
            signal.setitimer(signal.ITIMER_REAL, self.TICK, self.TICK)
        else:
            self._old_trace = sys.gettrace()
            sys.settrace(self.trace)
        return self

    def __exit__(self, *exc: object) -> None:
        self.active = False
        if self._alarm:
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
            signal.signal(signal.SIGALRM, self._old_handler)
        else:
            sys.settrace(self._old_trace)

    @staticmethod
    def _can_alarm() -> bool:
        if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
            return False
        return (signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
                and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))

    def _check(self, rss_every: float) -> None:
        if not self.active:
            return
        now = time.monotonic()
        if now > self.deadline:
            self.why, self.active = "time", False
            raise _Stop
        if now >= self.next_rss:
            self.next_rss = now + rss_every
            if _peak_rss() - self.rss0 > self.memory:
                self.why, self.active = "memory", False
                raise _Stop

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        self._check(0.0)

    def trace(self, frame: FrameType, event: str, arg: Any) -> Callable | None:
        self._check(self.TICK)
        return self.local if "__jinja_template__" in frame.f_globals else None

    def local(self, frame: FrameType, event: str, arg: Any) -> Callable | None:
        self._check(self.TICK)
        return self.local


def _where(tb: TracebackType | None) -> tuple[str | None, int | None]:
    """The innermost template file and line in a traceback (jinja2's rewritten frames or its compiled code)."""
    found: tuple[str | None, int | None] = (None, None)
    while tb is not None:
        g = tb.tb_frame.f_globals
        if "__jinja_exception__" in g:
            found = (tb.tb_frame.f_code.co_filename, tb.tb_lineno)
        elif "__jinja_template__" in g:
            t = g["__jinja_template__"]
            found = (t.filename or t.name, t.get_corresponding_lineno(tb.tb_lineno))
        tb = tb.tb_next
    return found


def _suspended_at(gen: Any) -> tuple[str | None, int | None]:
    """The innermost template file and line a suspended render generator (and those it yields from) is at."""
    found: tuple[str | None, int | None] = (None, None)
    while gen is not None and getattr(gen, "gi_frame", None) is not None:
        g = gen.gi_frame.f_globals
        if "__jinja_template__" in g:
            t = g["__jinja_template__"]
            found = (t.filename or t.name, t.get_corresponding_lineno(gen.gi_frame.f_lineno))
        gen = gen.gi_yieldfrom
    return found


def render_bounded(env: BoundedSandbox, name: str, context: Mapping[str, Any]) -> str:
    """`env.get_template(name).render(**context)` within `env.limits`; every failure a TemplateError."""
    limits = env.limits
    template = env.get_template(name)
    where: tuple[str | None, int | None] = (template.filename or name, None)
    watch = _Watch(limits.seconds - limits.spent, limits.memory)
    out: list[str] = []
    size = 0
    t0 = time.monotonic()
    try:
        with watch:
            chunks = template.generate(**context)
            for chunk in chunks:
                size += len(chunk)
                if size > limits.chars:
                    file, line = _suspended_at(chunks)
                    chunks.close()
                    raise UserTemplateError(f"the output grew past {limits.chars:,} characters and the render was "
                                            f"stopped (a loop printing without end?)", file or where[0], line)
                out.append(chunk)
    except _Stop as e:
        file, line = _where(e.__traceback__)
        if watch.why == "time":
            msg = (f"the report's templates ran for more than {limits.seconds:g} s in all and were stopped (a loop "
                   f"that never ends, or nested loops over big ranges?); simplify the template, or allow more time "
                   f"with --template-seconds N")
        else:
            msg = (f"the template made the process grow by more than {limits.memory >> 20:,} MiB and was "
                   f"stopped (a value doubled in a loop?)")
        raise UserTemplateError(msg, file or where[0], line) from None
    except UserTemplateError:
        raise
    except TemplateError as e:
        file, line = _where(e.__traceback__)
        if getattr(e, "filename", None) is None:
            e.filename = file or where[0]   # type: ignore[attr-defined]
            e.lineno = line                 # type: ignore[attr-defined]
        raise
    except Exception as e:  # noqa: BLE001 - whatever a user template raises is that template's error
        file, line = _where(e.__traceback__)
        raise UserTemplateError(f"{type(e).__name__}: {e}", file or where[0], line) from e
    finally:
        limits.spent += time.monotonic() - t0
    return "".join(out)
