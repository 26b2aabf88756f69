"""What an ingest is asked to do (`IngestOptions`), and the read options a source in the store was read with:
which of those given now bear on it, so that the same bytes are read again with them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone

from .schema import TimeSource
from .store import SourceEntry
from .zonefix import inferred_zone

@dataclass(frozen=True)
class IngestOptions:
    fmt: str | None = None
    host: str | None = None
    year: int | None = None
    tz: str = "UTC"
    boot_time: datetime | None = None
    force: bool = False
    rules_dirs: tuple[str, ...] = ()
    match: bool = True                 # False: store records only (`forensics rescan` extracts events later)
    # the read options (`read_with`'s keys) given on the command line; None: those that differ from the defaults
    given: tuple[str, ...] | None = None


def read_with(opts: IngestOptions) -> dict[str, str | int | None]:
    """The options that change how a source's lines are read, as its manifest entry keeps them (JSON)."""
    return {"format": opts.fmt, "host": opts.host, "year": opts.year, "tz": opts.tz,
            "boot_time": None if opts.boot_time is None else opts.boot_time.astimezone(timezone.utc).isoformat()}


# the read options: their keys in `read_with`, and their fields of IngestOptions (also the CLI's parameter names)
READ_OPTIONS = {"format": "fmt", "host": "host", "year": "year", "tz": "tz", "boot_time": "boot_time"}


def given_options(opts: IngestOptions) -> tuple[str, ...]:
    asked, default = read_with(opts), read_with(IngestOptions())
    return opts.given if opts.given is not None else tuple(k for k in asked if asked[k] != default[k])


def read_with_of(entry: SourceEntry) -> dict[str, str | int | None]:
    """The options a stored source was read with (an entry from before they were kept: the defaults)."""
    return {**read_with(IngestOptions()), **entry.read_with}


def reading_options(entry: SourceEntry, opts: IngestOptions) -> IngestOptions:
    """The options a stored source is read again with (--force, or a changed option): those given, and for the
    others the ones it was read with (a later `ingest --host h` keeps the boot time an earlier one gave)."""
    stored, given = read_with_of(entry), given_options(opts)
    kept = {name: stored[key] for key, name in READ_OPTIONS.items() if key not in given}
    if kept.get("boot_time") is not None:
        kept["boot_time"] = datetime.fromisoformat(kept["boot_time"])
    return replace(opts, **kept)


def changed_options(entry: SourceEntry, opts: IngestOptions) -> list[str]:
    """The read options asked for (given) that the stored source was not read with and that bear on it: the same
    bytes are read again with them rather than left as they are. An option not given never counts (a later
    `ingest dir/` with no options keeps each source as it was read), nor one its records show it does not need
    (`ingest --year 2024 logs/` reads again the year-less sources only)."""
    asked, stored, given = read_with(opts), _as_read(entry), given_options(opts)
    return [k for k in asked if k in given and asked[k] != stored[k] and _bears_on(entry, k)]


def _as_read(entry: SourceEntry) -> dict[str, str | int | None]:
    """The options a stored source's times stand as read with: a zone read off other lines (`zonefix`) counts as
    one, so that `--tz UTC` given after it reads the source again, with UTC."""
    stored = read_with_of(entry)
    zone = inferred_zone(entry.time_anchor)
    return {**stored, "tz": f"{zone}, inferred from its lines"} if zone else stored


def _bears_on(entry: SourceEntry, key: str) -> bool:
    """Whether a read option can change this stored source, by how its times were obtained: a year only year-less
    stamps, a zone only stamps that print none, a boot time only kernel seconds, a host only a source that names
    none (or was given one); a format always."""
    kinds = {k for k, n in entry.ts_sources.items() if n}
    if key == "year":
        return TimeSource.YEAR_INFERRED.value in kinds
    if key == "tz":
        return bool(kinds & {TimeSource.YEAR_INFERRED.value, TimeSource.ZONE_ASSUMED.value})
    if key == "boot_time":
        return bool(kinds & {TimeSource.MONOTONIC_ONLY.value, TimeSource.BOOT_ANCHORED.value})
    if key == "host":
        return entry.host is None or read_with_of(entry)["host"] is not None
    return True


def describe_change(entry: SourceEntry, opts: IngestOptions, keys: Sequence[str]) -> str:
    """`read again, with --boot-time 2025-05-25T08:00:00+00:00 (it was read with none)`, each changed option."""
    asked, stored = read_with(opts), _as_read(entry)
    return "read again, with " + "; ".join(
        f"--{k.replace('_', '-')} {asked[k] if asked[k] is not None else '(none)'} "
        f"(it was read with {stored[k] if stored[k] is not None else 'none'})" for k in keys)
