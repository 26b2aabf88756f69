"""What a log format is: a declaration (a line pattern with named groups and a stamp kind).

A new text format is one module that builds a `LineFormat` and one sample file in
`samples/formats/`. Formats that are not line-oriented (journal JSON) subclass `LineFormat` and
override `parse`.

Named groups the engine understands in `pattern` (all optional except `msg`):
  stamp (the stamp as printed), mon, day, time, year, date, zone, epoch, mono, host, ident, pid,
  unit, rank, level, msg.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from pathlib import Path

import polars as pl

from ..schema import TimeSource

SAMPLES_DIR = Path(__file__).resolve().parent.parent.parent / "samples" / "formats"


class Stamp(str, Enum):
    """How the stamp groups of a format become a UTC time (see `forensics/timeparse.py`)."""

    SYSLOG_NOYEAR = "syslog_noyear"   # mon, day, time: `May 25 20:17:19[.123456]`; year and zone inferred
    ISO = "iso"                       # stamp: ISO 8601 with optional fraction and offset (`+HH:MM`, `+HHMM`, `Z`)
    FULL = "full"                     # date, time, zone: `Sun 2025-05-25 20:17:19[.us] UTC` (zone abbreviation)
    CTIME = "ctime"                   # mon, day, time, year: `Mon May 25 20:17:19 2025` (dmesg -T), zone assumed
    LOCAL = "local"                   # date, time: `2025-05-25 20:17:19[.mmm]` (SGLang, glog), zone assumed
    EPOCH = "epoch"                   # epoch: `1748204239.123456`
    MONO = "mono"                     # mono: seconds since boot (dmesg raw, short-monotonic)
    NONE = "none"                     # the format has no time


class Continuation(str, Enum):
    """Which unmatched lines after a record belong to it."""

    # only lines starting with white space: journalctl's continuation lines, and dmesg's (util-linux indents the
    # further lines of a multi-line kernel message), so a pasted section after a dmesg (nvidia-bug-report) is not
    # taken into its last record
    INDENTED = "indented"
    ANY = "any"             # any line not starting a record (Python tracebacks under a logger's line)
    NONE = "none"           # every line is its own record


@dataclass(frozen=True)
class LineFormat:
    name: str
    description: str
    pattern: str                      # Rust-regex (polars) with named groups; matches a record's first line
    stamp: Stamp
    continuation: Continuation = Continuation.INDENTED
    priority: int = 50                # lower is tried first when several formats match one line
    detect_weight: float = 1.0        # <1 for loose patterns (generic fallbacks) so specific formats win
    example: str = ""                 # one line shown by `forensics formats`
    notes: str = ""
    defaults: dict[str, str] = field(default_factory=dict)  # constant columns, e.g. {"ident": "kernel"}
    # Optional speed-up, never a second specification: an anchored regex for the common layout of a line's
    # head that the regex engine can run without backtracking (one-pass: ASCII digits, no lazy or ambiguous
    # repeats). It holds the groups of `pattern` except `msg`, plus `_head` spanning all text before the
    # message. Where it matches, its groups must be exactly those of `pattern` and the message the text
    # after `_head`; other lines go through `pattern`. tests/test_fastpath.py checks this equivalence.
    fast_pattern: str | None = None

    @property
    def sample_path(self) -> Path:
        return SAMPLES_DIR / f"{self.name}.log"

    def extract(self, lines: pl.Series) -> pl.DataFrame:
        """Groups of `pattern` for each line (all null where it does not match)."""
        if self.fast_pattern is None:
            return lines.str.extract_groups(self.pattern).struct.unnest()
        return _extract_fast(self.pattern, self.fast_pattern, lines)

    def matches(self, lines: pl.Series) -> pl.Series:
        return lines.str.contains(self.pattern)


@lru_cache(maxsize=None)
def group_names(pattern: str) -> tuple[str, ...]:
    """The named groups of a (Rust) regex, in order."""
    return tuple(pl.Series([], dtype=pl.String).str.extract_groups(pattern).struct.fields)


def _extract_fast(pattern: str, fast: str, lines: pl.Series) -> pl.DataFrame:
    """`lines.str.extract_groups(pattern)`, with the lines `fast` matches taken from it (see `fast_pattern`)."""
    names = group_names(pattern)
    line = pl.col("_line")
    out = (lines.to_frame("_line").lazy()
           .select(line, line.str.extract_groups(fast).alias("_g")).unnest("_g")
           # `pattern` ends in `(?P<msg>.*)$`, which a newline stops: such lines (never read from a file) go the
           # slow way, as do the lines `fast` does not match
           .with_columns(line.str.slice(pl.col("_head").str.len_chars()).alias("msg"),
                         (pl.col("_head").is_null() | line.str.contains("\n", literal=True)).alias("_slow"))
           .collect())
    groups = pl.DataFrame([out.get_column(n) for n in names])
    slow = out.get_column("_slow")
    if slow.any():
        idx = slow.arg_true()
        sub = lines.gather(idx)
        # the fast groups of these lines are null: only lines `pattern` matches, or that hold a newline, change
        if sub.str.contains(pattern).any() or out.get_column("_head").is_not_null().gather(idx).any():
            rest = sub.str.extract_groups(pattern).struct.unnest()
            groups = pl.DataFrame([groups.get_column(n).scatter(idx, rest.get_column(n)) for n in names])
    return groups


@dataclass(frozen=True)
class PostContext:
    """What a format's post-processing hook may use."""

    path: str
    tz: str


class HookedFormat(LineFormat):
    """A line format with a post-processing hook over its parsed rows (same frame in, same frame out).

    The frame holds the named groups, `text` (the raw line), `line`, and the standard columns."""

    def post(self, df: pl.DataFrame, ctx: PostContext) -> pl.DataFrame:
        return df


class StructuredFormat(LineFormat):
    """A format whose records are not one line each (JSON objects). It parses whole batches itself."""

    def detect_score(self, lines: pl.Series) -> float:
        raise NotImplementedError

    def parse_batch(self, lines: pl.DataFrame, ctx: PostContext, final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(records in RECORD_SCHEMA minus source columns, lines to carry into the next batch)."""
        raise NotImplementedError


def no_records() -> pl.DataFrame:
    """A structured format's batch that yields no record (yet)."""
    return pl.DataFrame(schema={"line": pl.Int64, "line_end": pl.Int64, "message": pl.String})


def text_records(rows: pl.DataFrame) -> pl.DataFrame:
    """Lines (`line`, `text`) that no record of a structured format holds, each an untimed `text` record."""
    return rows.select("line", pl.col("line").alias("line_end"), pl.col("text").alias("message"),
                       pl.lit(TimeSource.NONE.value).alias("ts_source"), pl.lit("text").alias("format"))


def with_text_records(records: pl.DataFrame | None, others: pl.DataFrame) -> pl.DataFrame:
    """A batch's records (None: none) and its other lines as `text_records`, in line order."""
    parts = [p for p in (records, text_records(others) if others.height else None) if p is not None]
    if not parts:
        return no_records()
    return pl.concat(parts, how="diagonal_relaxed").sort("line") if len(parts) > 1 else parts[0].sort("line")


def hold_back(marked: pl.DataFrame, lines: pl.DataFrame, mark: str, final: bool,
              after: bool = False) -> tuple[pl.DataFrame | None, pl.DataFrame]:
    """Where a structured format's batch is cut: (the rows of `marked` it parses now, the `lines` it carries into
    the next batch, where the record they begin may go on). The cut is at the last row marked `mark` (a record's
    first line), or just after it with `after` (a record's last line); the last batch is parsed whole. None: no
    row is marked, so every line waits."""
    if final:
        return marked, lines.clear()
    at = marked.filter(pl.col(mark)).get_column("line")
    if at.len() == 0:
        return None, lines
    last = at.max()
    keep = (pl.col("line") <= last) if after else (pl.col("line") < last)
    return marked.filter(keep), lines.filter(~keep)
