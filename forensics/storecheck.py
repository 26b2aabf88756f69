"""Store integrity: the store format version, its migrations, and `forensics store check [--repair]`.

The version lives in `manifest.json` as `store_version` (`forensics.store.STORE_VERSION` is the one this
code writes). A migration turns a manifest of version N into version N+1; `MIGRATIONS` maps N to that
function. Migrations are pure functions of the manifest (no file I/O), so they can run in memory on every
read (`upgrade`) and be made permanent under the store lock (`migrate`).

Version 0 (before versions existed): `manifest.json` was `{"sources": {...}}` with no `store_version` (or
`"store_version": 0`), and a source entry had no `fingerprint`, `reversed`, `notes` or `tool_version`.
Version 1: a source's files were always `records/<id>.parquet` and `events/<id>.parquet`, replaced in place
by anchoring and rescans (a kill between the file and the manifest left them disagreeing). Version 2: each
entry names its files (`records_name`, `events_name`); a rewrite lands under a new name and the manifest is
switched to it.

`check` verifies the manifest against the files, under the store lock (writers wait; readers do not):
every listed source has the records and events files its entry names, which decode whole, hold the schema's columns and as
many rows as the manifest's `records` / `events` say, all rows of the source's own `source_id`, and that
id is the start of the entry's sha256; files in `records/` or `events/` that no entry lists are orphans;
anything in `tmp/` and `manifest.*.tmp` files are leftovers of an interrupted write. Files the manifest lists
under `superseded` (replaced by a rewrite, kept a while for readers) are neither. `repair` removes the
orphans and leftovers and the superseded files older than `min_age`, and drops the broken sources from the
manifest (with their files): re-ingest them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import polars as pl

from .schema import EVENT_SCHEMA, RECORD_SCHEMA
from .store import STORE_VERSION, SourceEntry, Store, StoreError, supersede, plain_name, valid_name, valid_rel

# -- versions and migrations ------------------------------------------------------------------------------

Migration = Callable[[dict[str, Any]], dict[str, Any]]
MIGRATIONS: dict[int, Migration] = {}


def migration(from_version: int) -> Callable[[Migration], Migration]:
    """Register `fn` as the migration from `from_version` to `from_version + 1`."""

    def register(fn: Migration) -> Migration:
        if from_version in MIGRATIONS:
            raise ValueError(f"two migrations from store version {from_version}")
        MIGRATIONS[from_version] = fn
        return fn

    return register


@migration(0)
def _v0_to_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 added `fingerprint` (cheap identity of the bytes), `reversed`, `notes` and `tool_version`.

    The fingerprint of a version-0 source is unknown (""): the next ingest of the same bytes reads them
    once more and then finds the source by its sha256, as before."""
    sources = {}
    for sid, entry in (data.get("sources") or {}).items():
        if isinstance(entry, dict):
            entry = dict(entry)
            entry.setdefault("source_id", sid)
            entry.setdefault("fingerprint", "")
            entry.setdefault("reversed", False)
            entry.setdefault("notes", [])
            entry.setdefault("tool_version", "unknown (store version 0)")
        sources[sid] = entry
    return {**data, "sources": sources, "store_version": 1}


@migration(1)
def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 lists each source's file names (`records_name`, `events_name`): version 1's were always
    `<id>.parquet`."""
    sources = {}
    for sid, entry in (data.get("sources") or {}).items():
        if isinstance(entry, dict):
            entry = dict(entry)
            entry.setdefault("records_name", plain_name(sid))
            entry.setdefault("events_name", plain_name(sid))
        sources[sid] = entry
    return {**data, "sources": sources, "store_version": 2}


def manifest_version(data: Any) -> int:
    """The store version of a parsed manifest (0 when it predates versions). StoreError if unreadable."""
    if not isinstance(data, dict):
        raise StoreError("manifest.json does not hold a JSON object")
    v = data.get("store_version", 0)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise StoreError(f"manifest.json has store_version {v!r}, not a version number")
    return v


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a parsed manifest of any known version) migrated in memory to STORE_VERSION.

    Raises StoreError for a version newer than this forensics knows, or a gap in the migrations."""
    v = manifest_version(data)
    if v > STORE_VERSION:
        raise StoreError(f"store version {v} was written by a newer forensics (this one reads up to "
                         f"{STORE_VERSION}); upgrade forensics or use another store (--store DIR)")
    while v < STORE_VERSION:
        step = MIGRATIONS.get(v)
        if step is None:
            raise StoreError(f"no migration from store version {v}; re-ingest into a new store (--store DIR)")
        data = step(data)
        if manifest_version(data) != v + 1:
            raise StoreError(f"the migration from store version {v} did not produce version {v + 1}")
        v += 1
    return data


def _read_manifest(store: Store) -> dict[str, Any]:
    try:
        data = json.loads(store.manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise StoreError(f"{store.manifest_path}: not valid JSON ({e})") from e
    manifest_version(data)
    return data


def _write_manifest(store: Store, data: dict[str, Any]) -> None:
    tmp = store.path / f"manifest.{uuid.uuid4().hex}.tmp"
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, store.manifest_path)


def migrate(store_path: Path | str) -> int:
    """Migrate the store's manifest on disk to STORE_VERSION, under the store lock.

    Returns the number of migration steps applied (0: the store was already current, or has no manifest).
    Raises StoreError when the manifest is unreadable or from a newer forensics. Takes the store lock:
    do not call it while holding that lock (`Store.manifest()` can use the lock-free `upgrade` instead)."""
    store = Store(store_path)
    if not store.manifest_path.exists():
        return 0
    with store.lock():
        try:
            data = _read_manifest(store)
        except FileNotFoundError:
            return 0
        before = manifest_version(data)
        if before == STORE_VERSION:
            return 0
        _write_manifest(store, upgrade(data))
        return STORE_VERSION - before


# -- check and repair ---------------------------------------------------------------------------------------

_SID = re.compile(r"[0-9A-Za-z_-]{1,128}")
KINDS = ("manifest", "version", "entry", "missing", "corrupt", "schema", "count", "source-id", "orphan", "leftover")


@dataclass(frozen=True)
class Problem:
    kind: str                 # one of KINDS
    subject: str              # the file or source concerned
    message: str              # what is wrong
    fix: str                  # what to do about it
    source_id: str | None = None   # the manifest entry that is broken (dropped by --repair), if any
    path: str | None = None        # the log file of that source, to re-ingest
    removable: Path | None = None  # a file or directory --repair deletes (orphans, leftovers)

    def line(self) -> str:
        return f"{self.kind}: {self.subject}: {self.message}; {self.fix}"


@dataclass
class CheckResult:
    store: str
    version: int | None = None
    sources: int = 0
    records: int = 0
    events: int = 0
    problems: list[Problem] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        probs = []
        for p in self.problems:
            d = asdict(p)
            d["removable"] = None if p.removable is None else str(p.removable)
            probs.append(d)
        return {"store": self.store, "store_version": self.version, "sources": self.sources,
                "records": self.records, "events": self.events, "ok": self.ok, "problems": probs,
                "repaired": self.repaired, "notes": self.notes}


_ENTRY_FIELDS = {f.name: f for f in fields(SourceEntry)}
_REQUIRED = [f.name for f in fields(SourceEntry) if f.default is MISSING and f.default_factory is MISSING]


def _entry_problem(sid: str, raw: Any) -> str | None:
    """Why a manifest entry cannot be a SourceEntry (None when it can)."""
    if not isinstance(raw, dict):
        return "its entry is not a JSON object"
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        return f"its entry lacks {', '.join(missing)}"
    unknown = sorted(k for k in raw if k not in _ENTRY_FIELDS)
    if unknown:
        return f"its entry has unknown field(s) {', '.join(unknown)}"
    if raw.get("source_id") != sid:
        return f"it is listed under {sid!r} but its source_id is {raw.get('source_id')!r}"
    for k in ("records", "events", "lines", "size"):
        v = raw.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return f"its {k} is {v!r}, not a count"
    for k in ("path", "sha256", "format"):
        if not isinstance(raw.get(k), str):
            return f"its {k} is {raw.get(k)!r}, not a string"
    sha = raw["sha256"].lower()
    if not sid or not sha.startswith(sid.lower()):
        return f"its id {sid!r} is not the start of its sha256 {raw['sha256']!r}"
    for k in ("records_name", "events_name"):
        if k in raw and raw[k] != "" and not valid_name(sid, raw[k]):
            return f"its {k} is {raw[k]!r}, not {sid}.parquet or {sid}.<hex>.parquet"
    return None


def _files(store: Store, sid: str, raw: Any) -> tuple[Path, Path]:
    """The records and events files an entry names (the plain names where it names none or bad ones)."""
    def name(k: str) -> str:
        n = raw.get(f"{k}_name", "") if isinstance(raw, dict) else ""
        return n if valid_name(sid, n) else plain_name(sid)

    return store.file("records", sid, name("records")), store.file("events", sid, name("events"))


def _verify_file(path: Path, schema: dict[str, pl.DataType], sid: str) -> tuple[str, str] | tuple[None, int]:
    """Decode the whole Parquet file. Returns (None, rows) or (problem kind, message)."""
    try:
        lf = pl.scan_parquet(str(path))
        names = lf.collect_schema().names()
        missing = [c for c in schema if c not in names]
        if missing:
            return "schema", f"lacks the column(s) {', '.join(missing)}"
        # hashing every column forces every page to be decompressed and decoded
        row = lf.select(pl.len().alias("__n"), (pl.col("source_id") != sid).sum().alias("__other"),
                        *[pl.col(c).hash().sum().alias(f"__h{i}") for i, c in enumerate(schema)]
                        ).collect(engine="streaming").row(0)
    except (OSError, pl.exceptions.PolarsError) as e:
        return "corrupt", f"cannot be decoded as Parquet ({str(e).splitlines()[0][:200]})"
    if row[1]:
        return "source-id", f"{row[1]} row(s) carry another source_id than {sid}"
    return None, int(row[0])


def _listing(d: Path) -> list[Path]:
    try:
        return sorted(d.iterdir())
    except FileNotFoundError:
        return []


def _check(store: Store, verify_sources: bool, min_age: float) -> tuple[CheckResult, dict[str, Any] | None]:
    """Check under the caller's lock. Returns the result and the parsed manifest (None if unreadable)."""
    res = CheckResult(store=str(store.path))
    reingest = f"forensics --store {store.path} ingest"
    data: dict[str, Any] | None
    try:
        data = _read_manifest(store)
    except FileNotFoundError:
        data = {"store_version": STORE_VERSION, "sources": {}}
        if any(_listing(store.path / d) for d in ("records", "events")):
            res.problems.append(Problem("manifest", str(store.manifest_path), "missing, but records/ or events/ "
                                        "hold files", "restore manifest.json from a backup, or move the store "
                                        "aside and re-ingest the logs"))
            return res, None
    except StoreError as e:
        res.problems.append(Problem("manifest", str(store.manifest_path), str(e).split(": ", 1)[-1],
                                    "restore manifest.json from a backup, or move the store aside and re-ingest "
                                    "the logs (nothing in the store is read until then)"))
        return res, None
    res.version = manifest_version(data)
    if res.version > STORE_VERSION:
        raise StoreError(f"{store.path}: store version {res.version} was written by a newer forensics (this one "
                         f"checks up to {STORE_VERSION}); check it with that version")
    if res.version < STORE_VERSION:
        res.problems.append(Problem("version", str(store.manifest_path),
                                    f"store version {res.version}, this forensics writes {STORE_VERSION}",
                                    "run `forensics store check --repair` to migrate it (forensics also reads it "
                                    "as is)"))
        data = upgrade(data)
    sources = data.get("sources")
    if not isinstance(sources, dict):
        res.problems.append(Problem("manifest", str(store.manifest_path), "its `sources` is not a JSON object",
                                    "restore manifest.json from a backup, or move the store aside and re-ingest"))
        return res, None
    listed: set[Path] = set()
    for sid in sorted(sources):
        raw = sources[sid]
        path = raw.get("path") if isinstance(raw, dict) and isinstance(raw.get("path"), str) else None
        name = path or sid
        fix = (f"`--repair` drops it from the manifest; then re-ingest it: {reingest} {path}" if path
               else "`--repair` drops it from the manifest; then re-ingest its log")
        rfile, efile = _files(store, sid, raw)
        listed.update((rfile, efile))
        why = _entry_problem(sid, raw)
        if why is not None:
            res.problems.append(Problem("entry", name, why, fix, source_id=sid, path=path))
            continue
        bad = False
        for f, schema, key in ((rfile, RECORD_SCHEMA, "records"), (efile, EVENT_SCHEMA, "events")):
            subject = f"{name} ({f.relative_to(store.path)})"
            if not f.is_file():
                res.problems.append(Problem("missing", subject, f"the {key} file is missing", fix,
                                            source_id=sid, path=path))
                bad = True
                continue
            kind, got = _verify_file(f, schema, sid)
            if kind is not None:
                res.problems.append(Problem(kind, subject, f"the {key} file {got}", fix, source_id=sid, path=path))
                bad = True
            elif got != raw[key]:
                extra = (" (or run `forensics rescan`, which rewrites the events and their count)"
                         if key == "events" else "")
                res.problems.append(Problem("count", subject, f"holds {got} {key}, the manifest says {raw[key]}",
                                            fix + extra, source_id=sid, path=path))
                bad = True
        if bad:
            continue
        res.sources += 1
        res.records += raw["records"]
        res.events += raw["events"]
        if verify_sources and path:
            res.notes.extend(_verify_source(path, raw["sha256"], reingest))
    superseded = data.get("superseded") or {}
    if isinstance(superseded, dict):  # replaced files kept a while for readers that listed them: not orphans
        listed.update(store.path / rel for rel in superseded if valid_rel(rel))
    for d in ("records", "events"):
        for f in _listing(store.path / d):
            if f not in listed:
                res.problems.append(Problem("orphan", str(f.relative_to(store.path)),
                                            "listed by no manifest entry (left by an interrupted write)",
                                            "`--repair` deletes it; nothing reads it", removable=f))
    now = time.time()
    leftovers = _listing(store.path / "tmp") + sorted(store.path.glob("manifest.*.tmp"))
    for f in leftovers:
        try:
            age = now - f.lstat().st_mtime
        except FileNotFoundError:
            continue
        young = age < min_age
        res.problems.append(Problem(
            "leftover", str(f.relative_to(store.path)),
            "staging left by an interrupted ingest or rescan" + (f" ({age:.0f} s old: may belong to one still "
                                                                  f"running)" if young else ""),
            (f"`--repair` deletes it once it is {min_age:.0f} s old, or at once with --min-age 0 when no "
             f"ingest is running") if young else "`--repair` deletes it",
            removable=None if young else f))
    return res, data


def _verify_source(path: str, sha256: str, reingest: str) -> list[str]:
    import hashlib

    p = Path(path)
    if not p.is_file():
        return [f"{path}: the logged file is no longer there (the store still holds its records)"]
    h = hashlib.sha256()
    try:
        with open(p, "rb") as fh:
            while chunk := fh.read(8 << 20):
                h.update(chunk)
    except OSError as e:
        return [f"{path}: cannot read the logged file to compare its sha256 ({e.strerror or e})"]
    if h.hexdigest() != sha256:
        return [f"{path}: the file changed since it was ingested (sha256 {h.hexdigest()[:16]}..., the store "
                f"holds {sha256[:16]}...); re-ingest it to add the new bytes: {reingest} {path}"]
    return []


def check(store_path: Path | str, *, verify_sources: bool = False, min_age: float = 60.0) -> CheckResult:
    """Verify the store (read only). StoreError when there is no store or it is from a newer forensics."""
    store = _existing(store_path)
    with store.lock():
        res, _ = _check(store, verify_sources, min_age)
    return res


def _existing(store_path: Path | str) -> Store:
    store = Store(store_path)
    if not store.path.is_dir() or not any((store.path / n).exists() for n in ("manifest.json", "records", "events")):
        raise StoreError(f"{store.path}: no store there (ingest logs first, or pass --store DIR)")
    return store


def repair(store_path: Path | str, *, verify_sources: bool = False, min_age: float = 60.0) -> CheckResult:
    """Check, then fix what can be fixed: migrate the manifest, drop broken sources (and their files), delete
    orphans and leftovers. The result lists the problems found and what was done (`repaired`)."""
    store = _existing(store_path)
    with store.lock():
        res, data = _check(store, verify_sources, min_age)
        if data is None:
            for p in res.problems:
                if p.kind == "leftover" and p.removable is not None:
                    _remove(p.removable)
                    res.repaired.append(f"deleted {p.subject}")
            return res
        drop = {p.source_id: p.path for p in res.problems if p.source_id is not None}
        changed = any(p.kind == "version" for p in res.problems) or bool(drop)
        raws = dict(data["sources"])
        for sid in drop:
            data["sources"].pop(sid, None)
        expired = supersede(data, [], min_age)  # replaced files no reader can still be reading
        if changed or expired:
            _write_manifest(store, data)
            if any(p.kind == "version" for p in res.problems):
                res.repaired.append(f"migrated the manifest to store version {STORE_VERSION}")
        for rel in expired:
            _remove(store.path / rel)
            res.repaired.append(f"deleted {rel} (replaced by a newer file of its source)")
        for sid, path in sorted(drop.items(), key=lambda kv: str(kv[1])):
            for f in _files(store, sid, raws.get(sid)):
                if f.parent.parent == store.path and valid_name(sid, f.name) and _SID.fullmatch(sid):
                    _remove(f)   # never a path outside the store, whatever the manifest says
            res.repaired.append(f"dropped {path or sid} from the store; re-ingest it: "
                                f"forensics --store {store.path} ingest {path or '<its log file>'}")
        for p in res.problems:
            if p.kind in ("orphan", "leftover") and p.removable is not None:
                _remove(p.removable)
                res.repaired.append(f"deleted {p.subject}")
    return res


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def remaining(res: CheckResult) -> list[Problem]:
    """The problems `repair` could not fix (a broken manifest, leftovers too young to delete)."""
    return [p for p in res.problems
            if p.kind == "manifest" or (p.kind == "leftover" and p.removable is None)]


__all__ = ["MIGRATIONS", "migration", "migrate", "upgrade", "manifest_version", "check", "repair", "remaining",
           "CheckResult", "Problem"]
