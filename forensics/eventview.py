"""Events as correlation sees them: an events frame (EVENT_SCHEMA) -> `EventView`s, each with its fields decoded
and enriched and its entities (host, unit, pid, cgroup, PCI address, rank, GPU, Kubernetes pod and container)
resolved; and which kinds' `pid` is the logger's rather than the process's the line is about."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime, timezone
from typing import Any

import polars as pl

from .kubepods import parse as parse_kubepods, scope_id

ENTITIES = ("host", "unit", "pid", "cgroup", "pci", "rank", "gpu", "pod", "container", "container_id", "pod_uid")
UNKNOWN_HOST = "unknown host"   # the incidents of events that name no host, and such a host in a statement
_UNIT_SUFFIX = re.compile(r"([^/\s]+\.(?:service|scope|slice|socket|timer|mount))$")

# kinds whose `pid` column is the logger's (systemd's, journald's), never the process the line is about
_LOGGER_PID_KINDS = frozenset({
    "service_killed", "service_exited", "service_core_dumped", "service_failed", "service_start_failed",
    "unit_oom_killed", "cgroup_kill_failed", "stop_timeout", "restart_scheduled", "start_limit_hit",
    "service_started", "service_stopped", "oomd_kill", "journal_suppressed", "boot", "start_timeout",
    "unit_watchdog", "server_config", "probe_kill", "container_stop", "container_died", "crash_loop_backoff",
    "container_started", "container_ready", "node_pressure", "pod_evicted", "pod_admission_denied", "gpu_unhealthy"})
KERNEL_KINDS = frozenset({"oom_invoked", "oom_kill", "oom_reaped", "gpu_xid", "gpu_fallen_off_bus", "gpu_init_failed",
                          "segfault", "hung_task", "kernel_panic", "cpu_lockup", "boot"})
SYSTEMD_KINDS = _LOGGER_PID_KINDS - {"server_config", "boot"} | {"systemd_kill", "core_dump"}


@dataclass(frozen=True)
class EventView:
    """One event row, with its fields parsed and its entities resolved (internal to correlation)."""

    seq: int                      # position in the deterministic order of the frame
    id: str                       # `<source_id>:<line>:<rule>`
    ts: datetime | None
    t: float | None               # epoch seconds
    ts_source: str
    kind: str
    rule: str
    severity: str
    role: str
    host: str | None
    unit: str | None
    pid: int | None
    title: str
    fields: Mapping[str, Any]
    message: str
    source_id: str
    path: str
    line: int
    line_end: int
    format: str
    entities: Mapping[str, str]

    @classmethod
    def of(cls, **values: Any) -> EventView:
        """A view from the value of every field, built without the frozen dataclass's `__init__`, which sets each
        field with `object.__setattr__` (5 us a view: 0.1 s of a report on a busy day's 20 k events). It is as
        frozen as one built by `__init__`."""
        if values.keys() != _VIEW_FIELDS:
            raise TypeError(f"EventView.of: {sorted(_VIEW_FIELDS ^ values.keys())} missing or unknown")
        view = object.__new__(cls)
        view.__dict__.update(values)
        return view

    def value(self, name: str) -> Any:
        if name in self.fields:
            return self.fields[name]
        if name in self.entities:
            return self.entities[name]
        return getattr(self, name, None) if name in VIEW_COLUMNS else None


_VIEW_FIELDS = frozenset(f.name for f in dataclass_fields(EventView))
VIEW_COLUMNS = ("kind", "rule", "severity", "role", "host", "unit", "pid", "title", "message", "path", "line",
            "format", "ts_source", "source_id")


def unit_of_cgroup(cgroup: str | None) -> str | None:
    """`/system.slice/sglang.service` -> `sglang.service` (the innermost unit named in a cgroup path)."""
    if not cgroup:
        return None
    for part in reversed(str(cgroup).strip("/").split("/")):
        m = _UNIT_SUFFIX.search(part)
        if m and not part.endswith(".slice"):
            return m.group(1)
    return None


def _norm_pci(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v).lower().strip()
    s = re.sub(r"^pci:", "", s)
    m = re.match(r"^(?:([0-9a-f]{4,8}):)?([0-9a-f]{2}):([0-9a-f]{2})(?:\.[0-7])?$", s)
    if not m:
        return s
    return f"{(m.group(1) or '0000')[-4:]}:{m.group(2)}:{m.group(3)}"


def entities_of(kind: str, host: str | None, unit: str | None, pid: int | None,
                fields: Mapping[str, Any]) -> dict[str, str]:
    """The join keys of one event. `pid` is the process the line is about (a field), or the logging process
    for lines a process writes about itself; never systemd's or journald's own pid."""
    ents: dict[str, str] = {}
    if host:
        ents["host"] = str(host)
    cgroup = fields.get("cgroup") or fields.get("task_memcg") or fields.get("oom_memcg")
    u = unit or fields.get("unit") or unit_of_cgroup(cgroup)
    if u:
        ents["unit"] = str(u)
    p = fields.get("main_pid") or fields.get("pid")
    if p is None and pid is not None and kind not in _LOGGER_PID_KINDS and pid != 1:
        p = pid
    if p is not None and str(p).strip():
        ents["pid"] = as_text(p)
    if cgroup:
        ents["cgroup"] = str(cgroup)
    pci = _norm_pci(fields.get("pci"))
    if pci:
        ents["pci"] = pci
    rank = fields.get("rank") if fields.get("rank") is not None else fields.get("tp_rank")
    if rank is not None:
        ents["rank"] = as_text(rank)
    if fields.get("gpu") is not None:
        ents["gpu"] = as_text(fields["gpu"])
    pod = fields.get("pod")
    if pod:                                  # a Kubernetes pod, `namespace/name`, and a container of it by name
        ents["pod"] = f"{fields['namespace']}/{pod}" if fields.get("namespace") else str(pod)
        if fields.get("container"):
            ents["container"] = f"{ents['pod']}/{fields['container']}"
    # a container by its runtime's id: the kubelet's ContainerDied prints it, the kernel's OOM report names its
    # cgroup (task_memcg before the pod's oom_memcg), the kubelet's kill lines its scope
    # (each path read once, and only when it names the kubelet's tree)
    kubes = [k for p in (fields.get("task_memcg"), cgroup) if p and "kubepods" in str(p) and (k := parse_kubepods(p))]
    cid = fields.get("container_id")
    if not (isinstance(cid, str) and len(cid) == 64):
        cid = next((k.container_id for k in kubes if k.container_id), None) or scope_id(u)
    if cid:
        ents["container_id"] = cid
    puid = fields.get("pod_uid") or next((k.pod_uid for k in kubes), None)
    if puid:
        ents["pod_uid"] = str(puid)
    return ents


def event_id(source_id: str | None, line: int | None, rule: str | None) -> str:
    return f"{source_id or ''}:{line or 0}:{rule or ''}"


def sort_events(events: pl.DataFrame) -> pl.DataFrame:
    """The deterministic order of events everywhere: time (untimed last), path, line, rule."""
    return events.sort(["ts", "path", "line", "rule"], nulls_last=True, maintain_order=True)


def views(events: pl.DataFrame, enrich: Any = None,
          host_gpus: Mapping[str, tuple[str | None, str]] | None = None, *, seq: str | None = None) -> list[EventView]:
    """EventViews of a frame (sorted first). `enrich(kind, fields, message) -> fields` may add derived fields
    (into a new dict: the one it is given is shared by the events whose fields read the same), and reads the
    message only of the kinds in its attribute `message_kinds`, when it has one;
    `host_gpus` (host -> (sm, GPU name) as the logs show them) names the GPU of an architecture error
    (`gpus_desc`) instead of the architecture's whole family. `seq` names a column holding each row's position
    in the deterministic order of a larger frame (a selection of a store's events): rows are taken in that
    order and keep those positions."""
    if seq is not None:
        df = events.sort(seq)
        seqs = df[seq].to_list()
    else:
        df = sort_events(events)
        seqs = list(range(df.height))
    names = ("ts", "ts_source", "kind", "rule", "severity", "role", "host", "unit", "pid", "title", "fields",
             "message", "source_id", "path", "line", "line_end", "format")
    cols = [df[n].to_list() if n in df.columns else [None] * df.height for n in names]
    out: list[EventView] = []
    utc = timezone.utc
    # A crash-looping unit's events repeat their kind and fields, and most of them their host, unit and pid too:
    # each distinct one is decoded, enriched and resolved once, and its dicts are shared (no one changes an event's
    # fields or entities in place: a change is a new view with new dicts, `dataclasses.replace`). The message is
    # part of that key for the kinds `enrich` reads it of (its `message_kinds`; every kind, when it does not say).
    reads_message = frozenset() if enrich is None else getattr(enrich, "message_kinds", None)
    enriched: dict[tuple[str, str | None, str | None], dict[str, Any]] = {}
    resolved: dict[tuple, dict[str, str]] = {}   # (the fields' key, host, unit, pid) -> entities
    for i, ts, ts_source, kind, rule, severity, role, host, unit, pid, title, raw, message, source_id, path, line, \
            line_end, fmt in zip(seqs, *cols):
        kind = kind or ""
        key = (kind, raw, message if reads_message is None or kind in reads_message else None)
        fields = enriched.get(key)
        if fields is None:
            fields = enriched[key] = _fields_of(raw, kind, message, enrich)
        ekey = (key, host, unit, pid)
        ents = resolved.get(ekey)
        if ents is None:
            ents = resolved[ekey] = entities_of(kind, host, unit, pid, fields)
        if host_gpus and fields.get("sm") and host in host_gpus:   # (the GPU's name is no entity)
            sm, name = host_gpus[host]
            if sm in (None, fields["sm"]):
                fields = {**fields, "gpus_desc": name}
        if ts is not None and ts.tzinfo is None:
            ts = ts.replace(tzinfo=utc)
        out.append(EventView.of(
            seq=i, id=event_id(source_id, line, rule), ts=ts,
            t=ts.timestamp() if ts is not None else None, ts_source=ts_source or "none", kind=kind,
            rule=rule or "", severity=severity or "info", role=role or "context",
            host=host, unit=ents.get("unit"), pid=pid, title=title or "",
            fields=fields, message=message or "", source_id=source_id or "",
            path=path or "", line=int(line or 0), line_end=int(line_end or line or 0),
            format=fmt or "", entities=ents))
    return out


def _fields_of(raw: str | None, kind: str, message: str | None, enrich: Any) -> dict[str, Any]:
    """An event's fields: its `fields` JSON decoded (a JSON that is not an object: none), then enriched."""
    fields: dict[str, Any] = {}
    if raw:
        try:
            decoded = json.loads(raw)
        except (TypeError, ValueError):
            decoded = None
        if isinstance(decoded, dict):
            fields = decoded
    if enrich is not None:
        return enrich(kind, fields, message or "")
    return fields


def as_text(v: Any) -> str:
    """A field's or entity's value as the text it is compared and shown as (`true`, `3` for 3.0)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)
