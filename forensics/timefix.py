"""Source-wide time fixes, streaming: boot segments, reverse order, and the year of year-less stamps.

Batches pass through `SourceClock.observe`, which labels boots and notes, per year-less record, how many
Dec -> Jan wraps came before it (`_w`) and the nearest dated time before it in the file (`_ref`). Only
when the whole source has been read is the year decided (`SourceClock.finish`), from the best anchor:

  1. `--year` (the year of the last line)
  2. dated lines in the same file (a `systemctl status` paste's `Active: ... since`, SGLang lines around
     glog lines): each year-less line takes the year of the dated line before it
  3. the SGLang stamps carried inside the same journal lines
  4. the journalctl header `-- Logs begin at ..., end at ... --`, else a date(1) stamp printed in the file when
     it was captured (nvidia-bug-report's `Date: Sun May 25 20:31:02 UTC 2025`, `nvidia-smi`'s table head or
     `-q` `Timestamp :`, a `date` run in a pasted terminal session): the lines fall at or before it
  5. a full date for the same host from another source
  6. the file's modification time (a `.gz` header mtime when set)

`finish` returns polars expressions, applied lazily to the records written so far, so a source of any
size is fixed in bounded memory.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import polars as pl

from .schema import TS, YEAR_FILE, YEAR_GIVEN, YEAR_HOST, YEAR_MTIME, YEAR_NOW, TimeSource
from .timeparse import PROVISIONAL_YEAR

SGLANG_DATE = r"^\[(\d{4}-\d{2}-\d{2}) \d{2}:\d{2}:\d{2}"
HEADER_END = r"^-- (?:Logs begin at|Journal begins at) .*?, (?:end|ends) at \w{3} (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})"
# date(1)'s C-locale output alone on a line (a zone name or offset optional), maybe after `Date:` or `Timestamp :`
CAPTURE_DATE = (r"^(?:Date:\s*|Timestamp\s*:\s*)?(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) "
                r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d{1,2}) (\d{2}:\d{2}:\d{2})"
                r"(?: [A-Za-z]{1,6}| [+-]\d{2}:?\d{2})? (\d{4})\s*$")
BOOT_LINE = r"^-- Boot ([0-9a-f]{32}) --$"
INFERRED = TimeSource.YEAR_INFERRED.value
DATED = (TimeSource.EXACT.value, TimeSource.ZONE_ASSUMED.value)
EXTRA = ("_w", "_ref")
ZONE_HINT = " (the stamps print no zone; pass --tz to change)"


@dataclass(frozen=True)
class YearAnchor:
    """A full date known for a host (from another source of the same ingest or the store)."""

    ts: datetime
    what: str


@dataclass
class SourceClock:
    tz: str = "UTC"
    year: int | None = None
    mtime: float | None = None
    anchors: dict[str, YearAnchor] = field(default_factory=dict)
    source_id: str = ""
    # boots
    last_mono: float | None = None
    boot_n: int = 0
    journal_boot: str | None = None
    reboots: int = 0
    # order and years
    rev: bool | None = None
    wraps: int = 0
    prev_month: int | None = None
    last_ref: datetime | None = None
    year_from: str = ""        # set by finish: YEAR_GIVEN ... YEAR_NOW ("" when no record is year-less)
    first_ref: datetime | None = None
    sg: tuple[str, int, int] | None = None          # (date, provisional month, _w) of the first SGLang stamp
    header_end: str | None = None
    captured: tuple[str, datetime] | None = None    # (the line, its time read as UTC) of a date(1) stamp
    first_inf: tuple[datetime, int] | None = None   # (provisional ts, _w)
    last_inf: tuple[datetime, int] | None = None
    host_counts: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    format_notes: set[str] = field(default_factory=set)   # what formats say of their year-less times (`ts_anchor`)

    # -- per batch
    def observe(self, recs: pl.DataFrame) -> pl.DataFrame:
        """Label boots and add `_w`, `_ref` to a batch of records (in file order)."""
        if recs.height == 0:
            return recs.with_columns(pl.lit(None, dtype=pl.Int32).alias("_w"), pl.lit(None, dtype=TS).alias("_ref"))
        recs = self._boots(recs)
        self.kinds.update(dict(zip(*recs["ts_source"].value_counts().to_dict(as_series=False).values())))
        if recs["ts_anchor"].null_count() < recs.height:  # a format's own word on its times (most batches: none)
            said = recs.filter((pl.col("ts_source") == INFERRED) & pl.col("ts_anchor").is_not_null())["ts_anchor"]
            self.format_notes.update(said.unique().to_list())
        hosts = recs["host"].drop_nulls()
        if hosts.len():
            self.host_counts.update(dict(zip(*hosts.value_counts().to_dict(as_series=False).values())))
        if self.rev is None:
            self._decide_order(recs)
        if self.header_end is None:
            text = recs.filter(pl.col("format") == "text")["message"]
            h = text.str.extract(HEADER_END, 1).drop_nulls()
            if h.len():
                self.header_end = h[0]
            elif self.captured is None:
                self._capture_date(text)
        return self._years(recs)

    def _capture_date(self, text: pl.Series) -> None:
        """The first date(1) stamp among a batch's text lines, if any (anchor 4)."""
        found = text.filter(text.str.contains(CAPTURE_DATE))
        for line in found.to_list():
            m = re.match(CAPTURE_DATE, line)
            if m is None:
                continue
            mon, day, hms, year = m.groups()
            try:
                t = datetime.strptime(f"{mon} {day} {year} {hms}", "%b %d %Y %H:%M:%S")
            except ValueError:  # Feb 30
                continue
            self.captured = (line.strip(), t.replace(tzinfo=timezone.utc))
            return

    def decide_order(self, recs: pl.DataFrame) -> None:
        """Newest first (`journalctl -r`) or not, from a sample of the source's first records."""
        self._decide_order(recs)

    def _decide_order(self, recs: pl.DataFrame) -> None:
        ts = recs["ts"].drop_nulls()
        if ts.len() < 3:
            return
        d = ts.diff().dt.total_seconds().drop_nulls()
        d = d.filter(d.abs() < 180 * 86400)  # a year wrap in provisional-year stamps is no step back
        neg, pos = int((d < 0).sum()), int((d > 0).sum())
        self.rev = neg > 0 and neg >= 0.9 * (neg + pos)

    def _boots(self, recs: pl.DataFrame) -> pl.DataFrame:
        msg = pl.col("message")
        is_text = pl.col("format") == "text"
        sep_id = msg.str.extract(BOOT_LINE, 1)
        is_sep = is_text & (sep_id.is_not_null() | (msg == "-- Reboot --"))
        seps = recs.select(is_sep.alias("s"), sep_id.alias("i"))
        if seps["s"].any() or self.journal_boot is not None:
            n = seps["s"].cum_sum() + self.reboots
            label = pl.when(is_sep).then(pl.coalesce(sep_id, pl.lit("reboot-") + n.cast(pl.String)))
            labels = recs.select(label.alias("l"))["l"]
            if self.journal_boot is not None:
                labels = labels.fill_null(strategy="forward").fill_null(self.journal_boot)
            else:
                labels = labels.fill_null(strategy="forward")
            self.reboots = int(n[-1]) if n.len() else self.reboots
            last = labels.drop_nulls()
            if last.len():
                self.journal_boot = last[-1]
            recs = recs.with_columns(pl.coalesce(pl.col("boot_id"), labels).alias("boot_id"))
        mono_rows = pl.col("mono").is_not_null() & (pl.col("ts_source") == TimeSource.MONOTONIC_ONLY.value)
        if recs.select(mono_rows.any()).item():
            m = pl.when(mono_rows).then(pl.col("mono"))
            prev = m.forward_fill().shift(1)
            if self.last_mono is not None:
                prev = prev.fill_null(self.last_mono)
            banner = msg.str.starts_with("Linux version ") & (pl.col("mono") < 1.0)
            reset = (mono_rows & (m < prev - 1.0)).fill_null(False) | (banner.fill_null(False) & mono_rows)
            n = reset.cum_sum() + self.boot_n
            label = pl.when(mono_rows).then(pl.lit(f"dmesg:{self.source_id}#") + n.cast(pl.String))
            out = recs.select(label.alias("l"), n.alias("n"), m.alias("m"))
            self.boot_n = int(out["n"][-1])
            ms = out["m"].drop_nulls()
            if ms.len():
                self.last_mono = float(ms[-1])
            recs = recs.with_columns(pl.coalesce(pl.col("boot_id"), out["l"]).alias("boot_id"))
        return recs

    def _years(self, recs: pl.DataFrame) -> pl.DataFrame:
        inferred = (pl.col("ts_source") == INFERRED) & pl.col("ts").is_not_null()
        dated = pl.col("ts_source").is_in(DATED) & pl.col("ts").is_not_null()
        month = pl.when(inferred).then(pl.col("ts").dt.month().cast(pl.Int32))
        prev = month.forward_fill().shift(1)
        if self.prev_month is not None:
            prev = prev.fill_null(self.prev_month)
        step = month - prev
        wrap = ((step > 6) if self.rev else (step < -6)).fill_null(False)
        w = wrap.cast(pl.Int32).cum_sum() + self.wraps
        ref = pl.when(dated).then(pl.col("ts")).forward_fill()
        if self.last_ref is not None:
            ref = ref.fill_null(pl.lit(self.last_ref, dtype=TS))
        out = recs.with_columns(pl.when(inferred).then(w).alias("_w"), pl.when(inferred).then(ref).alias("_ref"),
                                inferred.alias("_inf"), month.alias("_m"), w.alias("_wall"))
        self.wraps = int(out["_wall"][-1])
        months = out["_m"].drop_nulls()
        if months.len():
            self.prev_month = int(months[-1])
        d = out.filter(dated)["ts"]
        if d.len():
            self.first_ref = self.first_ref or d[0]
            self.last_ref = d[-1]
        inf = out.filter(pl.col("_inf"))
        if inf.height:
            if self.first_inf is None:
                self.first_inf = (inf["ts"][0], int(inf["_w"][0]))
            self.last_inf = (inf["ts"][-1], int(inf["_w"][-1]))
            if self.sg is None:
                sg = inf.select(pl.col("message").str.extract(SGLANG_DATE, 1).alias("d"), "ts", "_w").drop_nulls("d")
                if sg.height:
                    self.sg = (sg["d"][0], sg["ts"][0].month, int(sg["_w"][0]))
        return out.drop("_inf", "_m", "_wall")

    # -- at the end of the source
    @property
    def inferred(self) -> bool:
        return self.first_inf is not None

    def wants_host_anchor(self) -> bool:
        """Whether the year must come from another source of the same host (anchor 5): no better one was seen."""
        return (self.inferred and self.year is None and self.first_ref is None and self.sg is None
                and self.header_end is None and self.captured is None)

    def finish(self) -> tuple[list[pl.Expr], str]:
        """Expressions that give year-less records their final UTC time, and how times were obtained."""
        notes = []
        exprs: list[pl.Expr] = []
        if self.inferred:
            year_expr, how, self.year_from = self._year_expr()
            exprs = [_final_ts(year_expr, self.tz).alias("ts"),
                     # a format's own word on its times (dmesg -e's unprinted seconds) follows the year's
                     pl.when(pl.col("ts_source") == INFERRED)
                     .then(pl.concat_str([pl.lit(how), pl.col("ts_anchor")], separator="; ", ignore_nulls=True))
                     .otherwise(pl.col("ts_anchor")).alias("ts_anchor")]
            note = f"year inferred: {how}; zone assumed {self.tz}"
            if self.kinds.get(TimeSource.ZONE_ASSUMED.value):  # dated records that print no zone either: one note
                note += ZONE_HINT
            if self.format_notes:
                note += "; " + "; ".join(sorted(self.format_notes))
            if self.wraps:
                note += f"; {self.wraps} Dec->Jan rollover(s) in the file"
            notes.append(note)
        elif self.kinds.get(TimeSource.ZONE_ASSUMED.value):
            notes.append(f"zone assumed {self.tz}{ZONE_HINT}")
        if self.kinds.get(TimeSource.MONOTONIC_ONLY.value):
            notes.append("kernel monotonic seconds, no boot-time anchor yet (ordered within each boot only)")
        if not notes:
            timed = [k for k in self.kinds if k != TimeSource.NONE.value]
            notes.append("exact (stamps carry date, time and zone)" if timed else "no times")
        if self.rev:
            notes.append("newest first (journalctl -r): ordered by time")
        return exprs, "; ".join(notes)

    def _off(self) -> pl.Expr:
        return (pl.lit(self.wraps) - pl.col("_w")) if self.rev else pl.col("_w")

    def _year_expr(self) -> tuple[pl.Expr, str, str]:
        total = self.wraps
        off = self._off()
        if self.year is not None:
            return off + (self.year - total), f"--year {self.year} (the year of the last line)", YEAR_GIVEN
        if self.first_ref is not None:
            ref = pl.coalesce(pl.col("_ref"), pl.lit(self.first_ref, dtype=TS))
            ry = ref.dt.year().cast(pl.Int32)
            dm = pl.col("ts").dt.month().cast(pl.Int32) - ref.dt.month().cast(pl.Int32)
            per = pl.when(dm > 6).then(ry - 1).when(dm < -6).then(ry + 1).otherwise(ry)
            return per, "the dated lines around them in the same file", YEAR_FILE
        if self.sg is not None:
            date, month, w = self.sg
            y = int(date[:4])
            if month == 12 and date[5:7] == "01":
                y -= 1
            elif month == 1 and date[5:7] == "12":
                y += 1
            o = (total - w) if self.rev else w
            return off + (y - o), f"the SGLang stamps inside the same journal lines ({date})", YEAR_FILE
        if self.header_end is not None:
            end = datetime.strptime(self.header_end, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
            return off + self._end_year(end), f"the journalctl header (`... end at {self.header_end}`)", YEAR_FILE
        if self.captured is not None:
            line, end = self.captured
            return off + self._end_year(end), f"the date printed when the file was captured (`{line}`)", YEAR_FILE
        hosts = sorted(h for h in self.host_counts if h in self.anchors)
        if hosts:
            a = self.anchors[hosts[0]]
            return off + self._nearest_year(a.ts), f"{a.what} for host {hosts[0]} ({_iso(a.ts)})", YEAR_HOST
        if self.mtime is not None:
            end = datetime.fromtimestamp(self.mtime, timezone.utc)
            return off + self._end_year(end), f"the file's modification time ({_iso(end)})", YEAR_MTIME
        now = datetime.now(timezone.utc)
        return off + (now.year - total), "no anchor at all: assumed the current year; pass --year", YEAR_NOW

    def _offset_of(self, w: int) -> int:
        return (self.wraps - w) if self.rev else w

    def _nearest_year(self, ref: datetime) -> int:
        """The first-line year that puts the lines nearest `ref`."""
        assert self.first_inf is not None and self.last_inf is not None
        f_off = self._offset_of(self.first_inf[1])
        best, best_d = ref.year, None
        for y in (ref.year - 1, ref.year, ref.year + 1):
            for ts, w in (self.first_inf, self.last_inf):
                try:
                    t = ts.replace(year=y + self._offset_of(w) - f_off, tzinfo=timezone.utc)
                except ValueError:
                    continue
                d = abs((t - ref).total_seconds())
                if best_d is None or d < best_d:
                    best, best_d = y - f_off, d
        return best

    def _end_year(self, end: datetime) -> int:
        """The year of offset 0 that makes the latest line fall at or before `end` (plus a day)."""
        assert self.last_inf is not None
        ts, w = self.first_inf if self.rev else self.last_inf  # type: ignore[misc]
        o = self._offset_of(w)
        for y in (end.year, end.year - 1, end.year - 2):
            try:
                t = ts.replace(year=y, tzinfo=timezone.utc)
            except ValueError:
                continue
            if (t - end).total_seconds() <= 86400:
                return y - o
        return end.year - 1 - o


_DAY_US = 86_400_000_000


def _jan1(y: pl.Expr) -> pl.Expr:
    """Days from 1970-01-01 to 1 January of year `y` (Int64), proleptic Gregorian: integer arithmetic, where
    `pl.date(y, 1, 1)` builds a calendar date per row (the same days for years 1-9999: tests/test_time.py)."""
    return 365 * (y - 1970) + (y - 1969) // 4 - (y - 1901) // 100 + (y - 1601) // 400


def _final_ts(year: pl.Expr, tz: str) -> pl.Expr:
    """Provisional-year (2000) naive stamps -> the real year, localised; arithmetic on the microseconds, no string
    round trip and no calendar per row (a leap day is the day before 1 March of the provisional year, a leap
    year): 0.42 -> 0.22 s of CPU for 3 M stamps."""
    prov = pl.col("ts").dt.replace_time_zone(None)
    y = year.cast(pl.Int64)
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    shift_days = _jan1(y) - (datetime(PROVISIONAL_YEAR, 1, 1) - datetime(1970, 1, 1)).days
    march = prov >= pl.lit(datetime(PROVISIONAL_YEAR, 3, 1))
    feb29 = (prov >= pl.lit(datetime(PROVISIONAL_YEAR, 2, 29))) & ~march
    days = shift_days - (~leap & march).cast(pl.Int64)
    naive = (prov.dt.epoch("us") + days * _DAY_US).cast(pl.Datetime("us"))   # in microseconds, whatever the unit
    naive = pl.when(feb29 & ~leap).then(None).otherwise(naive)
    if tz in ("UTC", "Etc/UTC"):
        fixed = naive.dt.replace_time_zone("UTC")
    else:
        fixed = naive.dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null").dt.convert_time_zone("UTC")
    return pl.when(pl.col("ts_source") == INFERRED).then(fixed).otherwise(pl.col("ts"))


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def fix_frame(recs: pl.DataFrame, clock: SourceClock) -> tuple[pl.DataFrame, str]:
    """The whole of a (small) source in memory: observe then finish. For examples, tests and `parse_text`."""
    out = clock.observe(recs)
    exprs, how = clock.finish()
    if exprs:
        out = out.with_columns(exprs)
    return out.drop(*EXTRA), how


__all__ = ["SourceClock", "YearAnchor", "fix_frame", "EXTRA", "timedelta"]
