"""Field casts: each `cast:` keyword of a rule mapped to its code in one place (`CASTS`), and the parsers they
use: sizes with units, durations, signals, SM architectures, cgroup and container units, a launch command's
flags and SGLang's `server_args=ServerArgs(...)`. A value a cast cannot read becomes null (`apply_cast`)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Any

from .rulemodel import CAST_NAMES

_SIZE = {"": 1, "b": 1, "byte": 1, "bytes": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
         "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40,
         "tib": 1 << 40, "p": 1 << 50, "pb": 1 << 50, "pib": 1 << 50, "e": 1 << 60, "eb": 1 << 60, "eib": 1 << 60}
_SIZE_RX = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")
_SPAN = {"us": 1e-6, "usec": 1e-6, "µs": 1e-6, "microsecond": 1e-6, "microseconds": 1e-6, "ms": 1e-3,
         "msec": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3, "": 1.0, "s": 1.0, "sec": 1.0, "secs": 1.0,
         "second": 1.0, "seconds": 1.0, "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
         "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "hours": 3600.0, "d": 86400.0, "day": 86400.0,
         "days": 86400.0, "w": 604800.0, "week": 604800.0, "weeks": 604800.0, "month": 2629800.0,
         "months": 2629800.0, "y": 31557600.0, "year": 31557600.0, "years": 31557600.0}
_SPAN_RX = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([A-Za-zµ]*)")
SIGNALS = {1: "HUP", 2: "INT", 3: "QUIT", 4: "ILL", 5: "TRAP", 6: "ABRT", 7: "BUS", 8: "FPE", 9: "KILL",
            10: "USR1", 11: "SEGV", 12: "USR2", 13: "PIPE", 14: "ALRM", 15: "TERM", 16: "STKFLT", 17: "CHLD",
            18: "CONT", 19: "STOP", 20: "TSTP", 21: "TTIN", 22: "TTOU", 23: "URG", 24: "XCPU", 25: "XFSZ",
            26: "VTALRM", 27: "PROF", 28: "WINCH", 29: "IO", 30: "PWR", 31: "SYS"}


def cast_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return int(v)
    s = str(v).strip().replace(",", "")
    return int(s, 16) if s.lower().startswith("0x") else int(s)


def cast_bytes(v: Any) -> int | None:
    """`1.16 GiB`, `471.69 MiB`, `123 bytes`, `61.2G` (systemd), `98765432kB` -> bytes (binary units)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v)
    m = _SIZE_RX.fullmatch(str(v))
    if not m:
        raise ValueError(f"not a size: {v!r}")
    unit = m.group(2).lower()
    if unit not in _SIZE:
        raise ValueError(f"unknown size unit in {v!r}")
    return int(round(float(m.group(1)) * _SIZE[unit]))


def cast_kb(v: Any) -> int | None:
    """Kernel kB figures (`123456kB` or a bare number) or any size -> integer kB (KiB)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v)
    m = _SIZE_RX.fullmatch(str(v))
    if m and m.group(2) == "":
        return int(float(m.group(1)))
    b = cast_bytes(v)
    return None if b is None else int(round(b / 1024))


def cast_duration(v: Any) -> float | None:
    """systemd timespans (`2min 3.456s`, `1h 2min`, `345ms`) and `600000 milliseconds` -> seconds."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    s = str(v).strip()
    total, pos, n = 0.0, 0, 0
    for m in _SPAN_RX.finditer(s):
        if s[pos:m.start()].strip():
            raise ValueError(f"not a duration: {v!r}")
        unit = m.group(2)
        if unit not in _SPAN:
            unit = unit.lower()
            if unit not in _SPAN:
                raise ValueError(f"unknown time unit in {v!r}")
        total += float(m.group(1)) * _SPAN[unit]
        pos, n = m.end(), n + 1
    if not n or s[pos:].strip():
        raise ValueError(f"not a duration: {v!r}")
    return total


def cast_duration_ms(v: Any) -> int | None:
    d = cast_duration(v)
    return None if d is None else int(round(d * 1000))


def cast_signal(v: Any) -> str | None:
    """`SIGKILL`, `KILL`, `9` -> `KILL`."""
    s = str(v).strip()
    if s.isdigit():
        return SIGNALS.get(int(s), s)
    return s[3:] if s.upper().startswith("SIG") else s


def cast_sm_arch(v: Any) -> str | None:
    """`compute_120a`, `sm_120a`, `sm120`, `SM120`, `120`, `12.0`, `(12, 0)` -> `sm_120`; a major alone
    (`12`, `12.x`, `[12]`) -> `sm_12x`."""
    s = str(v).strip().lower()
    m = re.search(r"(?:sm|compute)_?(\d{2,3})[a-z]?\b", s)
    if m:
        return f"sm_{m.group(1)}"
    m = re.fullmatch(r"\(?\s*(\d{1,2})\s*[.,]\s*(\d)\s*\)?", s)
    if m:
        return f"sm_{m.group(1)}{m.group(2)}"
    m = re.match(r"\[?\s*(\d{1,3})(?:\.x)?\b", s)
    if m:
        n = int(m.group(1))
        return f"sm_{n}x" if n < 20 else f"sm_{n}"
    return None


def cast_cuda_version(v: Any) -> str | None:
    """A CUDA version as cudaDriverGetVersion and cudaRuntimeGetVersion give it (1000 * major + 10 * minor):
    `12080` -> `12.8`, `11040` -> `11.4`; a dotted one (`12.8`) is kept."""
    s = str(v).strip()
    if re.fullmatch(r"\d+\.\d+", s):
        return s
    if not s.isdigit() or int(s) < 1000:
        return None
    n = int(s)
    return f"{n // 1000}.{n % 1000 // 10}"


def cast_cgroup_unit(v: Any) -> str | None:
    """`/system.slice/sglang.service` -> `sglang.service` (the innermost unit-like component)."""
    for part in reversed(str(v).strip().split("/")):
        if re.fullmatch(r"[^\s]+\.(?:service|scope|socket|mount|swap|slice)", part) and not part.endswith(".slice"):
            return part
    return None


# the scope systemd gives a container (the kubelet's and Docker's systemd cgroup driver) by its runtime
_SCOPE_PREFIX = {"containerd": "cri-containerd", "cri-o": "crio", "crio": "crio", "docker": "docker"}


def cast_container_unit(v: Any) -> str | None:
    """A container the kubelet names (`containerd://<id>`, or `{"Type":"containerd","ID":"<id>"}`) as the
    systemd scope it runs in: `cri-containerd-<id>.scope` (CRI-O's `crio-`, Docker's `docker-`), the unit
    the kernel's OOM report and systemd's own lines name it by."""
    s = str(v).strip()
    m = re.fullmatch(r"([a-z-]+)://([0-9a-f]{64})", s) or re.fullmatch(
        r'\{"Type":"([a-z-]+)","ID":"([0-9a-f]{64})"\}', s)
    if not m or m.group(1) not in _SCOPE_PREFIX:
        return None
    return f"{_SCOPE_PREFIX[m.group(1)]}-{m.group(2)}.scope"


def cast_unquote(v: Any) -> str:
    """A value quoted inside a quoted value, as Go's %q and klog print it (`Get \\"http://...\\": ...`), read back:
    `\\"` is `"` and `\\\\` is `\\`."""
    return re.sub(r'\\(["\\])', r"\1", str(v))


def cast_klog_block(v: Any) -> str:
    """A klog multi-line value as the journal merged it (`forensics.normalise`: each line after a tab, then ` >`),
    read back: the lines without their tab, the closing ` >` left out."""
    lines = [ln[1:] if ln.startswith("\t") else ln.strip() for ln in str(v).split("\n")]
    while lines and lines[-1] in ("", ">"):
        lines.pop()
    return "\n".join(lines)


def cast_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "yes", "1", "on"):
        return True
    if s in ("false", "no", "0", "off"):
        return False
    raise ValueError(f"not a boolean: {v!r}")


# -- launch flags: command lines and SGLang's server_args dump

_PY_LITERALS = {"True": True, "False": False, "None": None}


def _is_flag(tok: str) -> bool:
    if not tok.startswith("-") or tok in ("-", "--"):
        return False
    return not re.fullmatch(r"-[0-9.]+(?:e-?[0-9]+)?", tok)


def parse_command_flags(cmd: str) -> dict[str, Any]:
    """`--flag value`, `--flag=value` and bare `--switch` (true) of a command line, split with shlex.
    Several values after one flag are joined with spaces; a repeated flag keeps its last value."""
    text = cmd.replace("\\\n", " ")
    try:
        toks = shlex.split(text, posix=True)
    except ValueError:
        toks = text.split()
    flags: dict[str, Any] = {}
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.startswith("--") and len(t) > 2:
            if "=" in t:
                k, v = t.split("=", 1)
                flags[k] = v
                i += 1
                continue
            j = i + 1
            vals = []
            while j < len(toks) and not _is_flag(toks[j]):
                vals.append(toks[j])
                j += 1
            flags[t] = " ".join(vals) if vals else True
            i = j
        else:
            i += 1
    return flags


def _scan_value(s: str, i: int) -> tuple[str, int]:
    """One value of a Python repr starting at i: a quoted string, a bracketed structure or a bare token."""
    n = len(s)
    if i < n and s[i] in "'\"":
        q = s[i]
        j = i + 1
        out = []
        while j < n and s[j] != q:
            if s[j] == "\\" and j + 1 < n:
                out.append({"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"'}.get(s[j + 1], "\\" + s[j + 1]))
                j += 2
                continue
            out.append(s[j])
            j += 1
        return "\x00" + "".join(out), j + 1      # \x00 marks "was quoted"
    depth = 0
    j = i
    quote = ""
    while j < n:
        c = s[j]
        if quote:
            if c == "\\":
                j += 2
                continue
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif c == "," and depth == 0:
            break
        j += 1
    return s[i:j].strip(), j


def parse_server_args(text: str) -> dict[str, Any]:
    """SGLang's `ServerArgs(model_path='/m', tp_size=8, ...)` (0.4-0.5.x) or `{'model_path': '/m', ...}`
    (0.5.23), vLLM's `Namespace(model='/m', ...)` or `{'model': '/m', ...}` -> {`--model-path`: `/m`, `--tp-size`:
    `8`, ...}: strings as printed, True/False as booleans,
    None as null. A small scanner, never eval."""
    m = re.search(r"ServerArgs\(|Namespace\(|\{", text)
    if not m:
        return {}
    s = text[m.end():]
    flags: dict[str, Any] = {}
    i, n = 0, len(s)
    key_rx = re.compile(r"\s*(?:(['\"])([A-Za-z_][A-Za-z0-9_]*)\1\s*:|([A-Za-z_][A-Za-z0-9_]*)\s*=)\s*")
    while i < n:
        km = key_rx.match(s, i)
        if not km:
            break
        key = km.group(2) or km.group(3)
        raw, i = _scan_value(s, km.end())
        if raw.startswith("\x00"):
            val: Any = raw[1:]
        else:
            val = _PY_LITERALS.get(raw, raw)
        flags["--" + key.replace("_", "-")] = val
        while i < n and s[i] in " \t":
            i += 1
        if i < n and s[i] == ",":
            i += 1
        else:
            break
    return flags


def cast_flags(v: Any) -> dict[str, Any] | None:
    s = str(v)
    if "ServerArgs(" in s or s.lstrip().startswith("Namespace(") or re.match(r"\s*(?:server_args=)?\{", s):
        return parse_server_args(s)
    return parse_command_flags(s)


def cast_command(v: Any) -> str:
    """A command line as one line: backslash-newline continuations (and their indentation) joined."""
    return re.sub(r"[ \t]*\\\n[ \t]*", " ", str(v)).strip()


CASTS: dict[str, Callable[[Any], Any]] = {
    "int": cast_int,
    "float": lambda v: float(str(v).strip().replace(",", "")) if not isinstance(v, (int, float)) else float(v),
    "str": lambda v: v if isinstance(v, str) else str(v),
    "bool": cast_bool,
    "kb": cast_kb,
    "bytes": cast_bytes,
    "duration": cast_duration,
    "duration_ms": cast_duration_ms,
    "flags": cast_flags,
    "signal": cast_signal,
    "sm_arch": cast_sm_arch,
    "cuda_version": cast_cuda_version,
    "cgroup_unit": cast_cgroup_unit,
    "container_unit": cast_container_unit,
    "unquote": cast_unquote,
    "klog_block": cast_klog_block,
    "lower": lambda v: str(v).lower(),
    "command": cast_command,
}
assert set(CASTS) == set(CAST_NAMES), "forensics.rulemodel.CAST_NAMES and casts.CASTS disagree"


def apply_cast(name: str, value: Any) -> Any:
    try:
        return CASTS[name](value)
    except (ValueError, TypeError, OverflowError):
        return None
