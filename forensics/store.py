"""The local store: Parquet (zstd) files of records and events, one pair per source, plus a manifest.

Layout (plain enough for DuckDB or Spark to read as is):
    <store>/manifest.json            {"store_version": N, "sources": {source_id: SourceEntry}}
    <store>/records/<source_id>.parquet
    <store>/events/<source_id>.parquet
    <store>/tmp/                     staging; never read
A source lands atomically: its files are written under tmp/, renamed into place, and only then added to
the manifest (replaced with os.replace, under a lock). Readers only read what the manifest lists, so an
interrupted ingest leaves the store exactly as before that source, and concurrent ingests both land.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl
from filelock import FileLock

from .schema import EVENT_SCHEMA, RECORD_SCHEMA, conform, empty_events, empty_records

STORE_VERSION = 1
_THREAD_LOCK = threading.RLock()
DEFAULT_STORE = ".forensics"


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


def default_store() -> Path:
    return Path(os.environ.get("FORENSICS_STORE", DEFAULT_STORE))


class Store:
    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else default_store()

    # -- layout
    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    def records_file(self, sid: str) -> Path:
        return self.path / "records" / f"{sid}.parquet"

    def events_file(self, sid: str) -> Path:
        return self.path / "events" / f"{sid}.parquet"

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
        entries = [SourceEntry(**v) for v in self.manifest()["sources"].values()]
        return sorted(entries, key=lambda e: (e.path, e.source_id))

    def find(self, sha256: str) -> SourceEntry | None:
        for e in self.sources():
            if e.sha256 == sha256:
                return e
        return None

    def find_fingerprint(self, fingerprint: str) -> list[SourceEntry]:
        return [e for e in self.sources() if e.fingerprint == fingerprint]

    # -- writing
    def staging(self) -> Path:
        d = self.path / "tmp" / uuid.uuid4().hex
        d.mkdir(parents=True, exist_ok=True)
        return d

    def commit(self, entry: SourceEntry, records: Path, events: Path, replace: tuple[str, ...] = ()) -> None:
        """Move staged files into place and list the source in the manifest, atomically."""
        with self.lock():
            data = self.manifest()
            os.replace(records, self.records_file(entry.source_id))
            os.replace(events, self.events_file(entry.source_id))
            for sid in replace:
                if sid != entry.source_id:
                    data["sources"].pop(sid, None)
            data["sources"][entry.source_id] = asdict(entry)
            self._write_manifest(data)
            for sid in replace:
                if sid != entry.source_id:
                    self.records_file(sid).unlink(missing_ok=True)
                    self.events_file(sid).unlink(missing_ok=True)

    def update(self, entry: SourceEntry, records: Path | None = None, events: Path | None = None) -> None:
        """Replace a listed source's files and entry (anchoring, rescans)."""
        with self.lock():
            data = self.manifest()
            if records is not None:
                os.replace(records, self.records_file(entry.source_id))
            if events is not None:
                os.replace(events, self.events_file(entry.source_id))
            data["sources"][entry.source_id] = asdict(entry)
            self._write_manifest(data)

    def update_events(self, source_id: str, events: Path, count: int) -> None:
        """Replace a source's events and only its `events` count (re-read under the lock, so an update
        another process made meanwhile, such as dmesg anchoring, is kept)."""
        with self.lock():
            data = self.manifest()
            if source_id not in data["sources"]:
                return  # the source went away meanwhile
            os.replace(events, self.events_file(source_id))
            data["sources"][source_id]["events"] = count
            self._write_manifest(data)

    def cleanup(self, staging: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)

    @property
    def rulepack_versions(self) -> dict[str, str]:
        """Name -> digest of each rule pack in force (built-ins plus FORENSICS_RULES)."""
        from .rulepacks import load_rules

        return dict(load_rules().pack_versions())

    # -- reading
    def _scan(self, files: list[Path], schema: dict, empty: pl.DataFrame) -> pl.LazyFrame:
        files = [f for f in files if f.exists()]
        if not files:
            return empty.lazy()
        return pl.scan_parquet([str(f) for f in files])

    def records(self, source_ids: list[str] | None = None) -> pl.LazyFrame:
        ids = source_ids if source_ids is not None else [e.source_id for e in self.sources()]
        return self._scan([self.records_file(s) for s in ids], RECORD_SCHEMA, empty_records())

    def events(self, source_ids: list[str] | None = None) -> pl.LazyFrame:
        ids = source_ids if source_ids is not None else [e.source_id for e in self.sources()]
        return self._scan([self.events_file(s) for s in ids], EVENT_SCHEMA, empty_events())


def write_parquet(df: pl.DataFrame, path: Path, schema: dict) -> None:
    conform(df, schema).write_parquet(path, compression="zstd", statistics=True, row_group_size=256_000)


def sink_parquet(lf: pl.LazyFrame, path: Path, schema: dict) -> None:
    """Write a lazy frame in schema order, streaming (bounded memory whatever its size)."""
    cols = [pl.col(n).cast(t) if n in lf.collect_schema().names() else pl.lit(None, dtype=t).alias(n)
            for n, t in schema.items()]
    lf.select(cols).sink_parquet(path, compression="zstd", compression_level=1, statistics=True, row_group_size=65_536)


