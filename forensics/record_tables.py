"""What incidents read of the records, from the sources' profiles, kept between queries; and the hosts and units
the lines that name none are taken to be (the incidents and the `--host` and `--unit` filters of the queries read
them the same way).

Every incident query starts from the same tables over every source's profile: the hosts of each file, the spans
per (source, path, host, class of log, unit), the units each source's systemd lines name, and which of the
units files are named after some record names. Grouping and sorting them takes a quarter of a second on a store
of ten million records, and they change only when a records file does, so they are kept in the store's cache,
named after the records files (name, size, time) and the profiles' version.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePath

import polars as pl

from . import profile
from .cachefiles import code_digest, generation, prune, stamps, write_atomic
from .kubepods import scope_id

_CODE = code_digest(__file__)           # how the tables are computed and kept (other code: `code`, below)

KEPT = 4                        # the newest tables kept in a store's cache


@dataclass(frozen=True)
class RecordTables:
    hosts: pl.DataFrame          # (source_id, path, host) distinct, sorted by path, host
    spans: pl.DataFrame          # every span (see _record_tables), before hosts and units are filled
    units: pl.DataFrame          # (source_id, unit list) named by each source's systemd lines
    file_units: frozenset[str]   # the units named after a file (`x.log` -> `x.service`) that some record names


def unit_of_file(path: str) -> str:
    """The unit a file is named after: `sglang-k26.log` -> `sglang-k26.service`."""
    return f"{PurePath(path).name.rsplit('.', 1)[0]}.service"


def _key(store, source_ids: Sequence[str], code: str) -> str | None:  # noqa: ANN001
    try:
        files = [store.records_file(sid) for sid in source_ids]
    except (KeyError, IndexError):
        return None
    files_stamp = stamps(files)
    if files_stamp is None:
        return None
    ids = "\0".join(source_ids)
    return hashlib.sha256(f"tables\0{_CODE}\0{profile._TAG}\0{code}\0{ids}\0{files_stamp}".encode()).hexdigest()[:32]


def _paths(cache_dir: Path, key: str) -> tuple[Path, Path, Path]:
    base = f"tables~{key}"
    return cache_dir / f"{base}.hosts.parquet", cache_dir / f"{base}.spans.parquet", cache_dir / f"{base}.units.json"


def record_tables(store, compute: Callable[[], RecordTables], code: str = "") -> RecordTables:  # noqa: ANN001
    """The store's RecordTables: read from its cache when kept there, else `compute()`d (and kept when the store
    is writable). `code` names the code that computes them (a digest of it: a change cannot read old tables)."""
    sids = list(dict.fromkeys(e.source_id for e in store.sources()))
    key = _key(store, sids, code)
    if key is None:
        return compute()
    hp, sp, up = _paths(store.cache_dir, key)
    try:
        raw = json.loads(up.read_text(encoding="utf-8"))
        units = pl.DataFrame({"source_id": raw["source_id"], "unit": raw["unit"]},
                             schema={"source_id": pl.String, "unit": pl.List(pl.String)})
        return RecordTables(hosts=pl.read_parquet(hp), spans=pl.read_parquet(sp), units=units,
                            file_units=frozenset(raw["file_units"]))
    except (OSError, ValueError, KeyError, TypeError, pl.exceptions.PolarsError):  # not kept yet, or replaced
        pass
    t = compute()
    _keep(t, hp, sp, up)
    return t


def _keep(t: RecordTables, hp: Path, sp: Path, up: Path) -> None:
    units = json.dumps({"source_id": t.units["source_id"].to_list(), "unit": t.units["unit"].to_list(),
                        "file_units": sorted(t.file_units)})
    # the JSON last: a reader that finds it finds the frames of the same key
    if write_atomic([(hp, lambda tmp: t.hosts.write_parquet(tmp, compression="zstd", compression_level=1)),
                     (sp, lambda tmp: t.spans.write_parquet(tmp, compression="zstd", compression_level=1)),
                     (up, lambda tmp: tmp.write_text(units, encoding="utf-8"))]):
        prune(hp.parent, "tables", generation(hp), KEPT)


# ----------------------------------------------------------------------------------------------------------
# computing the tables


def log_class() -> pl.Expr:
    """The class of log of each record: kernel (a dmesg, or the journal's kernel lines), systemd, or service."""
    ident = pl.col("ident").fill_null("")
    return (pl.when(pl.col("format").fill_null("").str.starts_with("dmesg") | (ident == "kernel")).then(pl.lit("kernel"))
            .when(ident.str.starts_with("systemd") | (ident == "init.scope")).then(pl.lit("systemd"))
            .otherwise(pl.lit("service")))


def _spans_of(lf: pl.LazyFrame, keys: Sequence[str]) -> pl.LazyFrame:
    return (lf.with_columns(log_class().alias("log")).group_by(*keys, "host", "log", "unit")
            .agg(pl.col("format").first(), pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last"),
                 pl.len().alias("records"), pl.col("ts").is_null().sum().alias("untimed")))


def _profiles(store) -> list:  # noqa: ANN001 - list[profile.Profile]
    """The profile of each listed source (its spans and ranks, cached per records file: no record is read;
    the environment hits are left to the fingerprint of the hosts that need them)."""
    out = []
    for sid in dict.fromkeys(e.source_id for e in store.sources()):
        p = profile.of_source(store, sid, env=False)
        if p is not None:
            out.append(p)
    return out


def _record_hosts(profiles: Sequence) -> pl.DataFrame:
    """(source_id, path, host) as the records have them (distinct): the hosts of each file."""
    schema = {"source_id": pl.String, "path": pl.String, "host": pl.String}
    out = [p.groups.select(*schema).unique(maintain_order=True) for p in profiles]
    return pl.concat([*out, pl.DataFrame(schema=schema)], how="vertical_relaxed")


def one_host_files(rec: pl.DataFrame) -> dict[str, str]:
    """path -> host for the files (`_record_hosts`) that name exactly one host and no host on some records."""
    by = rec.group_by("path").agg(pl.col("host").drop_nulls().unique().alias("hosts"),
                                  pl.col("host").is_null().any().alias("none"))
    one = by.filter(pl.col("none") & (pl.col("hosts").list.len() == 1))
    return dict(zip(one["path"].to_list(), one["hosts"].list.first().to_list()))


def _record_tables(profiles: Sequence) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(spans per source/host/class/unit, units named by each source's systemd lines), from each source's
    profile: its records counted per (source, path, host, ident, unit, format); the class of log is given to
    those groups, and the spans are their sums (the format of a span is that of its first record). A filter on
    the records' host and path is the same filter on the spans (both are span keys)."""
    spans: list[pl.DataFrame] = []
    units: list[pl.DataFrame] = []
    systemd = (pl.col("ident").fill_null("").str.starts_with("systemd") & pl.col("unit").is_not_null()
               & (pl.col("ident") != "systemd-journald"))
    for p in profiles:
        spans.append(p.groups.with_columns(log_class().alias("log")).group_by("source_id", "path", "host", "log", "unit")
                     .agg(pl.col("format").sort_by("first_line").first(), pl.col("first").min(), pl.col("last").max(),
                          pl.col("records").sum().cast(pl.UInt32), pl.col("untimed").sum().cast(pl.UInt32)))
        units.append(p.groups.filter(systemd).group_by("source_id").agg(pl.col("unit").unique().sort()))
    empty = pl.DataFrame(schema={"source_id": pl.String, "path": pl.String, "host": pl.String, "ident": pl.String,
                                 "unit": pl.String, "format": pl.String, "ts": pl.Datetime("us", "UTC")}).lazy()
    spans.append(_spans_of(empty, ["source_id", "path"]).collect())
    units.append(empty.group_by("source_id").agg(pl.col("unit").unique().sort()).collect())
    spans_df = pl.concat(spans, how="vertical_relaxed").sort("path", "host", "log", "unit", nulls_last=True)
    return spans_df, pl.concat(units, how="vertical_relaxed")


def known_units(profiles: Sequence, units: Sequence[str]) -> set[str]:
    """Which of these units some record names."""
    want = sorted(set(units))
    return {u for p in profiles for u in p.groups.filter(pl.col("unit").is_in(want))["unit"].unique().to_list()}


def compute_tables(store) -> RecordTables:  # noqa: ANN001
    """The store's RecordTables, from its sources' profiles (no record is read)."""
    profiles = _profiles(store)
    rec = _record_hosts(profiles).sort("path", "host", nulls_last=True)
    spans, units = _record_tables(profiles)
    return RecordTables(hosts=rec, spans=spans, units=units,
                        file_units=frozenset(known_units(profiles, [unit_of_file(p) for p in rec["path"].to_list()])))


def of_store(store) -> RecordTables:  # noqa: ANN001
    """The store's RecordTables, read from its cache or computed (and kept)."""
    return record_tables(store, partial(compute_tables, store))


# ----------------------------------------------------------------------------------------------------------
# the hosts and units of lines that name none


@dataclass(frozen=True)
class HostFills:
    """The host taken for lines that name none: `only`, the store's one host (every such line is its); with
    several, `files`: path -> the one host a file names on its other lines (a `systemctl status` paste's untimed
    lines, a dmesg's boots left unanchored)."""

    only: str | None
    files: dict[str, str]

    def filled(self, more: Mapping[str, str] | None = None) -> pl.Expr:
        """The `host` column with the host taken where it is null (`more`: path -> host, for other files)."""
        if self.only is not None:
            return pl.col("host").fill_null(pl.lit(self.only))
        by_path = {**self.files, **(more or {})}
        if not by_path:
            return pl.col("host")
        return pl.coalesce(pl.col("host"), pl.col("path").replace_strict(by_path, default=None, return_dtype=pl.String))


def host_fills(tables: RecordTables, hosts: Iterable[str]) -> HostFills:
    """The HostFills of a store whose tables are `tables` and whose hosts (of records, events and sources) are
    `hosts`."""
    every = {h for h in hosts if h} | {h for h in tables.hosts["host"].to_list() if h}
    if len(every) == 1:
        return HostFills(only=next(iter(every)), files={})
    return HostFills(only=None, files=one_host_files(tables.hosts))


@dataclass(frozen=True)
class UnitFills:
    """The unit taken for a source's lines that name none: `journal`, a journal whose systemd lines name one unit
    (`journalctl -u X`: its other journal lines are X's); `file`, a file named after a unit that some event or
    record names (`sglang-k26.log`: its lines are sglang-k26.service's). Both map source_id -> unit."""

    journal: dict[str, str]
    file: dict[str, str]

    def filled(self, fillable: pl.Expr) -> pl.Expr:
        """The `unit` column, with the unit taken where `fillable` (lines that name none and may be a unit's: not
        the kernel's); a journal's lines take a journal unit only, the others a file unit only."""
        ju = pl.col("source_id").replace_strict(self.journal, default=None, return_dtype=pl.String)
        fu = pl.col("source_id").replace_strict(self.file, default=None, return_dtype=pl.String)
        is_journal = pl.col("format").fill_null("").str.starts_with("journal")
        return pl.when(fillable & is_journal).then(ju).when(fillable).then(fu).otherwise(pl.col("unit"))

    def sources_of(self, units: Iterable[str]) -> list[str]:
        """The sources whose lines without a unit are taken to be one of `units`' (sorted)."""
        want = set(units)
        return sorted(sid for m in (self.journal, self.file) for sid, u in m.items() if u in want)


def unit_fills(tables: RecordTables, event_units: Iterable[str]) -> UnitFills:
    """The UnitFills of a store whose tables are `tables` and whose events name `event_units`."""
    # (a container's scope is no unit to take lines for: systemd names it for its OOM note or its start, while the
    # container's output goes to the runtime's log, and the kubelet's lines beside it are the kubelet's)
    journal = {sid: us[0] for sid, us in zip(tables.units["source_id"].to_list(), tables.units["unit"].to_list())
               if len(us) == 1 and scope_id(us[0]) is None}
    named = set(event_units) | tables.file_units
    paths = dict(zip(tables.hosts["source_id"].to_list(), tables.hosts["path"].to_list()))
    file = {sid: u for sid, p in sorted(paths.items())
            if sid not in journal and not p.endswith(".service") and (u := unit_of_file(p)) in named}
    return UnitFills(journal=journal, file=file)
