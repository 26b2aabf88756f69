"""What a rule is: the event vocabulary (kinds and their default roles, severities, casts), the frozen model a
pack is read into (`Rule`, `RulePack`, the layered `RuleSet`), the templates of titles, explanations and next
steps, and what is read off a pattern (its flags, its named groups). Reading and checking pack files is
`forensics.rulepacks`."""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from functools import lru_cache
from typing import Any

from .asides import drop_asides, drop_tail
from .sizes import SIZE_SPECS, format_value
from .yamlread import Location


# ----------------------------------------------------------------------------------------------------------
# the vocabulary


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
        k = lookup_key(key)
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


_GROUP_NAME = re.compile(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>")


_FLAGS = re.compile(r"^\(\?([a-zA-Z]+)\)")


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


def lookup_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, float) and key.is_integer():
        key = int(key)
    return str(key)
