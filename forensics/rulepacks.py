"""Rule packs: YAML data (`rules/*.yaml`) -> validated, frozen `Rule`s in a layered `RuleSet`.

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
import string
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any

import regex
import yaml

from .asides import drop_asides, drop_tail
from .cachefiles import code_digest, generation, keep_pickled, private_dir, prune, read_pickled, write_atomic
from .literals import MIN_LITERAL, derive_literals
from .sizes import SIZE_SPECS, format_value
from .yamlread import Location, PackError, construct

BUILTIN_DIR = Path(__file__).resolve().parent.parent / "rules"
ENV_VAR = "FORENSICS_RULES"


class Severity(str, Enum):
    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Role(str, Enum):
    CAUSE = "cause"
    SYMPTOM = "symptom"
    CONTEXT = "context"


class Engine(str, Enum):
    AUTO = "auto"        # polars (Rust regex) when the pattern compiles there, else `regex`
    POLARS = "polars"
    REGEX = "regex"      # Python `regex` module with a timeout, for look-around and back-references


class Direction(str, Enum):
    BEFORE = "before"
    AFTER = "after"


# The stable vocabulary of /work/shared/reference/event-kinds.md (name -> default role), then the kinds the
# built-in packs add. Packs may add kinds (`kinds:`), never rename these.
KINDS: dict[str, Role] = {
    # systemd and journald
    "service_killed": Role.SYMPTOM, "service_exited": Role.SYMPTOM, "service_core_dumped": Role.SYMPTOM,
    "service_failed": Role.SYMPTOM, "service_start_failed": Role.SYMPTOM, "unit_oom_killed": Role.CAUSE,
    "cgroup_kill_failed": Role.SYMPTOM, "stop_timeout": Role.CAUSE, "restart_scheduled": Role.CONTEXT,
    "start_limit_hit": Role.SYMPTOM, "service_started": Role.CONTEXT, "service_stopped": Role.CONTEXT,
    "core_dump": Role.SYMPTOM, "oomd_kill": Role.CAUSE, "journal_suppressed": Role.CONTEXT, "boot": Role.CONTEXT,
    # kernel
    "oom_invoked": Role.CONTEXT, "oom_kill": Role.CAUSE, "oom_reaped": Role.CONTEXT, "gpu_xid": Role.CAUSE,
    "gpu_fallen_off_bus": Role.CAUSE, "segfault": Role.CAUSE, "hung_task": Role.SYMPTOM,
    "kernel_panic": Role.CAUSE,
    # inference servers and GPU libraries
    "server_config": Role.CONTEXT, "server_start": Role.CONTEXT, "server_ready": Role.CONTEXT,
    "flashinfer_arch_unsupported": Role.CAUSE, "cuda_arch_unsupported": Role.CAUSE, "cuda_oom": Role.CAUSE,
    "cuda_error": Role.CAUSE, "nccl_timeout": Role.CAUSE, "nccl_error": Role.CAUSE,
    "python_traceback": Role.SYMPTOM, "watchdog_timeout": Role.CAUSE, "child_failed": Role.SYMPTOM,
    "health_check_failed": Role.SYMPTOM,
    # added by the built-in packs
    "start_timeout": Role.CAUSE,           # systemd: `start operation timed out. Terminating.`
    "unit_watchdog": Role.CAUSE,           # systemd: `Watchdog timeout (limit 3min)!` (WatchdogSec=)
    "systemd_kill": Role.CONTEXT,          # systemd: `Killing process N (name) with signal SIGKILL.`
    "cpu_lockup": Role.CAUSE,              # kernel: soft / hard lockup
    "scheduler_exception": Role.SYMPTOM,   # SGLang: `Scheduler hit an exception: Traceback ...`
    "kv_cache_pressure": Role.CONTEXT,     # SGLang: `KV cache pool is full. Retract requests.`
    "mem_sizing_failed": Role.CAUSE,       # SGLang: `Not enough memory. Please try to increase --mem-fraction-static.`
    "gpu_driver_mismatch": Role.CAUSE,     # NVRM `API mismatch`, NVML `Driver/library version mismatch`
    "cuda_init_failed": Role.CAUSE,        # PyTorch: `Unexpected error from cudaGetDeviceCount() ... Error 803: ...`
    "package_changed": Role.CONTEXT,       # dpkg: a package installed, upgraded or removed
    "fabric_manager_failed": Role.CAUSE,   # nv-fabricmanager: `... driver interface version X don't match with driver version Y`
    "pcie_error": Role.CAUSE,              # kernel AER: `Uncorrected (Fatal) error received: 0000:3b:00.0`
    "disk_full": Role.CAUSE,               # `No space left on device` (ENOSPC, errno 28)
    "gpu_memory_occupied": Role.CAUSE,     # SGLang `Some GPUs may be occupied by other processes`, vLLM `Free memory on device`
    "probe_kill": Role.CAUSE,              # kubelet: `Container X failed liveness probe, will be restarted`
    "container_stop": Role.CONTEXT,        # kubelet: `Killing container with a grace period`
    "container_died": Role.SYMPTOM,        # kubelet: `SyncLoop (PLEG): event for pod` ... `ContainerDied`
    "crash_loop_backoff": Role.SYMPTOM,    # kubelet: `CrashLoopBackOff: "back-off 10s restarting failed container=X`
    "container_started": Role.CONTEXT,     # kubelet: `SyncLoop (PLEG): event for pod` ... `ContainerStarted`
    "container_ready": Role.CONTEXT,       # kubelet: `"SyncLoop (probe)" probe="readiness" status="ready"`
    "node_pressure": Role.CONTEXT,         # kubelet: `"Eviction manager: must evict pod(s) to reclaim" resourceName="memory"`
    "pod_evicted": Role.SYMPTOM,           # kubelet: `"Eviction manager: pod is evicted successfully" pod="ns/name"`
    "gpu_container_failed": Role.CAUSE,    # `nvidia-container-cli: initialization error: nvml error: driver not loaded`
    "ray_oom_kill": Role.CAUSE,            # Ray's memory monitor: `... which exceeds the memory usage threshold of 0.95`
    "ray_oom_summary": Role.CONTEXT,       # raylet: `1 Workers (tasks / actors) killed due to memory pressure (OOM)`
    "gpu_init_failed": Role.CAUSE,         # kernel: `NVRM: GPU 0000:d8:00.0: RmInitAdapter failed! (0x26:0xffff:1227)`
    "gpu_unhealthy": Role.SYMPTOM,         # NVIDIA device plugin: `XidCriticalError: Xid=79 on Device=GPU-...; marking`
    "model_download_failed": Role.CAUSE,   # Hugging Face Hub: `Cannot access gated repo for url https://huggingface.co/...`
    "pod_admission_denied": Role.SYMPTOM,  # kubelet: `"Pod admission denied" ... reason="UnexpectedAdmissionError"`
    "port_in_use": Role.CAUSE,             # uvicorn `[Errno 98] error while attempting to bind on address (...)`, c10d EADDRINUSE
    "model_unsupported": Role.CAUSE,       # `... has model type `x` but Transformers does not recognize this architecture`
    "exec_failed": Role.CAUSE,             # systemd: `x.service: Failed at step EXEC spawning /path: No such file or directory`
    "cuda_graph_capture_failed": Role.CAUSE,  # SGLang: `Exception: Capture cuda graph failed: CUDA out of memory. ...`
    "triton_out_of_resources": Role.CAUSE,  # Triton: `OutOfResources: out of resource: shared memory, Required: ...`
    "dataloader_worker_killed": Role.SYMPTOM,  # PyTorch: `DataLoader worker (pid 19597) is killed by signal: Killed.`
    "shm_exhausted": Role.CAUSE,           # PyTorch: `ERROR: Unexpected bus error encountered in worker. ... (shm).`
    "fatal_signal": Role.CAUSE,            # Python faulthandler: `Fatal Python error: Segmentation fault` and the stacks
    "gpu_recovery_action": Role.CONTEXT,   # NVRM Xid 154: `GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)`
    "worker_failed": Role.SYMPTOM,         # torchrun: `failed (exitcode: -9) local_rank: 0 (pid: 4821) of binary: ...`
}

# Field casts the engine implements (`forensics.casts.CASTS`; a test keeps the two in step).
CAST_NAMES = ("int", "float", "str", "bool", "kb", "bytes", "duration", "duration_ms", "flags", "signal",
              "sm_arch", "cuda_version", "cgroup_unit", "container_unit", "unquote", "klog_block", "lower", "command")

# Placeholders every title / explain / next_steps template may use besides the rule's own fields. `port`: the port
# the unit's server listens on, from its launch configuration's `--port` (SGLang's default, 30000, without one).
STANDARD_PLACEHOLDERS = ("unit", "host", "pid", "since", "until", "ts", "path", "line", "rank", "rule", "kind",
                         "port")

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
_GROUP_NAME = re.compile(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>")
_FLAGS = re.compile(r"^\(\?([a-zA-Z]+)\)")
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


@dataclass(frozen=True)
class Applies:
    """Where a rule applies: fnmatch globs on record columns. Empty = anywhere. A null column (unknown, e.g. a
    line pasted to `forensics explain`) never excludes a record."""

    formats: tuple[str, ...] = ()
    idents: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    ranks: tuple[str, ...] = ()

    def columns(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        return tuple((c, g) for c, g in (("format", self.formats), ("ident", self.idents), ("unit", self.units),
                                         ("rank", self.ranks)) if g)


@dataclass(frozen=True)
class Derive:
    """A computed field: the first non-null of `sources`, optionally mapped through a lookup table or a cast;
    or the constant `value` (with `sources`: only when one of them is set). Never overwrites a field that is
    already set."""

    field: str
    sources: tuple[str, ...] = ()
    lookup: str | None = None
    cast: str | None = None
    value: Any = None
    location: Location = Location("", 0)


@dataclass(frozen=True)
class Context:
    """Extra lines that belong to the same event: searched first inside the anchor record itself (a multi-line
    record), then in the nearest record of the same source, host and boot (and `same` columns) within `lines`
    lines and `seconds` seconds (wall time, else monotonic seconds) before or after the anchor. Its groups are merged into the event's fields (the
    anchor's win) and its line widens the event's `line`..`line_end`."""

    name: str
    pattern: str
    direction: Direction
    lines: int
    seconds: float | None
    same: tuple[str, ...]
    literals: tuple[str, ...]
    ignore_case: bool
    casts: tuple[tuple[str, str], ...]
    groups: tuple[str, ...]
    location: Location


@dataclass(frozen=True)
class Example:
    text: str                                   # full log line(s) as in a real file
    location: Location
    fields: tuple[tuple[str, Any], ...] = ()    # the fields a match must yield (a subset of the event's)
    format: str | None = None                   # force a format instead of auto-detection
    note: str = ""


@dataclass(frozen=True)
class Rule:
    id: str
    kind: str
    severity: Severity
    role: Role
    pattern: str
    title: str
    explain: str
    pack: str
    location: Location
    applies: Applies = Applies()
    engine: Engine = Engine.POLARS              # resolved: never AUTO after loading
    literals: tuple[str, ...] = ()              # any one of these must occur in a matching message
    ignore_case: bool = False
    exclude: str | None = None
    casts: tuple[tuple[str, str], ...] = ()
    derive: tuple[Derive, ...] = ()
    context: tuple[Context, ...] = ()
    next_steps: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    versions: tuple[str, ...] = ()
    examples: tuple[Example, ...] = ()
    near_misses: tuple[Example, ...] = ()
    groups: tuple[str, ...] = ()                # named groups of the pattern, in order

    @property
    def field_names(self) -> tuple[str, ...]:
        """Every field this rule can produce (pattern groups, context groups, derived fields)."""
        names = [g for g in self.groups if not g.startswith("_")]
        for c in self.context:
            names += [g for g in c.groups if not g.startswith("_")]
        names += [d.field for d in self.derive]
        return tuple(dict.fromkeys(names))

    def cast_of(self, name: str) -> str | None:
        for f, c in self.casts:
            if f == name:
                return c
        return None

    def render_title(self, values: Mapping[str, Any]) -> str:
        return render_title(self.title, values)

    def render_explain(self, values: Mapping[str, Any]) -> str:
        """The explain text as the report's prose has it: an aside naming a value the event lacks is left out
        (`the kill ({trigger_process})` of an OOM kill line seen alone reads `the kill`, not `the kill (?)`)."""
        return render(drop_asides(self.explain, lambda n: values.get(n) is None), values)

    def render_next_steps(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(render(s, values) for s in self.next_steps)


@dataclass(frozen=True)
class Lookup:
    name: str
    table: tuple[tuple[str, str], ...]
    location: Location

    def get(self, key: Any) -> str | None:
        k = _lookup_key(key)
        for a, b in self.table:
            if a == k:
                return b
        return None


@dataclass(frozen=True)
class RulePack:
    name: str
    path: str
    description: str
    rules: tuple[Rule, ...]
    lookups: tuple[Lookup, ...] = ()
    kinds: tuple[tuple[str, Role], ...] = ()
    version: str = ""          # the pack's `version:` if it declares one
    digest: str = ""           # sha256 of the file (first 12 hex): identifies the exact rules used

    @property
    def label(self) -> str:
        return f"{self.version} ({self.digest})" if self.version else self.digest


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    lookups: tuple[Lookup, ...] = ()
    packs: tuple[RulePack, ...] = ()
    kinds: tuple[tuple[str, Role], ...] = ()

    def __len__(self) -> int:
        return len(self.rules)

    def __iter__(self):
        return iter(self.rules)

    def get(self, rule_id: str) -> Rule | None:
        for r in self.rules:
            if r.id == rule_id:
                return r
        return None

    def lookup(self, name: str) -> Lookup | None:
        for t in self.lookups:
            if t.name == name:
                return t
        return None

    def default_role(self, kind: str) -> Role | None:
        return dict(self.kinds).get(kind)

    def literals(self, ignore_case: bool = False, only: Callable[[Rule], bool] | None = None) -> tuple[str, ...]:
        """Every prefilter literal of every rule (of those `only` admits) and of every context pattern (a context
        line may come from a record the rule itself would not apply to), sorted, unique."""
        out: set[str] = set()
        for r in self.rules:
            if r.ignore_case == ignore_case and (only is None or only(r)):
                out.update(r.literals)
            for c in r.context:
                if c.ignore_case == ignore_case:
                    out.update(c.literals)
        return tuple(sorted(out))

    def pack_versions(self) -> tuple[tuple[str, str], ...]:
        """(pack name, version and digest) of every loaded pack file, for reports."""
        return tuple((p.name, p.label) for p in self.packs)

    def select(self, packs: Iterable[str] = (), ids: Iterable[str] = ()) -> RuleSet:
        """The rules of the named packs and/or ids (all rules when both are empty)."""
        packs, ids = set(packs), set(ids)
        if not packs and not ids:
            return self
        keep = tuple(r for r in self.rules if r.pack in packs or r.id in ids)
        return replace(self, rules=keep)


# ----------------------------------------------------------------------------------------------------------
# templates


class _Missing(dict):
    def __missing__(self, key: str) -> str:
        return "?"


class _Template(string.Formatter):
    """`str.format_map` with the size specs: a value that is not a number (`?` for a missing one) prints as is."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec not in SIZE_SPECS:
            return format(value, format_spec)
        try:
            return format_value(value, format_spec)
        except (TypeError, ValueError, OverflowError):
            return str(value)


_TEMPLATE = _Template()


@lru_cache(maxsize=4096)
def size_fields(template: str) -> tuple[str, ...]:
    """The fields a template prints with a size spec (`{anon_rss_kb:kB}` -> `anon_rss_kb`); () when malformed.
    Cached: `render` asks it for every title it fills."""
    try:
        return tuple(name for _, name, spec, _ in string.Formatter().parse(template) if name and spec in SIZE_SPECS)
    except ValueError:
        return ()


def render(template: str, values: Mapping[str, Any]) -> str:
    """`{name}` placeholders filled from values; a missing or null value renders as `?`; `{name:kB}` and
    `{name:B}` print a size in binary units."""
    vals = _Missing({k: ("?" if v is None else v) for k, v in values.items()})
    try:
        return _TEMPLATE.vformat(template, (), vals) if size_fields(template) else template.format_map(vals)
    except (ValueError, IndexError, KeyError, AttributeError):
        return template


def render_title(template: str, values: Mapping[str, Any]) -> str:
    """`render` for an event's title: a parenthesised aside that names a field with no value is left out
    (`launch command (pid {pid}): ...` without a pid reads `launch command: ...`), and so is a tail `: {name}`
    (`asides.drop_tail`); other missing fields are `?`."""
    def missing(n: str) -> bool:
        return values.get(n) is None

    return render(drop_tail(drop_asides(template, missing), missing), values)


# the casts whose values a size spec can print
NUMERIC_CASTS = frozenset({"int", "float", "kb", "bytes"})


def placeholders(template: str) -> list[str]:
    """The field names a template uses; raises ValueError on a malformed template, a conversion (`!r`) or a
    format spec other than the size specs (`:kB`, `:B`)."""
    names = []
    for _, name, spec, conv in string.Formatter().parse(template):
        if name is None:
            continue
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"placeholder {{{name}}} must be a plain field name")
        if conv:
            raise ValueError(f"placeholder {{{name}!{conv}}}: conversions are not supported")
        if spec and spec not in SIZE_SPECS:
            raise ValueError(f"placeholder {{{name}:{spec}}}: unknown format '{spec}' (a size in kB is "
                             f"{{{name}:kB}}, in bytes {{{name}:B}}; both print binary units such as 479.6 GiB)")
        names.append(name)
    return names


# ----------------------------------------------------------------------------------------------------------
# patterns


def split_flags(pattern: str) -> tuple[str, str]:
    """(`(?ms)`, rest) for a pattern with leading inline flags."""
    m = _FLAGS.match(pattern)
    if m:
        return m.group(0), pattern[m.end():]
    return "", pattern


def wrap(pattern: str, name: str = "_m") -> str:
    """The pattern with its whole match captured as group `name` (leading flags kept in front)."""
    flags, rest = split_flags(pattern)
    return f"{flags}(?P<{name}>{rest})"


def group_names(pattern: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_GROUP_NAME.findall(pattern)))


@lru_cache(maxsize=4096)
def polars_compiles(pattern: str) -> str | None:
    """None if polars' (Rust) regex engine accepts the pattern, else the error text."""
    import polars as pl

    try:
        pl.Series([""], dtype=pl.String).str.contains(pattern)
        return None
    except Exception as e:  # noqa: BLE001 - polars raises ComputeError / PanicException variants
        return str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__


def _lookup_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, float) and key.is_integer():
        key = int(key)
    return str(key)


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
                        table.append((_lookup_key(k), " ".join(s.split())))
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
                                     for m in ("literals.py", "asides.py", "sizes.py", "yamlread.py")))


def _set_path(key: tuple) -> Path | None:
    """Where the rule set of these pack files (`key`: their paths and digests) is kept, in the private cache
    directory (None: there is none). Named also after the code that reads them, the versions of what checks the
    patterns and of Python (pickles), and the working directory (rules locate themselves relative to it)."""
    d = private_dir()
    if d is None:
        return None
    import polars as pl

    what = [_SET_CODE, key, os.getcwd(), pl.__version__, regex.__version__, yaml.__version__, sys.version]
    return d / f"ruleset~{hashlib.sha256(json.dumps(what, default=str).encode()).hexdigest()[:32]}.pickle"


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
_CODE = code_digest(__file__)  # how the packs are read names the texts too


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
        return (hashlib.sha256(f.read_bytes()).hexdigest(),)
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
