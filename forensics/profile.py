"""A source's profile: the small tables the incident queries read instead of scanning its records.

`groups`: one row per (source_id, path, host, ident, unit, format) of the records, with the first and last
stamp, the number of records and of untimed ones, and the first line (records are stored in file order).
`ranks`: one row per (rank, host, source_id, whether the stamp is null) of the records that carry a TP rank,
with the earliest stamp and the first line. `env_hits`: the records holding one of the literals the
environment fingerprint reads versions from.

Each is a pure function of the records file, cached in `<store>/profiles/` under a name made of the records
file's name, size and mtime, and the profile's version and literals: a records file is never rewritten in
place (a rewrite lands under a new name), so a cached table is either exactly its file's or not found. Ingest
computes the groups and ranks of each source it lands (about 0.15 s per million records; no message is
read); the environment hits, which read every message, are computed by the first query that needs them. A
store written by an older build gets its profiles on first use; a read-only one still answers, without
keeping them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import uuid
from collections.abc import Iterable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from .schema import detached, empty_records

PROFILE_VERSION = 1
GROUP_KEYS = ("source_id", "path", "host", "ident", "unit", "format")
RANK_KEYS = ("rank", "host", "source_id")
HIT_COLUMNS = ("ts", "message", "path", "line", "host", "source_id")
# the literals (any case) of the lines the environment fingerprint reads versions from (environment.PATTERNS)
ENV_LITERALS = ("Linux version", "NVRM: loading", "Driver Version", "CUDA Version", "Cuda compilation tools",
                "site-packages/", "torch==", "torch ", "flashinfer", "sglang==", "sglang ", "NVIDIA ",
                "capability sm_", "avail mem=", "nvidia 0000:", "NVRM: GPU at PCI", "Unsupported gpu architecture",
                "/cuda-", "PCIe-only", "+cu1")
# a cached profile is of these literals: another list is another profile
_TAG = f"v{PROFILE_VERSION}-" + hashlib.sha256("\0".join(ENV_LITERALS).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Profile:
    groups: pl.DataFrame   # GROUP_KEYS, first, last, records, untimed, first_line
    ranks: pl.DataFrame    # RANK_KEYS, _null, ts (the earliest), first_line
    env_hits: pl.DataFrame | None  # HIT_COLUMNS: the records holding an ENV_LITERALS literal, in file order


SLICE_ROWS = 500_000   # records profiled at a time, when read back from a records file


PER_FILE = ("source_id", "path")  # one value on every record of a records file, as ingest writes them


def _per_file(records: pl.LazyFrame) -> dict[str, str]:
    """The PER_FILE columns whose value is the same on every record of the file, with it. Checked against the
    row groups' statistics (milliseconds: no row group needs reading); a column that varies (or is null) is
    grouped on like any other key."""
    head = records.select(PER_FILE).head(1).collect()
    if head.height == 0:
        return {}
    same = {}
    for col, v in head.row(0, named=True).items():
        differ = (pl.col(col) != v) | pl.col(col).is_null()
        if v is not None and records.filter(differ).select(pl.len()).collect()[0, 0] == 0:
            same[col] = v
    return same


def _tables(records: pl.LazyFrame, keys: list[str], rank_keys: list[str]) -> list[pl.LazyFrame]:
    """The groups and ranks of one slice of a source's records (`line` orders them: records are in file order),
    on these keys only: the per-file columns are not read, only put back at the end (a 4 GiB journal's profile:
    455 -> 370-410 MB peak RSS, 2.8 -> 2.3 s)."""
    lf = records.select(*dict.fromkeys([*keys, *rank_keys, "ts", "line"]))
    groups = lf.group_by(*keys).agg(
        pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last"), pl.len().cast(pl.UInt32).alias("records"),
        pl.col("ts").is_null().sum().cast(pl.UInt32).alias("untimed"), pl.col("line").min().alias("first_line"))
    ranks = (lf.filter(pl.col("rank").is_not_null())
             .group_by(*rank_keys, pl.col("ts").is_null().alias("_null"))
             .agg(pl.col("ts").min(), pl.col("line").min().alias("first_line")))
    return [groups, ranks]


def _hits(records: pl.LazyFrame) -> pl.DataFrame:
    h = (records.filter(pl.col("message").str.contains_any(list(ENV_LITERALS), ascii_case_insensitive=True))
         .select(*HIT_COLUMNS).collect())
    return detached(h)  # the few rows kept would otherwise hold the slice's text buffers


def _slices(records_file: Path) -> list[pl.LazyFrame]:
    lf = pl.scan_parquet(str(records_file))
    n = lf.select(pl.len()).collect().item()
    return [lf.slice(off, SLICE_ROWS) for off in range(0, n, SLICE_ROWS)] + [empty_records().lazy()]


def tables(records_file: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(groups, ranks) of a records file, a slice at a time (no message is read). The slices' counts are merged
    into the running ones only once they hold as many groups as it does, so each group is merged a few times,
    not once per slice: merging a whole journal's 285 k units (4 GiB) after every slice churned through so much
    memory that the allocator held 300 MB of freed pages. A streaming group-by over it measured 485 MB."""
    groups: pl.DataFrame | None = None
    pending: list[pl.DataFrame] = []
    ranks: pl.DataFrame | None = None
    same = _per_file(pl.scan_parquet(str(records_file)))
    keys = [k for k in GROUP_KEYS if k not in same]
    rank_keys = [k for k in RANK_KEYS if k not in same]
    for sl in _slices(records_file):
        g, r = pl.collect_all(_tables(sl, keys, rank_keys))
        pending.append(detached(g))
        if groups is None or sum(p.height for p in pending) >= groups.height:
            groups = _merge_groups(pl.concat([*([groups] if groups is not None else []), *pending]), keys)
            pending = []
        ranks = r if ranks is None else pl.concat([ranks, r]).group_by(*rank_keys, "_null").agg(
            pl.col("ts").min(), pl.col("first_line").min())
    assert groups is not None and ranks is not None  # _slices ends with an empty slice
    if pending:
        groups = _merge_groups(pl.concat([groups, *pending]), keys)
    back = [pl.lit(v, dtype=pl.String).alias(k) for k, v in same.items()]
    # A line is in one group only, so no two groups share a first line: sorted on it alone (an integer; the
    # string keys as tie-breaks cost a 4 GiB journal's 285 k groups +66 MB), then the per-file columns put back
    groups = (groups.sort("first_line").with_columns(back)
              .select(*GROUP_KEYS, "first", "last", "records", "untimed", "first_line"))
    ranks = ranks.sort("first_line").with_columns(back).select(*RANK_KEYS, "_null", "ts", "first_line")
    return groups, ranks


def _merge_groups(groups: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    return groups.group_by(*keys).agg(pl.col("first").min(), pl.col("last").max(), pl.col("records").sum(),
                                      pl.col("untimed").sum(), pl.col("first_line").min())


def env_hits(records_file: Path) -> pl.DataFrame:
    """The records of a file holding an ENV_LITERALS literal, in file order (reads every message: about
    0.15 s per million records, so left to the first query that needs them)."""
    return pl.concat([_hits(sl) for sl in _slices(records_file)])


_PARTS = ("groups", "ranks", "env_hits")


def _names(records_file: Path, cache_dir: Path) -> tuple[Path, ...] | None:
    """The cache files of this records file, `<records name>~<size>~<mtime>~<tag>.<part>.parquet` (None when
    the file is gone)."""
    try:
        st = records_file.stat()
    except OSError:
        return None
    base = f"{records_file.name.removesuffix('.parquet')}~{st.st_size}~{st.st_mtime_ns}~{_TAG}"
    return tuple(cache_dir / f"{base}.{part}.parquet" for part in _PARTS)


def _read(path: Path) -> pl.DataFrame | None:
    try:
        return pl.read_parquet(path)
    except (OSError, pl.exceptions.ComputeError):  # not cached yet
        return None


def _keep(df: pl.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        df.write_parquet(tmp, compression="zstd", compression_level=1)
        os.replace(tmp, path)
    except OSError:  # a read-only store: answer without keeping it
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _drop_stale(cache_dir: Path, sid: str, keep: tuple[Path, ...]) -> None:
    """The profiles of the source's other records files (generations replaced by a rewrite, or a plain
    name used again after its source was removed): a reader of a replaced file computes its own again."""
    for p in cache_dir.glob(f"{sid}*~*.parquet"):
        if p not in keep and p.name.split("~")[0].split(".")[0] == sid:
            with contextlib.suppress(OSError):  # a read-only store keeps them
                p.unlink(missing_ok=True)


_AHEAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forensics-env")
_PENDING: dict[Path, Future] = {}   # environment hits being computed ahead, by their cache file
_PENDING_LOCK = threading.Lock()


def env_hits_ahead(store, sids: Iterable[str]) -> int:  # noqa: ANN001 - store.Store
    """Start computing (and keeping) the environment hits of these sources that are not kept yet, one source at a
    time on a thread of its own, for a query that reads them after other work: polars scans the messages while
    the query's Python runs (a 37-incident day's report on a store of 10.7 M records whose hits are not kept:
    4.73-4.74 s against 4.92-5.08 s; both cores are busy then, so the Python work is slowed by what is saved).
    `of_source` takes a result computed ahead instead of computing it again. Returns how many were started."""
    started = 0
    for sid in sids:
        try:
            records_file = store.records_file(sid)
        except (KeyError, IndexError):
            continue
        paths = _names(records_file, store.cache_dir)
        if paths is None or paths[2].is_file():
            continue
        with _PENDING_LOCK:
            if paths[2] not in _PENDING:
                _PENDING[paths[2]] = _AHEAD.submit(_hits_kept, records_file, paths[2])
                started += 1
    return started


def _hits_kept(records_file: Path, path: Path) -> pl.DataFrame:
    hits = env_hits(records_file)
    _keep(hits, path)
    return hits


def _hits_ahead(path: Path) -> pl.DataFrame | None:
    """The environment hits computed ahead for this cache file (waiting for them), or None (none started, or they
    failed: the caller computes them)."""
    with _PENDING_LOCK:
        fut = _PENDING.pop(path, None)
    if fut is None:
        return None
    try:
        return fut.result()
    except (CancelledError, OSError, pl.exceptions.PolarsError):
        return None


def cancel_ahead() -> None:
    """Drop the computations started ahead that have not begun (the query that wanted them is over: the process
    would otherwise wait for them at exit), and the results no one took (kept on disk). One running goes on to
    its end, and is still taken by `of_source`."""
    with _PENDING_LOCK:
        for path, fut in list(_PENDING.items()):
            if fut.cancel() or fut.done():
                del _PENDING[path]


def kept_groups(store, sid: str) -> pl.DataFrame | None:  # noqa: ANN001 - store.Store
    """The groups of a source's profile (its distinct GROUP_KEYS, counted) when they are in the cache, else None
    (never computed here: a query that can do without them asks this)."""
    paths = _names(store.records_file(sid), store.cache_dir)
    return None if paths is None else _read(paths[0])


def of_source(store, sid: str, env: bool = True) -> Profile | None:  # noqa: ANN001 - store.Store
    """The profile of a listed source: the cached tables, else computed (and cached when the store is
    writable); None when its records file is gone (a writer replaced it meanwhile). `env=False`: without the
    environment hits (`env_hits` is then None), which read every message."""
    records_file = store.records_file(sid)
    paths = _names(records_file, store.cache_dir)
    if paths is None:
        return None
    gp, rp, hp = paths
    groups, ranks = _read(gp), _read(rp)
    if groups is None or ranks is None:
        if store.cache_dir.is_dir():
            _drop_stale(store.cache_dir, sid, paths)
        groups, ranks = tables(records_file)
        _keep(groups, gp)
        _keep(ranks, rp)
    hits = None
    if env:
        hits = _hits_ahead(hp)
        if hits is None:
            hits = _read(hp)
        if hits is None:
            hits = _hits_kept(records_file, hp)
    return Profile(groups=groups, ranks=ranks, env_hits=hits)
