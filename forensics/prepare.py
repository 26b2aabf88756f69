"""The store's events made ready for incidents: hosts and units filled where the logs imply them (vectorised, over
every event and record), the coverage of the sources, what was assumed to get there, and the event source that
prepares the events themselves as they are asked for (`correlate_store.EventSource`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import cache as once, partial
from pathlib import PurePath
from typing import Any

import polars as pl

from . import gpuholders
from .clustering import CONTEXT_KINDS
from .configreview import Knowledge, enricher
from .correlate import is_sglang_sign, with_runs
from .correlate_store import EventSource, narrow_cache, part_expr
from .coverage import Coverage, SourceSpan
from .eventview import KERNEL_KINDS, UNKNOWN_HOST, EventView
from .model import Gap
from .record_tables import compute_tables, host_fills, record_tables, unit_fills
from .schema import empty_events
from .store import scan_files


@dataclass(frozen=True)
class Prepared:
    """The store's events ready for correlation (read on demand), and what was assumed to get there."""

    source: EventSource                       # the events, prepared as they are asked for (primaries, copies)
    coverage: Coverage
    assumptions: tuple[tuple[str, Gap], ...]  # (path, what was assumed about it): hosts, units
    sources: tuple[Any, ...]                  # SourceEntry
    host_sources: Mapping[str, tuple[str, ...]]  # host -> source ids with records of it
    single_host: bool
    host_paths: Mapping[str | None, set[str]] = field(default_factory=dict)  # host -> paths of its spans
    parts: tuple[str, ...] = ()               # every host incidents can be grouped under
    kept: frozenset[str] | None = None        # the hosts whose events `source` holds (None: all)

    @property
    def spans(self) -> tuple[SourceSpan, ...]:
        return self.coverage.spans


def prepare(store, kn: Knowledge, only: Callable[[list[str]], set[str] | None] | None = None) -> Prepared:  # noqa: ANN001
    """Hosts and units filled where the logs imply them (vectorised, over every event and record), the
    coverage of the sources; the events themselves are prepared on demand (Prepared.source). `only` (given
    every host an incident can be grouped under) names the hosts whose events are wanted (None: all)."""
    sources = tuple(store.sources())
    event_files = store.files_of("events")
    raw = scan_files(event_files, empty_events())

    kept_tables = record_tables(store, partial(compute_tables, store))
    rec = kept_tables.hosts
    ev_hosts, ev_units, ev_hostless = pl.collect_all([
        raw.select(pl.col("host").unique()), raw.select(pl.col("unit").drop_nulls().unique()),
        raw.filter(pl.col("host").is_null()).select(pl.col("path").unique())])
    assumptions: list[tuple[str, Gap]] = []
    # -- hosts: one host in the store fills the files that name none; several: each such file is its own
    hosts = sorted({h for h in rec["host"].to_list() if h} | {h for h in ev_hosts["host"].to_list() if h}
                   | {e.host for e in sources if e.host})
    fills_h = host_fills(kept_tables, hosts)
    single = fills_h.only is not None
    with_host = {p for p, h in zip(rec["path"].to_list(), rec["host"].to_list()) if h is not None}
    hostless = sorted({p for p, h in zip(rec["path"].to_list(), rec["host"].to_list())
                       if h is None and p not in with_host})
    if single:
        fill_host = fills_h.filled()
        for p in hostless:
            assumptions.append((p, Gap(what=f"The host of {p}",
                                       why=f"{p} names no host; it is taken to be {hosts[0]}, the only host in the "
                                           "store.", commands=())))
    else:
        pseudo = {p: f"unknown host ({PurePath(p).name})" for p in hostless}
        # a dmesg that names several hosts (machines' output put together) and none on some records (a boot that
        # names none): those records are kept apart as the file's unknown host
        names: dict[str, set[str | None]] = {}
        for p, h in zip(rec["path"].to_list(), rec["host"].to_list()):
            names.setdefault(p, set()).add(h)
        dmesg = pl.col("format").fill_null("").str.starts_with("dmesg")
        dmesgs = set(kept_tables.spans.filter(dmesg)["path"].to_list())
        mixed = sorted(p for p, hs in names.items() if None in hs and len(hs - {None}) > 1 and p in dmesgs)
        pseudo.update({p: f"unknown host ({PurePath(p).name})" for p in mixed})
        for p in mixed:
            assumptions.append((p, Gap(what=f"Which host the records of {p} that name none came from",
                                       why=(f"{p} names {len(names[p]) - 1} hosts "
                                            f"({', '.join(sorted(h for h in names[p] if h))}) and none on these, so "
                                            "they are kept apart and cannot be joined with another host's."),
                                       commands=())))
        # a file that names one host, and none on some records (a `systemctl status` paste's untimed lines, a
        # dmesg's boots left unanchored): those records are that host's
        own = fills_h.files
        hostless_events = set(ev_hostless["path"].to_list())
        fill_host = fills_h.filled(pseudo)
        for p, h in sorted(own.items()):
            if p not in hostless_events:  # only their events' host is told (a journal's `-- Boot --` lines have none)
                continue
            assumptions.append((p, Gap(what=f"The host of the records of {p} that name none",
                                       why=f"{p} names {h} on its other records and no host on these; they are "
                                           f"taken to be {h}'s.", commands=())))
        for p in hostless:
            assumptions.append((p, Gap(what=f"Which host {p} came from",
                                       why=(f"{p} names no host and the store holds {len(hosts)} hosts (`forensics "
                                            "sources` lists them), so its events are kept apart and cannot be joined "
                                            "with another host's." if hosts else
                                            f"{p} names no host, and no other file of the store names one: its "
                                            f"events are kept apart as `{pseudo[p]}` and cannot be joined with "
                                            "another file's (give each file its machine's name)."),
                                       commands=(f"forensics ingest --host HOST --force {p}",))))
    if single and hostless:
        assumptions = [(p, Gap(what="The host of " + (hostless[0] if len(hostless) == 1 else
                                                      f"{len(hostless)} files that name none"),
                               why=(f"{', '.join(hostless)} name{'s' if len(hostless) == 1 else ''} no host; taken to be "
                                    f"{hosts[0]}, the only host in the store."), commands=()))
                       for p in hostless]
    # -- the hosts asked for: their records' spans (and those without a host) are all that is read
    parts = sorted(raw.with_columns(fill_host.alias("host")).select(part_expr().unique()).collect()
                   .to_series().to_list())
    kept = only(parts) if only is not None else None
    wanted = None
    if kept is not None:
        # a kept host's records, the records without a host that are its (single host) or every host's (a file
        # that names a host elsewhere), and those of the files taken as a kept unknown host
        others = [] if single else [p for p in hostless if pseudo[p] not in kept]
        wanted = (pl.col("host").is_in(sorted(p for p in kept if not p.startswith(UNKNOWN_HOST)))
                  | ((pl.col("host").is_null() | (pl.col("host") == "")) & ~pl.col("path").is_in(others)))
    # (filtering the spans is filtering the records first: `wanted` reads their host and path, both span keys)
    spans_df = kept_tables.spans if wanted is None else kept_tables.spans.filter(wanted)
    spans_df = spans_df.with_columns(fill_host.alias("host"))
    # -- units: a journal whose systemd lines name one unit (`journalctl -u X`): its other journal lines are X's;
    # a file named after a unit some event or record names (`sglang-k26.log`): its lines are that unit's
    fills = unit_fills(kept_tables, ev_units["unit"].to_list())
    paths = dict(zip(rec["source_id"].to_list(), rec["path"].to_list()))
    for sid, unit in sorted(fills.file.items()):
        p = paths[sid]
        assumptions.append((p, Gap(what=f"The unit of {p}",
                                   why=f"{p} names no unit; its lines are taken to be {unit}'s (the file is named "
                                       "after it).", commands=())))
    not_kernel = pl.col("unit").is_null() & ~pl.col("kind").is_in(list(KERNEL_KINDS))
    events = raw.with_row_index("_row").with_columns(fill_host.alias("host")).with_columns(
        fills.filled(not_kernel).alias("unit"))
    spans_df = spans_df.with_columns(fills.filled(pl.col("unit").is_null() & (pl.col("log") == "service")).alias("unit"))

    sglang = once(partial(_sglang_units, events))   # read once, the first time a unit's end asks

    # the records with hosts and units filled, for the pids a CUDA OOM names (gpuholders): scanned the first time
    records = once(lambda: store.records().with_columns(fill_host.alias("host")).with_columns(
        fills.filled(pl.col("unit").is_null() & (pl.col("ident").fill_null("") != "kernel")).alias("unit")))

    def load(e: EventView) -> EventView:
        if e.kind == "cuda_oom" and e.t is not None:
            e = _with_load(store, e)
            if e.fields.get("others_pids"):
                e = gpuholders.with_holders(records(), events, e)
        return with_runs(e, sglang)

    # the narrow frame is kept in the store's cache, named after the events files and what fills their hosts
    # and units
    named = {"host": hosts[0] if single else pseudo, "journal_unit": fills.journal, "file_unit": fills.file,
             "excluded": sorted(CONTEXT_KINDS), "kernel_kinds": sorted(KERNEL_KINDS)}
    cache = narrow_cache(store.cache_dir, event_files, named) if event_files else None
    source = EventSource(events, enricher(kn), prepare_view=load, significant_kinds_excluded=CONTEXT_KINDS,
                         keep=part_expr().is_in(sorted(kept)) if kept is not None else None, cache=cache)
    coverage = Coverage.from_frame(spans_df.select("path", "format", "host", "log", "unit", "first", "last",
                                                   "records", "untimed"))
    host_sources: dict[str, list[str]] = {}
    sh = spans_df.select("source_id", "host").unique(maintain_order=True)
    for sid, h in zip(sh["source_id"].to_list(), sh["host"].to_list()):
        if h is not None and sid not in host_sources.setdefault(h, []):
            host_sources[h].append(sid)
    host_paths: dict[str | None, set[str]] = {}
    for h, p in spans_df.select("host", "path").unique().iter_rows():
        host_paths.setdefault(h, set()).add(p)
    return Prepared(source=source, coverage=coverage,
                    assumptions=tuple(assumptions), sources=sources,
                    host_sources={h: tuple(v) for h, v in host_sources.items()}, single_host=single,
                    host_paths=host_paths, parts=tuple(parts), kept=frozenset(kept) if kept is not None else None)


def _sglang_units(events: pl.LazyFrame) -> set[tuple[str | None, str]]:
    """(host, unit) of the units the store's events show running SGLang (`correlate.is_sglang_sign`): the units of
    SGLang lines, and of launch configurations whose command is SGLang's."""
    unit, kind = pl.col("unit"), pl.col("kind")
    named = unit.is_not_null() & (unit != "")
    rule = pl.col("rule").fill_null("")
    lines, configs = pl.collect_all([
        events.filter(named & rule.str.starts_with("sglang.")).select("host", "unit").unique(),
        events.filter(named & (kind == "server_config") & ~rule.str.starts_with("sglang."))
        .select("host", "unit", "kind", "rule", "fields").unique()])
    out: set[tuple[str | None, str]] = set(lines.iter_rows())
    for host, u, k, rule, raw in configs.iter_rows():
        try:
            fields = json.loads(raw) if raw else {}
        except ValueError:
            fields = {}
        fields = fields if isinstance(fields, dict) else {}
        if is_sglang_sign(k or "", rule or "", fields.get("command") or fields.get("argv")):
            out.add((host, u))
    return out


_BATCH = re.compile(r"#running-req: (\d+)")


_USAGE = re.compile(r"token usage: ([0-9.]+)")


_QUEUE = re.compile(r"#queue-req: (\d+)")


def _with_load(store, e: EventView) -> EventView:  # noqa: ANN001
    """A CUDA OOM with the server's load at the last batch line before it (SGLang's `#running-req: N`)."""
    lo = e.ts - timedelta(minutes=10)
    rows = (store.records([e.source_id])
            .filter(pl.col("ts").is_between(lo, e.ts) & pl.col("message").str.contains("#running-req: ", literal=True))
            .sort("ts", "line").tail(1).select("message", "path", "line").collect())
    if rows.height == 0:
        return e
    msg, path, line = rows.row(0)
    run, use, queue = _BATCH.search(msg), _USAGE.search(msg), _QUEUE.search(msg)
    parts = [f"{run.group(1)} requests were running"] if run else []
    if use:
        parts.append(f"the KV cache was {float(use.group(1)):.0%} full")
    if queue:
        parts.append(f"{queue.group(1)} requests were queued")
    if not parts:
        return e
    text = f"At the last batch before it ({path}:{line}), " + ", ".join(parts) + "."
    return replace(e, fields={**e.fields, "load_text": text, "running_req": int(run.group(1)) if run else None})
