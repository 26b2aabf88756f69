"""The local store: Parquet (zstd) files of records and events, one pair per source, plus a manifest.

Layout (plain enough for DuckDB or Spark to read as is):
    <store>/manifest.json            {"store_version": N, "sources": {source_id: SourceEntry},
                                      "superseded": {"records/<name>": unix time replaced, ...}}
    <store>/records/<source_id>[.<generation>].parquet   the entry's `records_name`
    <store>/events/<source_id>[.<generation>].parquet    the entry's `events_name`
    <store>/profiles/                caches derived from the files above (forensics/profile.py, sourcefile.py):
                                     never the truth, rebuilt when missing
    <store>/tmp/                     staging; never read
A source lands atomically: its files are written under tmp/, renamed into place, and only then added to
the manifest (replaced with os.replace, under a lock). Readers only read the files the manifest lists, so
an interrupted ingest leaves the store exactly as before that source, and concurrent ingests both land.
A listed file is never overwritten: a rewrite (anchoring, rescan, --force) lands under a new generation
name and the manifest is switched to it, so a kill at any point leaves a manifest that agrees with the files
it lists (at worst an orphan that `forensics store check --repair` deletes). The old file stays, listed under
the manifest's `superseded` with the time it was replaced, for SUPERSEDED_GRACE seconds, so a reader that
read the manifest before the switch still finds it; a later write (or `store check --repair`) deletes it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Literal

import polars as pl
from filelock import FileLock

from .schema import conform, empty_events, empty_records

STORE_VERSION = 2
SUPERSEDED_GRACE = 900.0  # seconds a replaced file stays for the readers that listed it before the switch
_THREAD_LOCK = threading.RLock()
DEFAULT_STORE = ".forensics"


class _Bin:
    """Directories deleted one after another on a background thread of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []

    def put(self, d: Path) -> None:
        with self._lock:
            if self._pool is None:  # its thread is joined at interpreter exit: nothing is left half-deleted
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="store-bin")
            self._pending = [f for f in self._pending if not f.done()]
            self._pending.append(self._pool.submit(shutil.rmtree, d, ignore_errors=True))

    def wait(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for f in pending:
            f.result()


_BIN = _Bin()
MANIFEST = "manifest.json"   # a store's list of its sources, beside `records/` and `events/`


def is_store(path: str | Path) -> bool:
    """Whether a directory is laid out as a store (`Store.init`: a manifest beside `records/` and `events/`): its
    files are the tool's own, never logs (a directory ingested leaves one out)."""
    p = Path(path)
    return (p / MANIFEST).is_file() and (p / "records").is_dir() and (p / "events").is_dir()


class StoreError(Exception):
    pass


@dataclass(frozen=True)
class SourceEntry:
    source_id: str
    path: str
    sha256: str
    size: int
    format: str
    formats: list[str]
    confidence: float
    host: str | None
    records: int
    lines: int
    unparsed: int
    invalid_utf8: int
    first_ts: str | None
    last_ts: str | None
    time_anchor: str
    ts_sources: dict[str, int]
    events: int
    tool_version: str
    fingerprint: str
    reversed: bool = False
    notes: list[str] = field(default_factory=list)
    records_name: str = ""   # the file under records/ (set when the source is committed)
    events_name: str = ""    # the file under events/
    read_with: dict = field(default_factory=dict)  # the options its lines were read with (ingestoptions.read_with; {}:
                                                   # a store written before they were kept, read with the defaults)
    year_from: str = ""      # where its year-less stamps took their year (timefix.YEAR_GIVEN ...; "": none, or a
                             # store written before it was kept): one from the source itself anchors another's


_ENTRY_FIELDS = frozenset(f.name for f in fields(SourceEntry))


def entry_of(raw: dict) -> SourceEntry:
    """A manifest's source entry; keys a later version added are left out (its store stays readable), and
    those it lacks take their defaults (a store written before they were kept)."""
    return SourceEntry(**{k: v for k, v in raw.items() if k in _ENTRY_FIELDS})


Kind = Literal["records", "events"]


def plain_name(sid: str) -> str:
    """The file name of a source's first generation (store version 1 had only this one)."""
    return f"{sid}.parquet"


def _fresh_name(data: dict, kind: Kind, sid: str) -> str:
    """A name no listed or superseded file has: the plain one for a new source, else a new generation."""
    if sid not in data["sources"] and f"{kind}/{plain_name(sid)}" not in data.get("superseded", {}):
        return plain_name(sid)
    return f"{sid}.{uuid.uuid4().hex[:16]}.parquet"


def default_store() -> Path:
    return Path(os.environ.get("FORENSICS_STORE", DEFAULT_STORE))


class Store:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else default_store()

    # -- layout
    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    def file(self, kind: Kind, sid: str, name: str = "") -> Path:
        """The path of a source's records or events file of the given name (its plain name when "")."""
        return self.path / kind / (name or plain_name(sid))

    @property
    def cache_dir(self) -> Path:
        """Where caches derived from the store's files are kept (created by whoever writes one)."""
        return self.path / "profiles"

    def records_file(self, sid: str) -> Path:
        """The records file the manifest lists for `sid`."""
        return self._listed_files("records", [sid])[0]

    def events_file(self, sid: str) -> Path:
        """The events file the manifest lists for `sid`."""
        return self._listed_files("events", [sid])[0]

    def _listed_files(self, kind: Kind, ids: list[str]) -> list[Path]:
        """The files the manifest lists for these sources; read again when one is gone (a writer switched the
        manifest to new files meanwhile)."""
        files = self._named(kind, ids, self._cached_sources())
        if not all(f.exists() for f in files):
            files = self._named(kind, ids, self._cached_sources(fresh=True))
        return files

    def _named(self, kind: Kind, ids: list[str], sources: dict) -> list[Path]:
        return [self.file(kind, sid, (sources.get(sid) or {}).get(f"{kind}_name", "")) for sid in ids]

    def _cached_sources(self, fresh: bool = False) -> dict:
        """The manifest's sources, parsed again only when manifest.json was replaced (for the readers that
        resolve file names per source: read only, never handed out)."""
        try:
            st = self.manifest_path.stat()
        except FileNotFoundError:
            return {}
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = getattr(self, "_cache", None)
        if fresh or cached is None or cached[0] != key:
            cached = (key, self.manifest()["sources"])
            self._cache = cached
        return cached[1]

    def exists(self) -> bool:
        return self.manifest_path.exists()

    def init(self) -> None:
        for d in ("records", "events", "tmp"):
            (self.path / d).mkdir(parents=True, exist_ok=True)
        if not self.manifest_path.exists():
            with self.lock():
                if not self.manifest_path.exists():
                    self._write_manifest({"store_version": STORE_VERSION, "sources": {}})

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive across processes (a lock file) and across threads of this process."""
        self.path.mkdir(parents=True, exist_ok=True)
        with _THREAD_LOCK, FileLock(str(self.path / ".lock"), timeout=600):
            yield

    # -- manifest
    def manifest(self) -> dict:
        try:
            data = json.loads(self.manifest_path.read_text())
        except FileNotFoundError:
            return {"store_version": STORE_VERSION, "sources": {}}
        except json.JSONDecodeError as e:
            raise StoreError(f"{self.manifest_path}: manifest is not valid JSON ({e}); run `forensics store check`") from e
        if data.get("store_version") != STORE_VERSION:
            from .storecheck import upgrade  # migrations; the next write persists the upgraded manifest

            data = upgrade(data)
        return data

    def _write_manifest(self, data: dict) -> None:
        tmp = self.path / f"manifest.{uuid.uuid4().hex}.tmp"
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, self.manifest_path)

    def sources(self) -> list[SourceEntry]:
        entries = [entry_of(v) for v in self.manifest()["sources"].values()]
        return sorted(entries, key=lambda e: (e.path, e.source_id))

    def find(self, sha256: str) -> SourceEntry | None:
        for e in self.sources():
            if e.sha256 == sha256:
                return e
        return None

    def of_path(self, path: str) -> list[SourceEntry]:
        """The sources listed under this path (the manifest parsed again only when it was replaced)."""
        return sorted((entry_of(v) for v in self._cached_sources().values() if v.get("path") == path),
                      key=lambda e: e.source_id)

    def find_fingerprint(self, fingerprint: str) -> list[SourceEntry]:
        return [e for e in self.sources() if e.fingerprint == fingerprint]

    def entry(self, source_id: str) -> SourceEntry | None:
        """The source's entry as the manifest lists it now (None when it is not listed)."""
        raw = self.manifest()["sources"].get(source_id)
        return entry_of(raw) if raw is not None else None

    # -- writing
    def staging(self) -> Path:
        d = self.path / "tmp" / uuid.uuid4().hex
        d.mkdir(parents=True, exist_ok=True)
        return d

    def commit(self, entry: SourceEntry, records: Path, events: Path, replace_ids: tuple[str, ...] = ()) -> None:
        """Move staged files into place and list the source in the manifest, atomically (the sources in
        `replace_ids` are unlisted in the same manifest write; their files are deleted after it)."""
        with self.lock():
            data = self.manifest()
            sid = entry.source_id
            old = data["sources"].get(sid)
            names = {k: _fresh_name(data, k, sid) for k in ("records", "events")}
            os.replace(records, self.file("records", sid, names["records"]))
            os.replace(events, self.file("events", sid, names["events"]))
            gone = [data["sources"].pop(r) for r in replace_ids if r != sid and r in data["sources"]]
            data["sources"][sid] = asdict(replace(entry, records_name=names["records"], events_name=names["events"]))
            expired = supersede(data, [*gone, *([old] if old else [])])
            self._write_manifest(data)
            self._delete(expired)

    def update(self, entry: SourceEntry, records: Path | None = None, events: Path | None = None,
               based_on: SourceEntry | None = None) -> bool:
        """Replace a listed source's files and entry (anchoring, rescans). With `based_on` (the entry the
        new files were computed from), nothing changes and False is returned when another process rewrote
        the source's files meanwhile: compute them again from the entry listed now."""
        with self.lock():
            data = self.manifest()
            sid = entry.source_id
            old = data["sources"].get(sid)
            if based_on is not None and not _same_files(old, based_on):
                return False
            names = {k: (old or {}).get(f"{k}_name", "") or plain_name(sid) for k in ("records", "events")}
            for kind, staged in (("records", records), ("events", events)):
                if staged is not None:
                    names[kind] = _fresh_name(data, kind, sid)
                    os.replace(staged, self.file(kind, sid, names[kind]))
            data["sources"][sid] = asdict(replace(entry, records_name=names["records"], events_name=names["events"]))
            expired = supersede(data, [old] if old else [])
            self._write_manifest(data)
            self._delete(expired)
            return True

    def remove(self, source_ids: Sequence[str]) -> list[SourceEntry]:
        """Unlist these sources, atomically (one manifest write); their files are deleted once superseded for
        the grace period, as replaced files are (a query reading them meanwhile still finds them). The entries
        removed (those listed)."""
        with self.lock():
            data = self.manifest()
            gone = [data["sources"].pop(sid) for sid in dict.fromkeys(source_ids) if sid in data["sources"]]
            if not gone:
                return []
            expired = supersede(data, gone)
            self._write_manifest(data)
            self._delete(expired)
        return [entry_of(e) for e in gone]

    def update_events(self, source_id: str, events: Path, count: int, records_name: str | None = None) -> bool:
        """Replace a source's events and only its `events` count (re-read under the lock, so an update
        another process made meanwhile, such as dmesg anchoring, is kept). With `records_name` (the records
        file the events were matched from), nothing changes and False is returned when the source's
        records were rewritten meanwhile: match them again. False also when the source went away."""
        with self.lock():
            data = self.manifest()
            old = data["sources"].get(source_id)
            if old is None:
                return False  # the source went away meanwhile
            if records_name is not None and (old.get("records_name") or plain_name(source_id)) != records_name:
                return False
            name = _fresh_name(data, "events", source_id)
            os.replace(events, self.file("events", source_id, name))
            data["sources"][source_id] = {**old, "events": count, "events_name": name}
            expired = supersede(data, [old])
            self._write_manifest(data)
            self._delete(expired)
            return True

    def _delete(self, rels: list[str]) -> None:
        """Delete superseded files (`kind/name`), after the manifest that unlists them is written: a kill
        before leaves orphans, never holes."""
        for rel in rels:
            (self.path / rel).unlink(missing_ok=True)

    def cleanup(self, staging: Path) -> None:
        """Delete a staging directory on a background thread (`settle` waits for it): on a file system that
        trims freed blocks (ext4 mounted with `discard`), deleting the ~250 staged parts of a 1 GiB ingest took
        3 s, which the ingest no longer waits for."""
        _BIN.put(staging)

    def settle(self) -> None:
        """Wait until the staging directories handed to `cleanup` are deleted."""
        _BIN.wait()

    @property
    def rulepack_versions(self) -> dict[str, str]:
        """Name -> digest of each rule pack in force (built-ins plus FORENSICS_RULES)."""
        from .rulepacks import rule_texts

        return dict(rule_texts(self.cache_dir).versions)

    # -- reading
    def files_of(self, kind: Kind, source_ids: list[str] | None = None) -> list[Path]:
        """The records or events files the manifest lists for these sources (all: None) that exist, in the
        order `records()`/`events()` read them."""
        ids = source_ids if source_ids is not None else [e.source_id for e in self.sources()]
        return [f for f in self._listed_files(kind, ids) if f.exists()]

    def _scan(self, kind: Kind, source_ids: list[str] | None, empty: pl.DataFrame) -> pl.LazyFrame:
        return scan_files(self.files_of(kind, source_ids), empty)

    def records(self, source_ids: list[str] | None = None) -> pl.LazyFrame:
        return self._scan("records", source_ids, empty_records())

    def records_of(self, entry: SourceEntry) -> pl.LazyFrame:
        """The records of exactly the files `entry` lists (an entry read before: they may be gone)."""
        return pl.scan_parquet(str(self.file("records", entry.source_id, entry.records_name)))

    def events(self, source_ids: list[str] | None = None) -> pl.LazyFrame:
        return self._scan("events", source_ids, empty_events())

    def events_of(self, entry: SourceEntry) -> pl.LazyFrame:
        """The events of exactly the file `entry` lists."""
        return pl.scan_parquet(str(self.file("events", entry.source_id, entry.events_name)))


def scan_files(files: list[Path], empty: pl.DataFrame) -> pl.LazyFrame:
    """A lazy scan of these store files (`empty`, lazily, when there are none)."""
    if not files:
        return empty.lazy()
    return pl.scan_parquet([str(f) for f in files])


_NAME = re.compile(r"([0-9A-Za-z_-]{1,128})(\.[0-9a-f]{1,32})?\.parquet")


def supersede(data: dict, entries: list[dict], grace: float = SUPERSEDED_GRACE) -> list[str]:
    """Add the files of these replaced entries that no entry names any more to the manifest's `superseded`
    (replaced now), and take off it the ones replaced `grace` seconds ago or more: those are returned, to be
    deleted once the manifest is written."""
    now = time.time()
    listed = {f"{k}/{e.get(f'{k}_name') or plain_name(sid)}" for sid, e in data["sources"].items()
              for k in ("records", "events")}
    raw = data.get("superseded")
    sup = dict(raw) if isinstance(raw, dict) else {}
    for e in entries:
        sid = e.get("source_id", "")
        for k in ("records", "events"):
            rel = f"{k}/{e.get(f'{k}_name') or plain_name(sid)}"
            if rel not in listed:
                sup.setdefault(rel, now)
    expired = [rel for rel, at in sup.items()
               if rel not in listed and (not isinstance(at, (int, float)) or now - at >= grace)]
    for rel in [*expired, *(r for r in sup if r in listed)]:
        sup.pop(rel, None)
    if sup:
        data["superseded"] = sup
    else:
        data.pop("superseded", None)
    return [rel for rel in expired if valid_rel(rel)]


def valid_rel(rel: str) -> bool:
    """Is `rel` a `records/<name>` or `events/<name>` path of a store file (never a path outside)?"""
    kind, _, name = rel.partition("/") if isinstance(rel, str) else ("", "", "")
    return kind in ("records", "events") and valid_name(name.split(".", 1)[0], name)


def valid_name(sid: str, name: str) -> bool:
    """Is `name` a file name the source `sid` may own (`<sid>.parquet` or `<sid>.<hex>.parquet`)?"""
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    return m is not None and m.group(1) == sid


def _same_files(raw: dict | None, entry: SourceEntry) -> bool:
    """Does the listed entry `raw` still name the files `entry` named?"""
    if raw is None:
        return False
    sid = entry.source_id
    return all((raw.get(f"{k}_name") or plain_name(sid)) == (getattr(entry, f"{k}_name") or plain_name(sid))
               for k in ("records", "events"))


def write_parquet(df: pl.DataFrame, path: Path, schema: dict) -> None:
    conform(df, schema).write_parquet(path, compression="zstd", statistics=True, row_group_size=256_000)


def sink_parquet(lf: pl.LazyFrame, path: Path, schema: dict) -> None:
    """Write a lazy frame in schema order, streaming (bounded memory whatever its size)."""
    cols = [pl.col(n).cast(t) if n in lf.collect_schema().names() else pl.lit(None, dtype=t).alias(n)
            for n, t in schema.items()]
    lf.select(cols).sink_parquet(path, compression="zstd", compression_level=1, statistics=True, row_group_size=65_536)


