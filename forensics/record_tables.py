"""What incidents read of the records, from the sources' profiles, kept between queries.

Every incident query starts from the same tables over every source's profile: the hosts of each file, the spans
per (source, path, host, class of log, unit), the units each source's systemd lines name, and which of the
units files are named after some record names. Grouping and sorting them takes a quarter of a second on a store
of ten million records, and they change only when a records file does, so they are kept in the store's cache,
named after the records files (name, size, time) and the profiles' version.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

import polars as pl

from . import profile
from .cachefiles import code_digest, generation, prune, stamps, write_atomic

_CODE = code_digest(__file__)           # how the tables are kept (how they are computed: `code`, below)

KEPT = 4                        # the newest tables kept in a store's cache


@dataclass(frozen=True)
class RecordTables:
    hosts: pl.DataFrame          # (source_id, path, host) distinct, sorted by path, host
    spans: pl.DataFrame          # every span (see incidents._record_tables), before hosts are filled
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
