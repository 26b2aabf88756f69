"""The zone of stamps that print none, read off the lines a source with exact times also holds.

An SGLang log prints its stamps in the host's local time, with no zone; the journal of its unit holds the same
lines, stamp and all (`[2025-05-26 04:29:47] Received sigquit ...`), at the journal's exact time. `dmesg -T` prints
the kernel's lines in local time too, and a journal holds them (`-o short-iso`: with its offset). The two times of
such a line differ by the zone's offset: a whole number of quarter hours, give or take the second the stamp was cut
to and the moment the journal took the line. `find_offset` reads the offset off the lines held once on each side
(`unique_pairs`); the ingest moves the source's assumed times by it and says so in its time note (`zone_note`). An
offset of zero confirms the assumed UTC.

The offset is one for the whole source: a daylight-saving change inside it shows as two offsets, and then nothing
is moved (the finding says which, so that `--tz ZONE` can be given).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

STEP = 900              # seconds: zones are offset from UTC by whole quarter hours
SLACK = 5.0             # seconds a pair may stray from a quarter hour (the stamp's cut second, the journal's delay)
EAST, WEST = 14 * 3600, 12 * 3600   # the offsets zones have (UTC+14:00 .. UTC-12:00)
MIN_PAIRS = 2           # pairs that must agree to move a source's times (one is enough to confirm UTC)
AGREE = 0.9             # the share of the pairs at a whole quarter hour that must agree on one (and those pairs must
                        # be half of all at least: a clock off by minutes is no zone)
MARK = "with exact times"   # in a time note: the zone was read off lines another source holds (not again)
_ASSUMED = re.compile(r"zone assumed UTC(?: \(the stamps print no zone; pass --tz to change\))?")


KERNEL = pl.col("ident") == "kernel"
SGLANG_LINE = pl.col("message").str.contains(r"^\[[^\]]*\] ")   # a message as a journal holds an SGLang line


def source_key() -> pl.Expr:
    """The key of a record whose zone is assumed, as a source with exact times would hold its line: a kernel
    message is the kernel's on both sides; another record's stamp as printed and its message are what the journal
    holds of an SGLang line. The two parts are hashed apart (no string made of both: 2.4 M records took 0.55 s so,
    0.25 s thus)."""
    return (pl.when(KERNEL).then(pl.col("message").hash(seed=2))
            .otherwise(pl.col("ts_text").hash(seed=0) ^ pl.col("message").hash(seed=1)).alias("_h"))


def exact_key() -> pl.Expr:
    """The same key of a record with an exact time: a kernel message's, or an SGLang line's (`[stamp] text`)."""
    m = pl.col("message")
    cut = m.str.find("] ", literal=True)
    return (pl.when(KERNEL).then(m.hash(seed=2))
            .otherwise(m.str.slice(0, cut + 1).hash(seed=0) ^ m.str.slice(cut + 2).hash(seed=1)).alias("_h"))


def keyed(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The records of `lf` that can pair (kernel lines, SGLang lines), with their key."""
    return lf.filter(KERNEL | SGLANG_LINE).with_columns(exact_key())


MAX_KEYS = 1 << 18   # records of exact sources whose keys are all kept to pair with: past them, a sample


def key_step(records: int, most: int | None = None) -> int:
    """1 in how many of the exact lines' keys are kept (those a multiple of it, on both sides: `sampled`), for
    exact sources of `records` records in all: a 4 GiB corpus's journal holds 1.5 M lines that can pair; kept whole,
    their set and the scan of a 9.6 M-record SGLang log against it took the ingest's peak to 398-428 MiB. A log and
    the journal of its unit share as many lines as the journal holds of it, so a sample of a big store still pairs
    thousands; a store of at most `most` exact records is not sampled."""
    return max(1, -(-records // (MAX_KEYS if most is None else most)))


def sampled(step: int) -> pl.Expr:
    """The records whose key (`_h`) the sample of 1 in `step` keeps."""
    return pl.col("_h") % step == 0 if step > 1 else pl.lit(True)


def unique_pairs(assumed: pl.DataFrame, exact: pl.DataFrame) -> pl.DataFrame:
    """The pairs of lines held once on each side (the same line at the same time in two exact sources is one): a
    line printed again and again (an OOM report's `Mem-Info:`, a boot's `Linux version`) pairs any time with any."""
    exact = exact.unique(["_h", "ts_exact"], keep="first", maintain_order=True)
    once = pl.len().over("_h") == 1
    return assumed.filter(once).join(exact.filter(once), on="_h")


@dataclass(frozen=True)
class ZoneFinding:
    """What the pairs of one source say: `offsets` (seconds east of UTC -> pairs agreeing on it, most first),
    `total` pairs, and the exact lines of the first few agreeing (`path:line`, `:line` for the same path)."""

    offsets: tuple[tuple[int, int], ...]
    total: int
    where: tuple[str, ...]

    @property
    def offset(self) -> int | None:
        """The offset the pairs agree on, when they do (enough of them, and one offset for nearly all)."""
        if not self.offsets:
            return None
        best, n = self.offsets[0]
        on_grid = sum(k for _, k in self.offsets)
        if 2 * on_grid < self.total or n < AGREE * on_grid or (best != 0 and n < MIN_PAIRS):
            return None
        return best

    @property
    def pairs(self) -> int:
        return self.offsets[0][1] if self.offsets else 0


def find_offset(pairs: pl.DataFrame) -> ZoneFinding | None:
    """`pairs`: `ts` (the assumed time, read as UTC), `ts_exact`, `path` and `line` (of the exact line), one row per
    line both sources hold. None when there are none."""
    if pairs.height == 0:
        return None
    d = (pl.col("ts") - pl.col("ts_exact")).dt.total_microseconds() / 1e6
    q = (d / STEP).round()
    rows = (pairs.sort("path", "line")
            .with_columns((q * STEP).cast(pl.Int64).alias("_off"), (d - q * STEP).abs().alias("_r")))
    ok = rows.filter(pl.col("_r") <= SLACK, pl.col("_off").is_between(-WEST, EAST))
    counts = ok.group_by("_off").len().sort(["len", pl.col("_off").abs(), "_off"], descending=[True, False, False])
    offsets = tuple((int(o), int(n)) for o, n in counts.iter_rows())
    agreeing = ok.filter(pl.col("_off") == offsets[0][0]) if offsets else ok
    first = agreeing.select("path", "line").unique(maintain_order=True).head(3)
    return ZoneFinding(offsets, pairs.height, _cite(first.rows()))


def _cite(lines: list[tuple[str, int]]) -> tuple[str, ...]:
    """[(a, 2), (a, 6), (b, 3)] -> (`a:2`, `:6`, `b:3`): a path once for its lines in a row."""
    return tuple(f"{p}:{n}" if i == 0 or lines[i - 1][0] != p else f":{n}" for i, (p, n) in enumerate(lines))


def label(offset: int) -> str:
    """3600*8 -> `UTC +08:00`; -12600 -> `UTC -03:30` (apart: a word such as `UTC+08:00` reads as a link's
    scheme, which the report's Markdown shows as code)."""
    sign = "-" if offset < 0 else "+"
    h, m = divmod(abs(offset) // 60, 60)
    return f"UTC {sign}{h:02d}:{m:02d}"


def _lines(n: int) -> str:
    return f"{n} line{'s' if n != 1 else ''}"


def zone_note(note: str, f: ZoneFinding, holders: str) -> str:
    """A source's time note with its assumed zone replaced by what the pairs say (`holders`: the sources with the
    exact lines, in words). The note unchanged when it assumes no zone."""
    off = f.offset
    where = ", ".join(f.where)
    if off == 0:
        said = (f"zone UTC: {f.pairs} of its lines are also in {holders} {MARK}, at the same times ({where}); the "
                f"stamps print no zone")
    else:
        said = (f"zone inferred: {label(off or 0)}, from {_lines(f.pairs)} also in {holders} {MARK} ({where}), one "
                f"offset for the whole file; the stamps print no zone (pass --tz to change)")
    return _ASSUMED.sub(lambda _: said, note, count=1)


_INFERRED = re.compile(r"zone inferred: (UTC [+-]\d\d:\d\d)")


def inferred_zone(note: str) -> str | None:
    """The zone a source's time note says was read off other lines and moved its times (`UTC +08:00`), if any."""
    m = _INFERRED.search(note)
    return m.group(1) if m else None


def disagreement(f: ZoneFinding) -> str:
    """Why no zone was read off the pairs found (`f.offset` is None)."""
    if not f.offsets:
        return (f"its stamps differ from those of the same {_lines(f.total)} in a source {MARK} by no whole quarter "
                f"hour: a clock off, not a zone; the zone stays assumed")
    (best, n), *others = f.offsets
    if not others and 2 * n >= f.total:
        return (f"{_lines(n)} also in a source {MARK} ({', '.join(f.where)}) put its stamps at {label(best)}: too "
                f"few to move its times; pass --tz ZONE if that is the host's zone")
    seen = [f"{label(o)} by {_lines(k)}" for o, k in f.offsets[:3]]
    off = f.total - sum(k for _, k in f.offsets)
    if off:
        seen.append(f"no whole quarter hour by {_lines(off)}")
    return (f"{_lines(f.total)} also in a source {MARK} do not agree on one offset for its stamps "
            f"({'; '.join(seen)}): a zone with daylight saving, or lines of other hosts; the zone stays assumed, "
            f"pass --tz ZONE")
