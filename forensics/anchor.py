"""Anchoring kernel monotonic seconds to wall time.

dmesg prints seconds since boot. The journal carries the same kernel messages with a wall-clock time, so
pairing identical message texts of one host gives `boot time = journal time - monotonic seconds` for each
pair; the median is the offset and the spread of the pairs its error bar. `--boot-time` gives it directly,
and `dmesg -T`/ISO renderings of the same lines pair the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TypeVar

import polars as pl

from .schema import TS_MAX_US, TS_MIN_US, TimeSource

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

# a kernel line that only one host prints: it names a process by pid, or a GPU by its UUID (`NVRM: GPU at
# PCI:0000:3b:00: GPU-5f3a2b1c-8d4e-...`, printed before an Xid)
DISTINCT = r"\b(?:PID: |pid=|[Pp]rocess |task )\d{2,}|\bGPU-[0-9a-f]{8}-[0-9a-f]{4}-"


@dataclass(frozen=True)
class BootAnchor:
    boot_id: str
    host: str | None
    boot_time: datetime        # UTC wall time of monotonic 0
    pairs: int                 # how many message texts were paired (0 for --boot-time)
    spread_s: float            # max - min of the paired offsets: the error bar
    how: str                   # in words, for the report


def short_host(h: pl.Expr) -> pl.Expr:
    """A host name's first label, lower case: what a boot's `Hostname set to <...>` and a journal's host share
    when one prints the short name and the other the full one."""
    return h.str.to_lowercase().str.split(".").list.first()


def same_host(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """The same host, the names equal or one the other's short form (`gpu-a07`, `gpu-a07.example.net`)."""
    a, b = a.cast(pl.String), b.cast(pl.String)   # a column of no host at all has no type of its own
    return (a == b) | ((short_host(a) == short_host(b)) & (~a.str.contains(".", literal=True)
                                                          | ~b.str.contains(".", literal=True)))


def pair_offsets(kernel_mono: pl.DataFrame, walled: pl.DataFrame, tolerance_s: float = 2.0) -> pl.DataFrame:
    """Per boot: the offset on which most paired message texts agree.

    `kernel_mono`: rows (boot_id, mono, message, host) of monotonic-only kernel records.
    `walled`: rows (ts, message, host) of kernel records with a wall time (journal `kernel:` lines, dmesg -T).
    A text that occurs more than once in either frame is ambiguous and not used. Boot banners are the same
    on every host, so a pairing counts only the pairs that agree (within `tolerance_s`) on one offset. A
    record whose host is known (`ingest --host`, or the name its boot gave: `Hostname set to <gpu-a07>.`) pairs
    only with that host's (`same_host`: `gpu-a07` is `gpu-a07.example.net`): another host's clock is not its."""
    k = kernel_mono.filter(pl.col("message").is_unique().over("boot_id"), pl.col("message").str.len_chars() >= 16)
    w = walled.filter(pl.col("message").is_unique().over("host"))
    joined = k.join(w.select("message", pl.col("ts").alias("_wts"), pl.col("host").alias("_whost")),
                    on="message", how="inner")
    if "host" in joined.columns:
        joined = joined.filter(pl.col("host").is_null() | same_host(pl.col("host"), pl.col("_whost")))
    step = int(tolerance_s * 1e6)
    off = (pl.col("_wts").dt.epoch("us") - (pl.col("mono") * 1e6).round(0).cast(pl.Int64))
    pairs = joined.with_columns(off.alias("_off")).with_columns((pl.col("_off") // step).alias("_b"))
    best = (pairs.group_by("boot_id", "_whost", "_b").len().sort(["len", "_b"], descending=[True, False])
            .unique(["boot_id", "_whost"], keep="first", maintain_order=True).rename({"len": "_n"}))
    agree = pairs.join(best.select("boot_id", "_whost", pl.col("_b").alias("_bb")), on=["boot_id", "_whost"])
    agree = agree.filter((pl.col("_b") - pl.col("_bb")).abs() <= 1)
    total = pairs.group_by("boot_id", "_whost").len().rename({"len": "_all"})
    return (agree.group_by("boot_id", "_whost")
            .agg((pl.col("_off").median()
                  # second-precision journal stamps are truncated: the true offset is half a second later
                  + pl.when((pl.col("_wts").dt.microsecond() == 0).all()).then(500_000).otherwise(0))
                 .alias("offset_us"), pl.col("_off").min().alias("lo"),
                 pl.col("_off").max().alias("hi"), pl.len().alias("pairs"),
                 (pl.col("mono") // 10).n_unique().alias("moments"),
                 pl.col("message").str.contains(DISTINCT).any().alias("distinct"))
            .join(total, on=["boot_id", "_whost"])
            # one burst (a single OOM report) is one moment, and its generic lines (stack frames, memory
            # summary) are the same on every host of a model: it counts only if a line naming a process
            # (`Killed process 48213`, `PID: 48297`) or a GPU's UUID pairs too
            .filter(pl.col("pairs") * 2 > pl.col("_all"), (pl.col("moments") >= 2) | pl.col("distinct"))
            .sort(["pairs", "boot_id"], descending=[True, False])
            .unique("boot_id", keep="first", maintain_order=True))


def find_anchors(kernel_mono: pl.DataFrame, walled: pl.DataFrame, min_pairs: int = 3) -> list[BootAnchor]:
    out = []
    for r in pair_offsets(kernel_mono, walled).iter_rows(named=True):
        if r["pairs"] < min_pairs:
            continue
        # journal short stamps are truncated to the second: the true offset lies up to 1 s above each pair
        bt = datetime.fromtimestamp(r["offset_us"] / 1e6, timezone.utc)
        spread = (r["hi"] - r["lo"]) / 1e6
        out.append(BootAnchor(r["boot_id"], r["_whost"], bt, int(r["pairs"]), spread,
                              f"boot time {bt.strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} UTC from {r['pairs']} kernel "
                              f"messages paired with the journal of {r['_whost']} (spread {spread:.3f} s)"))
    return out


def apply_anchor(recs: FrameT, anchors: dict[str, BootAnchor], host_default: str | None) -> FrameT:
    """Give monotonic-only records of anchored boots a wall time (marked `boot_anchored`)."""
    if not anchors:
        return recs
    table = pl.DataFrame({
        "boot_id": list(anchors),
        "_bt": [int(a.boot_time.timestamp() * 1e6) for a in anchors.values()],
        "_how": [a.how for a in anchors.values()],
        "_host": [a.host for a in anchors.values()],
    })
    mono_only = pl.col("ts_source") == TimeSource.MONOTONIC_ONLY.value
    df = recs.join(table.lazy() if isinstance(recs, pl.LazyFrame) else table, on="boot_id", how="left",
                   maintain_order="left")
    us = pl.col("_bt") + (pl.col("mono") * 1e6).round(0).cast(pl.Int64, strict=False)
    hit = mono_only & us.is_between(TS_MIN_US, TS_MAX_US).fill_null(False)  # past year 9999: stays monotonic
    ts = us.cast(pl.Datetime("us", "UTC"))
    return df.with_columns(
        pl.when(hit).then(ts).otherwise(pl.col("ts")).alias("ts"),
        pl.when(hit).then(pl.lit(TimeSource.BOOT_ANCHORED.value)).otherwise(pl.col("ts_source")).alias("ts_source"),
        pl.when(hit).then(pl.col("_how")).otherwise(pl.col("ts_anchor")).alias("ts_anchor"),
        # the journal's spelling of the host, when the dmesg named it short (`gpu-a07` for `gpu-a07.example.net`)
        pl.when(hit & (pl.col("host").is_null() | same_host(pl.col("host"), pl.col("_host")).fill_null(False)))
        .then(pl.coalesce(pl.col("_host"), pl.col("host"), pl.lit(host_default)))
        .otherwise(pl.col("host")).alias("host"),
    ).drop("_bt", "_how", "_host")


def boot_time_anchor(boot_ids: list[str], boot_time: datetime, host: str | None) -> dict[str, BootAnchor]:
    how = f"boot time {boot_time.strftime('%Y-%m-%d %H:%M:%S')} UTC given with --boot-time"
    return {b: BootAnchor(b, host, boot_time, 0, 0.0, how) for b in boot_ids}
