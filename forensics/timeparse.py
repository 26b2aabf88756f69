"""Stamp groups -> UTC microseconds, vectorised. Every time that is not exact says so in `ts_source`.

Year-less stamps are parsed against the leap year 2000 here (so `Feb 29` survives) and get their real
year in `normalise.fix_years`, once the whole source and its anchors are known.
"""

from __future__ import annotations

from functools import lru_cache

import polars as pl

from .formats.base import Stamp
from .schema import TS, TimeSource

PROVISIONAL_YEAR = 2000

# Zone abbreviations printed by journalctl short-full / with-unit and `systemctl status`. Ambiguous ones
# (IST, CST in China vs US) are left out: they fall back to --tz and are marked as assumed.
ZONE_OFFSETS = {
    "UTC": "+00:00", "GMT": "+00:00", "Z": "+00:00", "UCT": "+00:00", "WET": "+00:00", "WEST": "+01:00",
    "BST": "+01:00", "CET": "+01:00", "CEST": "+02:00", "MET": "+01:00", "MEST": "+02:00", "EET": "+02:00",
    "EEST": "+03:00", "MSK": "+03:00", "EST": "-05:00", "EDT": "-04:00", "CDT": "-05:00", "MST": "-07:00",
    "MDT": "-06:00", "PST": "-08:00", "PDT": "-07:00", "AKST": "-09:00", "AKDT": "-08:00", "HST": "-10:00",
    "JST": "+09:00", "KST": "+09:00", "HKT": "+08:00", "SGT": "+08:00", "AWST": "+08:00", "AEST": "+10:00",
    "AEDT": "+11:00", "ACST": "+09:30", "ACDT": "+10:30", "NZST": "+12:00", "NZDT": "+13:00",
}

MONTHS = {m: i + 1 for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"))}


def _frac(col: str) -> pl.Expr:
    """`20:17:19`, `20:17:19.123`, `20:17:19,123456789` -> `20:17:19.123456` (microseconds, padded)."""
    t = pl.col(col).str.replace(",", ".", literal=True)
    whole = t.str.slice(0, 8)
    frac = t.str.slice(9).str.pad_end(6, "0").str.slice(0, 6)
    return pl.when(t.str.len_chars() > 8).then(whole + "." + frac).otherwise(whole + ".000000")


def localise(naive: pl.Expr, tz: str) -> pl.Expr:
    if tz in ("UTC", "Etc/UTC"):
        return naive.dt.replace_time_zone("UTC")
    return (naive.dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null")
            .dt.convert_time_zone("UTC"))


def stamp_exprs(stamp: Stamp, cols: set[str] | frozenset[str], tz: str,
                df: pl.DataFrame | None = None) -> tuple[pl.Expr, pl.Expr, pl.Expr | None]:
    """(ts, ts_source, mono) expressions over a frame holding the format's named groups.

    Given the frame itself (`df`), steps that cannot change the result on its rows are left out (the ISO
    date separators are already `-` and `T`; no row has an offset, or every row has one)."""
    norm, offsets = True, None  # offsets: None (unknown, some rows may have one), "all" or "none"
    if df is not None and stamp is Stamp.ISO and df.height:
        # the separator replacement only changes `/` and ` ` in the first 11 characters: without them it is a no-op
        seps, with_off = df.select(pl.col("stamp").str.head(11).str.contains("[/ ]").any().alias("seps"),
                                   _iso_has_off().fill_null(False).sum().alias("off")).row(0)
        norm = bool(seps)
        offsets = "all" if with_off == df.height else "none" if with_off == 0 else None
    return _stamp_exprs(stamp, frozenset(cols), tz, norm, offsets)


def _iso_text() -> pl.Expr:
    return pl.col("stamp").str.replace(r"[zZ]$", "+00:00").str.replace(",", ".", literal=True)


def _iso_has_off() -> pl.Expr:
    return _iso_text().str.contains(r"[+-]\d{2}:?\d{2}$")


@lru_cache(maxsize=512)
def _stamp_exprs(stamp: Stamp, cols: frozenset[str], tz: str, norm: bool,
                 offsets: str | None) -> tuple[pl.Expr, pl.Expr, pl.Expr | None]:
    src = lambda s: pl.lit(s.value)  # noqa: E731
    assumed = TimeSource.ZONE_ASSUMED
    if stamp is Stamp.SYSLOG_NOYEAR:
        mon = pl.col("mon")
        month = (pl.when(mon.str.contains(r"^\d+$")).then(mon)
                 .otherwise(mon.str.slice(0, 3).str.to_titlecase().replace_strict(
                     {k: f"{v:02d}" for k, v in MONTHS.items()}, default=None)))
        text = (pl.lit(f"{PROVISIONAL_YEAR}-") + month.str.zfill(2) + "-" + pl.col("day").str.strip_chars()
                .str.zfill(2) + " " + _frac("time"))
        # naive local time in the provisional year, typed as UTC; `normalise.fix_years` sets the year and zone
        naive = text.str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S%.6f", strict=False)
        return naive.dt.replace_time_zone("UTC"), src(TimeSource.YEAR_INFERRED), None
    if stamp is Stamp.ISO:
        s = _iso_text()
        has_off = _iso_has_off()
        iso = s.str.replace(r"^(\d{4})[-/](\d{2})[-/](\d{2})[T ]", "${1}-${2}-${3}T") if norm else s
        with_off = iso.str.strptime(TS, "%Y-%m-%dT%H:%M:%S%.f%z", strict=False)
        naive = iso.str.strptime(pl.Datetime("us"), "%Y-%m-%dT%H:%M:%S%.f", strict=False)
        if offsets == "all":
            return with_off, src(TimeSource.EXACT), None
        if offsets == "none":
            return localise(naive, tz), src(assumed), None
        ts = pl.when(has_off).then(with_off).otherwise(localise(naive, tz))
        return ts, pl.when(has_off).then(src(TimeSource.EXACT)).otherwise(src(assumed)), None
    if stamp is Stamp.FULL:
        off = pl.col("zone").replace_strict(ZONE_OFFSETS, default=None)
        base = pl.col("date") + "T" + _frac("time")
        with_off = (base + off).str.strptime(TS, "%Y-%m-%dT%H:%M:%S%.f%z", strict=False)
        naive = base.str.strptime(pl.Datetime("us"), "%Y-%m-%dT%H:%M:%S%.f", strict=False)
        ts = pl.when(off.is_not_null()).then(with_off).otherwise(localise(naive, tz))
        return ts, pl.when(off.is_not_null()).then(src(TimeSource.EXACT)).otherwise(src(assumed)), None
    if stamp is Stamp.CTIME:
        text = (pl.col("year") + " " + pl.col("mon") + " " + pl.col("day").str.strip_chars().str.zfill(2)
                + " " + _frac("time"))
        naive = text.str.strptime(pl.Datetime("us"), "%Y %b %d %H:%M:%S%.6f", strict=False)
        return localise(naive, tz), src(assumed), None
    if stamp is Stamp.LOCAL:
        text = pl.col("date").str.replace_all("/", "-", literal=True) + " " + _frac("time")
        naive = text.str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S%.6f", strict=False)
        return localise(naive, tz), src(assumed), None
    if stamp is Stamp.EPOCH:
        us = (pl.col("epoch").cast(pl.Float64, strict=False) * 1_000_000).round(0).cast(pl.Int64)
        return us.cast(TS), src(TimeSource.EXACT), None
    if stamp is Stamp.MONO:
        mono = pl.col("mono").str.strip_chars().cast(pl.Float64, strict=False)
        return pl.lit(None, dtype=TS), src(TimeSource.MONOTONIC_ONLY), mono
    return pl.lit(None, dtype=TS), src(TimeSource.NONE), None


# an ISO stamp with microseconds and a plain seconds field (a leap second `60` takes the general way)
ISO_US = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-5][0-9][.,][0-9]{6}(?:[zZ]|[+-][0-9]{2}:?[0-9]{2})?$"


def stamp_columns(stamp: Stamp, df: pl.DataFrame, tz: str) -> pl.DataFrame:
    """`ts`, `ts_source` and `mono` for the rows of `df` (the format's named groups), as `stamp_exprs` gives them.

    Logs repeat a stamp on consecutive lines (one-second stamps): the expressions run once per run of rows with
    equal stamp groups, and the result is repeated over the run."""
    n = df.height
    if stamp is Stamp.ISO and n >= 1024:
        # `...T20:17:19.123456+00:00` is `...T20:17:19+00:00` plus 123456 µs: parse the stamps without the
        # fraction (they repeat) and add it
        split = df.select(pl.col("stamp").str.contains(ISO_US).all().alias("_canonical"),
                          (pl.col("stamp").str.slice(0, 19) + pl.col("stamp").str.slice(26)).alias("stamp"),
                          pl.col("stamp").str.slice(20, 6).cast(pl.Int64, strict=False).alias("_us"))
        if split.get_column("_canonical")[0]:
            out = stamp_columns(stamp, split.select("stamp"), tz)
            return out.with_columns(pl.col("ts") + pl.duration(microseconds=split.get_column("_us")))
    cols = frozenset(df.columns)
    used = _used(stamp, cols, tz)
    if n >= 1024 and used:
        runs = df.select(pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift(1)) for c in used)
                         .fill_null(True).alias("_new")).get_column("_new")
        if int(runs.sum()) <= n // 4:  # enough repeats to pay for the gather
            return _stamp_select(stamp, df.filter(runs), tz).gather(runs.cum_sum() - 1)
    return _stamp_select(stamp, df, tz)


def _stamp_select(stamp: Stamp, df: pl.DataFrame, tz: str) -> pl.DataFrame:
    ts, ts_source, mono = stamp_exprs(stamp, df.columns, tz, df)
    exprs = (ts.alias("ts"), ts_source.alias("ts_source"),
             (mono if mono is not None else pl.lit(None, dtype=pl.Float64)).alias("mono"))
    if stamp is Stamp.NONE:  # constants only: `select` would give one row
        return df.with_columns(exprs).select("ts", "ts_source", "mono")
    return df.select(exprs)


@lru_cache(maxsize=512)
def _used(stamp: Stamp, cols: frozenset[str], tz: str) -> tuple[str, ...]:
    """The group columns the stamp expressions read."""
    return tuple(sorted({c for e in stamp_exprs(stamp, cols, tz) if e is not None for c in e.meta.root_names()}))
