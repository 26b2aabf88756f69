"""The one data contract between stages: record and event schemas, declared once."""

from __future__ import annotations

from enum import Enum

import polars as pl


class TimeSource(str, Enum):
    """How a record's UTC time was obtained."""

    EXACT = "exact"                  # the stamp carried a date, a time and a zone (or epoch seconds)
    ZONE_ASSUMED = "zone_assumed"    # date and time printed, zone assumed (--tz, default UTC)
    YEAR_INFERRED = "year_inferred"  # no year printed; year taken from an anchor (and zone assumed)
    BOOT_ANCHORED = "boot_anchored"  # kernel monotonic seconds + a boot-time anchor
    MONOTONIC_ONLY = "monotonic_only"  # kernel monotonic seconds, no anchor: ordered within its boot only
    NONE = "none"                    # no time at all (untimed line)


TS = pl.Datetime("us", "UTC")
# the times Python's datetime can hold (what every reader converts to): 0001-01-01 .. 9999-12-31T23:59:59.999999Z
TS_MIN_US, TS_MAX_US = -62_135_596_800_000_000, 253_402_300_799_999_999
OUT_OF_RANGE = "no time: the stamp falls outside years 1..9999 once in UTC"   # the ts_anchor of such records

RECORD_SCHEMA: dict[str, pl.DataType] = {
    "ts": TS,                    # UTC, microseconds; null when unknown
    "ts_source": pl.String,      # a TimeSource value
    "ts_text": pl.String,        # the stamp exactly as printed
    "ts_anchor": pl.String,      # what an inferred time was inferred from (human readable), null if exact
    "boot_id": pl.String,        # journald boot id or a synthetic `dmesg:<path>#<n>` boot label
    "mono": pl.Float64,          # monotonic seconds since boot, where printed
    "host": pl.String,
    "ident": pl.String,          # syslog identifier / process name (`systemd`, `kernel`, `python3`, ...)
    "pid": pl.Int64,
    "unit": pl.String,           # systemd unit the record is from or about
    "rank": pl.String,           # SGLang rank tokens, e.g. `TP0`, `DP1 TP3`
    "level": pl.String,          # priority / level name (`err`, `info`, `ERROR`, ...)
    "message": pl.String,        # the whole (possibly multi-line) message, prefix removed
    "source_id": pl.String,      # sha256 of the source bytes (first 16 hex)
    "path": pl.String,           # the path as given on the command line
    "line": pl.Int64,            # first line number (1-based) in the source
    "line_end": pl.Int64,        # last line number of the record
    "format": pl.String,         # the format that parsed the record
}

EVENT_SCHEMA: dict[str, pl.DataType] = {
    "ts": TS,
    "ts_source": pl.String,
    "kind": pl.String,
    "rule": pl.String,
    "severity": pl.String,
    "role": pl.String,
    "host": pl.String,
    "unit": pl.String,
    "pid": pl.Int64,
    "title": pl.String,
    "fields": pl.String,         # JSON object of the extracted, cast fields
    "message": pl.String,
    "source_id": pl.String,
    "path": pl.String,
    "line": pl.Int64,
    "line_end": pl.Int64,
    "format": pl.String,
}

# where a source's year-less stamps took their year (timefix.SourceClock.year_from, SourceEntry.year_from): from
# the source itself (given with --year, or found in its own lines), it may anchor another source's year
YEAR_GIVEN, YEAR_FILE, YEAR_HOST, YEAR_MTIME, YEAR_NOW = "given", "file", "host", "mtime", "now"
YEAR_OWN = (YEAR_GIVEN, YEAR_FILE)

SEVERITIES = ("critical", "error", "warning", "info")
ROLES = ("cause", "symptom", "context")


def empty_records() -> pl.DataFrame:
    return pl.DataFrame(schema=RECORD_SCHEMA)


def empty_events() -> pl.DataFrame:
    return pl.DataFrame(schema=EVENT_SCHEMA)


def conform(df: pl.DataFrame, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Add missing columns as nulls, cast, and order columns as in `schema`."""
    if df.width == 0:  # selecting literals from a frame with no columns would make one row
        return pl.DataFrame(schema=schema)
    cols = []
    for name, dtype in schema.items():
        if name in df.columns:
            cols.append(pl.col(name).cast(dtype))
        else:
            cols.append(pl.lit(None, dtype=dtype).alias(name))
    return df.select(cols)


def detached(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with its strings copied out: the rows a filter or a group-by keeps would otherwise keep the text
    buffers of the whole frame they came from alive."""
    return df.with_columns(pl.col(c) + pl.lit("") for c, t in df.schema.items() if t == pl.String)
