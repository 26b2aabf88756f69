"""Records -> normalised records: units, SGLang ranks inside journal lines, journal tracebacks as one record,
boot segments, and the year of year-less stamps (with what it was inferred from).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import polars as pl

from .formats import DMESG, JOURNAL_TEXT
from .schema import RECORD_SCHEMA, TS, TimeSource
from .timeparse import PROVISIONAL_YEAR, localise

UNIT_PREFIX = r"^([\w@.\-:\\]+\.(?:service|scope|slice|socket|timer|mount|target|path|device|swap|automount)): "
SGLANG_IN_MSG = r"^\[(\d{4}-\d{2}-\d{2}) \d{2}:\d{2}:\d{2}(?:\.\d+)?((?: (?:DP|PP|TP|EP|ATTN_CP|MOE_DP)\d+)*)\] "
NEW_RECORD = (r"^(\[\d{4}-\d{2}-\d{2} |\[rank\d+\]:|\[?[IWEF]\d{4} \d|INFO:|WARNING:|ERROR:|DEBUG:|CRITICAL:|"
              r"Traceback \(most recent call last\):|Exception raised from )")
BLOCK_START = r"Traceback \(most recent call last\):|^Exception raised from "
HEADER_END = r"^-- (?:Logs begin at|Journal begins at) .*?, (?:end|ends) at \w{3} (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})"
BOOT_LINE = r"^-- Boot ([0-9a-f]{32}) --$"


def normalise_batch(recs: pl.DataFrame) -> pl.DataFrame:
    """Per-batch fixes that need no knowledge of the rest of the source."""
    if recs.height == 0:
        return recs
    msg = pl.col("message")
    systemd_ident = pl.col("ident").str.starts_with("systemd").fill_null(False)
    recs = recs.with_columns(
        pl.coalesce(pl.col("unit"), pl.when(systemd_ident).then(msg.str.extract(UNIT_PREFIX, 1))).alias("unit"),
        pl.coalesce(pl.col("rank"), msg.str.extract(SGLANG_IN_MSG, 2).str.strip_chars().replace("", None))
        .alias("rank"),
    )
    journal = pl.col("format").is_in(list(JOURNAL_TEXT))
    if recs.select((journal & msg.str.contains(BLOCK_START)).any()).item():
        recs = _merge_journal_blocks(recs)
    return recs


def _merge_journal_blocks(recs: pl.DataFrame) -> pl.DataFrame:
    """A traceback logged through the journal is one entry per line; make it one record again.

    Within one (host, ident, pid), a block starts at `Traceback (most recent call last):` (or c10's
    `Exception raised from`) and takes the following entries of that process until one that starts a new
    log record (an SGLang/glog/uvicorn prefix) or a gap of more than 2 s."""
    key = ["host", "ident", "pid"]
    journal = pl.col("format").is_in(list(JOURNAL_TEXT)) & pl.col("pid").is_not_null()
    df = recs.with_row_index("_i").with_columns(journal.alias("_j"))
    j = df.filter(pl.col("_j"))
    gap = (pl.col("ts") - pl.col("ts").shift(1).over(key)).dt.total_seconds().abs()
    new_rec = (pl.col("message").str.contains(NEW_RECORD) | gap.is_null() | (gap > 2))
    start = pl.col("message").str.contains(BLOCK_START)
    j = j.with_columns(new_rec.alias("_new"), start.alias("_start"))
    j = j.with_columns(pl.when(pl.col("_new")).then(pl.col("_start")).forward_fill().over(key).alias("_in"))
    j = j.with_columns((pl.col("_in") & ~pl.col("_new")).alias("_cont"))
    if not j["_cont"].any():
        return recs
    j = j.with_columns((~pl.col("_cont")).cum_sum().over(key).alias("_blk"))
    cols = [c for c in RECORD_SCHEMA if c not in ("message", "line", "line_end")]
    merged = (j.group_by([*key, "_blk"], maintain_order=True)
              .agg(pl.col("_i").first(), pl.col("line").first(), pl.col("line_end").max(),
                   pl.col("message").str.join("\n"), *[pl.col(c).first() for c in cols if c not in key]))
    others = df.filter(~pl.col("_j"))
    out = pl.concat([others.select(["_i", *RECORD_SCHEMA]), merged.select(["_i", *RECORD_SCHEMA])])
    return out.sort("_i").drop("_i")


@dataclass(frozen=True)
class YearAnchor:
    """A full date known for a host (from another source of the same ingest or the store)."""

    ts: datetime
    what: str


@dataclass(frozen=True)
class TimeFix:
    records: pl.DataFrame
    anchor: str              # how this source's times were obtained, in words
    reversed: bool


def fix_source_times(recs: pl.DataFrame, tz: str, year: int | None, anchors: dict[str, YearAnchor] | None,
                     mtime: float | None) -> TimeFix:
    """Whole-source fixes: boot segments, reverse order, the year of year-less stamps."""
    recs = _boots(recs)
    timed = recs.filter(pl.col("ts").is_not_null())
    rev = False
    if timed.height > 2:
        diffs = timed["ts"].diff().dt.total_seconds().drop_nulls()
        diffs = diffs.filter(diffs.abs() < 180 * 86400)  # a year wrap in provisional-year stamps is no step back
        neg, pos = int((diffs < 0).sum()), int((diffs > 0).sum())
        rev = neg > 0 and neg >= 0.9 * (neg + pos)
    inferred = pl.col("ts_source") == TimeSource.YEAR_INFERRED.value
    notes: list[str] = []
    if recs.select(inferred.any()).item():
        recs, note = _fix_years(recs, tz, year, anchors or {}, mtime, rev)
        notes.append(note)
    kinds = sorted(set(recs["ts_source"].drop_nulls().to_list()))
    if TimeSource.ZONE_ASSUMED.value in kinds:
        notes.append(f"zone assumed {tz} (the stamps print no zone; pass --tz to change)")
    if TimeSource.MONOTONIC_ONLY.value in kinds:
        notes.append("kernel monotonic seconds, no boot-time anchor yet (ordered within each boot only)")
    if not notes:
        notes.append("exact (stamps carry date, time and zone)" if kinds and kinds != ["none"] else "no times")
    if rev:
        notes.append("newest first (journalctl -r): ordered by time")
    return TimeFix(recs, "; ".join(notes), rev)


def _boots(recs: pl.DataFrame) -> pl.DataFrame:
    """Boot ids: `-- Boot <id> --` / `-- Reboot --` lines in journal text, stamp resets in dmesg."""
    fmt = pl.col("format")
    msg = pl.col("message")
    sep_id = msg.str.extract(BOOT_LINE, 1)
    is_sep = (fmt == "text") & (sep_id.is_not_null() | (msg == "-- Reboot --"))
    if recs.select(is_sep.any()).item():
        label = pl.when(is_sep).then(pl.coalesce(sep_id, pl.lit("reboot-") + is_sep.cum_sum().cast(pl.String)))
        recs = recs.with_columns(pl.coalesce(pl.col("boot_id"), label.forward_fill()).alias("boot_id"))
    mono_rows = pl.col("mono").is_not_null() & (pl.col("ts_source") == TimeSource.MONOTONIC_ONLY.value)
    if recs.select(mono_rows.any()).item():
        m = pl.when(mono_rows).then(pl.col("mono"))
        banner = msg.str.starts_with("Linux version ") & (pl.col("mono") < 1.0)
        reset = (m < m.forward_fill().shift(1) - 1.0).fill_null(False) | banner.fill_null(False)
        n = reset.cum_sum()
        src = pl.col("source_id")
        label = pl.when(mono_rows).then(pl.lit("dmesg:") + src + "#" + n.cast(pl.String))
        recs = recs.with_columns(pl.coalesce(pl.col("boot_id"), label).alias("boot_id"))
    return recs


def _fix_years(recs: pl.DataFrame, tz: str, year: int | None, anchors: dict[str, YearAnchor],
               mtime: float | None, rev: bool) -> tuple[pl.DataFrame, str]:
    inferred = pl.col("ts_source") == TimeSource.YEAR_INFERRED.value
    df = recs.with_row_index("_i")
    rows = df.filter(inferred & pl.col("ts").is_not_null()).select("_i", "ts", "message", "host", "format")
    month = rows["ts"].dt.month()
    # a wrap is a jump back of more than six months between consecutive lines (Dec -> Jan), in reading
    # order (reversed for `journalctl -r`)
    step = month.diff().fill_null(0)
    wrap = (step > 6) if rev else (step < -6)
    wraps = wrap.cast(pl.Int64).cum_sum()
    total = int(wraps[-1]) if wraps.len() else 0
    # wraps_i: how many new years begin at or before row i, in chronological terms
    offs = (total - wraps) if rev else wraps
    rows = rows.with_columns(offs.alias("_off"))
    last_off = int(offs.max() or 0)
    y_first, how = _first_year(rows, recs, year, anchors, mtime, last_off)
    years = (pl.col("_off") + y_first).cast(pl.String)
    dated = df.select(pl.when(pl.col("ts_source").is_in([TimeSource.EXACT.value, TimeSource.ZONE_ASSUMED.value]))
                      .then(pl.col("ts")).forward_fill().backward_fill().alias("_ref"), "_i")
    if year is None and dated["_ref"].null_count() < dated.height:
        # each line takes the year of the nearest dated line before it in the same file
        rows = rows.join(dated, on="_i", how="left")
        ref_year = pl.col("_ref").dt.year()
        dm = pl.col("ts").dt.month() - pl.col("_ref").dt.month()
        per = (pl.when(dm > 6).then(ref_year - 1).when(dm < -6).then(ref_year + 1).otherwise(ref_year))
        years = per.cast(pl.String)
        how = "the dated lines around them in the same file"
    text = years + "-" + pl.col("ts").dt.strftime("%m-%d %H:%M:%S%.6f")
    naive = text.str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S%.6f", strict=False)
    rows = rows.with_columns(localise(naive, tz).alias("_ts"))
    fixed = df.join(rows.select("_i", "_ts"), on="_i", how="left").with_columns(
        pl.when(inferred).then(pl.col("_ts")).otherwise(pl.col("ts")).alias("ts"),
        pl.when(inferred).then(pl.lit(how)).otherwise(pl.col("ts_anchor")).alias("ts_anchor"),
    ).drop("_i", "_ts")
    note = f"year inferred: {how}; zone assumed {tz}"
    if total:
        note += f"; {total} Dec->Jan rollover(s) in the file"
    return fixed, note


def _first_year(rows: pl.DataFrame, recs: pl.DataFrame, year: int | None, anchors: dict[str, YearAnchor],
                mtime: float | None, last_off: int) -> tuple[int, str]:
    """The year of the earliest line, and what it was taken from, best anchor first."""
    if year is not None:
        return year - last_off, f"--year {year} (the year of the last line)"
    # 1. SGLang stamps (with a full date) inside the same journal lines
    sg = rows.with_columns(pl.col("message").str.extract(SGLANG_IN_MSG, 1).alias("_d")).filter(
        pl.col("_d").is_not_null())
    if sg.height:
        r = sg.row(0, named=True)
        y = int(r["_d"][:4])
        if r["ts"].month == 12 and r["_d"][5:7] == "01":
            y -= 1
        elif r["ts"].month == 1 and r["_d"][5:7] == "12":
            y += 1
        return y - int(r["_off"]), f"the SGLang stamps inside the same journal lines ({r['_d']})"
    # 2. full dates printed in the same file: systemctl status `Active: ... since`, journalctl header
    dated = pl.col("ts_source").is_in([TimeSource.EXACT.value, TimeSource.ZONE_ASSUMED.value])
    exact = recs.filter(dated, pl.col("ts").is_not_null())
    if exact.height:
        ref = exact["ts"].median()
        return _nearest_year(rows, ref), f"a full date printed in the same file ({_iso(ref)})"
    header = recs.filter(pl.col("format") == "text")["message"].str.extract(HEADER_END, 1).drop_nulls()
    if header.len():
        end = datetime.strptime(header[0], "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
        return _end_year(rows, end, last_off), f"the journalctl header (`... end at {header[0]}`)"
    # 3. a full date for the same host from another source
    hosts = [h for h in rows["host"].drop_nulls().unique().sort().to_list() if h in anchors]
    if hosts:
        a = anchors[hosts[0]]
        return _nearest_year(rows, a.ts), f"{a.what} for host {hosts[0]} ({_iso(a.ts)})"
    # 4. the file's modification time
    if mtime is not None:
        end = datetime.fromtimestamp(mtime, timezone.utc)
        return _end_year(rows, end, last_off), f"the file's modification time ({_iso(end)})"
    now = datetime.now(timezone.utc)
    return now.year - last_off, "no anchor at all: assumed the current year; pass --year"


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def _nearest_year(rows: pl.DataFrame, ref: datetime) -> int:
    """The first-line year that puts the lines nearest `ref`."""
    r0 = rows.row(0, named=True)
    best, best_d = ref.year, None
    for y in (ref.year - 1, ref.year, ref.year + 1):
        for r in (r0, rows.row(rows.height - 1, named=True)):
            try:
                t = r["ts"].replace(year=y + int(r["_off"]) - int(r0["_off"]))
            except ValueError:
                continue
            d = abs((t.replace(tzinfo=timezone.utc) - ref).total_seconds())
            if best_d is None or d < best_d:
                best, best_d = y, d
    return best


def _end_year(rows: pl.DataFrame, end: datetime, last_off: int) -> int:
    """The first-line year that makes the last line fall at or before `end` (plus a day), as late as possible."""
    last = rows.row(rows.height - 1, named=True) if rows.height else None
    for y in (end.year, end.year - 1, end.year - 2):
        ly = y + last_off
        if last is None:
            return y
        try:
            t = last["ts"].replace(year=ly, tzinfo=timezone.utc)
        except ValueError:
            continue
        if (t - end).total_seconds() <= 86400:
            return y
    return end.year - 1


def kernel_time_exprs() -> tuple[pl.Expr, pl.Expr]:
    return pl.col("ts"), pl.col("ts_source")


__all__ = ["normalise_batch", "fix_source_times", "YearAnchor", "TimeFix", "DMESG", "TS"]
