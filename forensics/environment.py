"""Environment fingerprint: what the logs show of a host's hardware and software stack.

GPU model, count and SM, driver (the NVRM banner), CUDA (driver, toolkit, PyTorch build), torch, flashinfer,
sglang and python versions, kernel. Read from the events (architecture errors name the SM) and from the
records, through a literal prefilter (`Linux version`, `NVRM: loading NVIDIA`, `site-packages/`, ...), so a
large store is scanned once. Every value says where it came from (`path:line`); inferred values say so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

from . import profile
from .configreview import Hardware, Knowledge, normalize_sm
from .eventview import EventView

# (key, pattern, how to print the match); the first group is the value
PATTERNS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("kernel", re.compile(r"Linux version (\S+)"), "{}"),
    ("driver", re.compile(r"NVRM: loading NVIDIA UNIX (?:Open )?(?:\S+ )?Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)"),
     "{}"),
    ("driver", re.compile(r"Driver Version:\s*(\d+\.\d+(?:\.\d+)?)"), "{}"),
    ("cuda_driver", re.compile(r"CUDA Version:\s*(\d+\.\d+)"), "{} (driver)"),
    ("nvcc", re.compile(r"Cuda compilation tools, release (\d+\.\d+)"), "{}"),
    ("cuda_torch", re.compile(r"\btorch[=\- ]+\d+\.\d+\.\d+\+cu(\d{3,4})\b"), "{}"),
    ("cuda_toolkit", re.compile(r"/usr/local/cuda-(\d+\.\d+)/"), "{}"),
    ("torch", re.compile(r"(?i)\b(?:py)?torch(?:==|-(?=\d)|\s+version:?\s+|\s+)v?(\d+\.\d+\.\d+(?:\+\w+)?)"), "{}"),
    ("flashinfer", re.compile(r"(?i)\bflashinfer(?:-python)?(?:==|-(?=\d)|\s+version:?\s+|\s+)v?(\d+\.\d+\.\d+(?:\.?post\d+|rc\d+)?)"),
     "{}"),
    ("flashinfer", re.compile(r"\.cache/flashinfer/(\d+\.\d+\.\d+(?:\.?post\d+)?)/"), "{}"),
    ("sglang", re.compile(r"(?i)\bsglang(?:==|-(?=\d)|\s+version:?\s+|\s+)v?(\d+\.\d+\.\d+(?:\.post\d+)?)"), "{}"),
    ("python", re.compile(r"python(3\.\d+)/(?:site|dist)-packages/"), "{}"),
    ("sm", re.compile(r"capability (sm_\d{2,3})"), "{}"),
    ("interconnect", re.compile(r"(PCIe-only) GPUs"), "PCIe only (SGLang: custom allreduce disabled on PCIe-only GPUs)"),
)
assert len(PATTERNS) == 14
# a literal each pattern needs (the same index as PATTERNS): a line without it cannot match, and the pattern
# is not run; case-insensitive ones (True) are looked for in the lower-cased line when it is ASCII
_NEEDS: tuple[tuple[str, bool], ...] = (
    ("Linux version ", False), ("NVRM: loading NVIDIA UNIX ", False), ("Driver Version:", False),
    ("CUDA Version:", False), ("Cuda compilation tools, release ", False), ("+cu", False), ("/usr/local/cuda-", False),
    ("torch", True), ("flashinfer", True), (".cache/flashinfer/", False), ("sglang", True), ("-packages/", False),
    ("capability sm_", False), ("PCIe-only GPUs", False),
)
# for the patterns whose literal most lines of an SGLang log hold (its paths name sglang, torch and flashinfer):
# what an ASCII line must match first, a regex of polars' engine that every match of the pattern matches (the
# pattern without its `\b`, look-ahead and groups; `\s` widened to Python's, which counts \x1c-\x1f too)
_WS = r"[\s\x1c-\x1f]"
_VERSION_AFTER = rf"(?:==|-|{_WS}+(?:version:?{_WS}+)?)v?\d+\.\d+\.\d+"
_ASCII_MASKS: dict[str, str] = {
    "torch": r"(?i)torch" + _VERSION_AFTER,
    "flashinfer": r"(?i)flashinfer(?:-python)?" + _VERSION_AFTER,
    "sglang": r"(?i)sglang" + _VERSION_AFTER,
}
_PCI = re.compile(r"(?:^nvidia |NVRM: GPU at PCI:|NVRM: Xid \(PCI:|NVRM: GPU )([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})")
# a GPU's row of nvidia-smi's table: `|   0  NVIDIA H100 80GB HBM3   On  |   00000000:18:00.0 Off |  ...` (a 32-bit
# PCI domain, where the kernel prints 16 bits)
_SMI_PCI = re.compile(r"^\|\s+\d+\s+\S.*?\|\s+[0-9A-Fa-f]{4}([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\.[0-7]\s")
_AVAIL = re.compile(r"Load weight begin\. avail mem=(\d+(?:\.\d+)?) GB")
_NVCC_REJECTS = re.compile(r"Unsupported gpu architecture '(compute_\d{2,3}[af]?)'")


@dataclass(frozen=True)
class Fingerprint:
    """Key -> value, with where each value was read (`path:line`, or how it was inferred)."""

    values: tuple[tuple[str, str], ...]
    sources: tuple[tuple[str, str], ...]
    hardware: Hardware = Hardware()

    def as_dict(self) -> dict[str, str]:
        return dict(self.values)

    def get(self, key: str) -> str | None:
        return dict(self.values).get(key)


KEY_ORDER = ("host", "gpu", "sm", "driver", "cuda", "nvcc", "torch", "flashinfer", "sglang", "python", "kernel",
             "interconnect")


def _tp_count(ranks: Iterable[str | None]) -> int | None:
    best = None
    for r in ranks:
        for m in re.finditer(r"\bTP(\d+)\b", r or ""):
            n = int(m.group(1)) + 1
            best = n if best is None or n > best else best
    return best


def _scan(records: pl.DataFrame, kn: Knowledge
          ) -> tuple[dict[str, tuple[str, str]], dict[str, str], list[tuple[str, str]], list[float], dict[str, str]]:
    """What the records' lines show, as a loop over every line trying every pattern would find it (a key's
    last match wins; the first place each PCI device is named; every free-memory figure; the last place each
    architecture nvcc rejects is named; every line naming a GPU). The lines are split and each pattern's
    literal (or for a few, a looser regex: `_ASCII_MASKS`) looked for by polars; a pattern is run only on the lines
    that hold it."""
    found: dict[str, tuple[str, str]] = {}
    pcis: dict[str, str] = {}
    gpu_hits: list[tuple[str, str]] = []
    avail: list[float] = []
    nvcc_rejects: dict[str, str] = {}
    if not records.height:
        return found, pcis, gpu_hits, avail, nvcc_rejects
    ln = pl.col("ln")
    ascii_ = ln.str.len_bytes() == ln.str.len_chars()
    low = ln.str.to_lowercase()
    masks = [(~ascii_ | (ln.str.contains(_ASCII_MASKS[lit]) if lit in _ASCII_MASKS else
                         low.str.contains(lit, literal=True)))
             if ci else ln.str.contains(lit, literal=True) for lit, ci in _NEEDS]
    masks += [ln.str.starts_with("nvidia ") | ln.str.contains("NVRM: ", literal=True)
              | (ln.str.starts_with("|") & ln.str.contains("NVIDIA", literal=True)),
              ln.str.contains("avail mem=", literal=True),
              ln.str.contains("Unsupported gpu architecture '", literal=True),
              ln.str.contains("NVIDIA", literal=True) | ln.str.contains("RTX", literal=True)
              | ln.str.contains("Tesla", literal=True)]
    names = [f"_m{k}" for k in range(len(masks))]
    lines = (records.select(pl.col("message").fill_null("").str.split("\n").alias("ln"),
                            pl.format("{}:{}", pl.col("path").fill_null("None"),
                                      pl.col("line").cast(pl.String).fill_null("None")).alias("where"))
             .explode("ln").with_columns(m.alias(c) for m, c in zip(masks, names))
             .filter(pl.any_horizontal(names)))
    texts, wheres, marks = lines["ln"].to_list(), lines["where"].to_list(), lines.select(names).rows()
    n = len(PATTERNS)
    for text, where, mark in zip(texts, wheres, marks):
        for (key, rx, out), hit in zip(PATTERNS, mark):
            if hit:
                m = rx.search(text)
                if m:
                    found[key] = (out.format(m.group(1)), where)      # the last occurrence wins
        m = (_PCI.search(text) or _SMI_PCI.search(text)) if mark[n] else None
        if m:
            pcis.setdefault(m.group(1).lower(), where)
        m = _AVAIL.search(text) if mark[n + 1] else None
        if m:
            avail.append(float(m.group(1)))
        m = _NVCC_REJECTS.search(text) if mark[n + 2] else None
        if m:
            nvcc_rejects[m.group(1)] = where
        if mark[n + 3] and kn.gpu(text) is not None:
            gpu_hits.append((text, where))
    return found, pcis, gpu_hits, avail, nvcc_rejects


def fingerprint_records(records: pl.DataFrame, evs: Sequence[EventView], kn: Knowledge, host: str | None,
                        ranks: Iterable[str | None] = ()) -> Fingerprint:
    """The fingerprint from prefiltered records (columns message, path, line; any order) and the events."""
    found, pcis, gpu_hits, avail, nvcc_rejects = _scan(records, kn)
    vals: dict[str, str] = {}
    src: dict[str, str] = {}

    def put(key: str, value: str, where: str) -> None:
        if key not in vals:
            vals[key] = value
            src[key] = where

    if host:
        put("host", host, "the logs' host name")
    # SM: an architecture error names it; else a torch capability warning
    for e in evs:
        sm = e.fields.get("sm") if e.kind in ("flashinfer_arch_unsupported", "cuda_arch_unsupported") else None
        if sm:
            put("sm", str(sm), f"{e.path}:{e.line}")
            break
    if "sm" in found:
        put("sm", found["sm"][0], found["sm"][1])
    sm = vals.get("sm")
    # GPU model: a name in the logs, else inferred from the SM and the memory free at start
    count = len(pcis) or _tp_count(ranks)
    count_from = (f"{len(pcis)} NVIDIA PCI devices" if pcis else "TP ranks in the SGLang log") if count else ""
    memory_gb = None
    memory_from = ""
    gpu_name = None
    if gpu_hits:
        line, where = gpu_hits[-1]
        g = kn.gpu(line)
        assert g is not None
        m = re.search(r"(NVIDIA (?:[A-Za-z0-9\-]+ )*?" + re.escape(g.match) + r"[A-Za-z0-9 \-]*?)"
                      r"(?=\s+with\b|\s*[|,(]|\s{2,}|$)", line, re.I)
        gpu_name = " ".join(m.group(1).split()) if m else g.name
        memory_gb = g.memory_gb
        memory_from = f"{g.name}: {g.memory_gb:g} GB" if g.memory_gb else ""
        put("sm", g.sm, f"{where} ({g.name})") if g.sm else None
        src_gpu = where
    elif sm and avail:
        top = max(avail)
        fits = [g for g in kn.gpus if g.sm == sm and g.memory_gb and g.memory_gb >= top]
        names = {g.name for g in fits}
        if len(names) == 1:
            g = fits[0]
            gpu_name = g.name
            memory_gb = g.memory_gb
            memory_from = (f"{g.name}: {g.memory_gb:g} GB, inferred: the only {sm} GPU with more than the "
                           f"{top:g} GB free at start")
        src_gpu = "inferred from the SM and `Load weight begin. avail mem=`"
    if gpu_name:
        desc = (f"{count} x " if count else "") + gpu_name + (f" ({memory_gb:g} GB)" if memory_gb else "")
        if not gpu_hits:
            desc += f" (inferred: the only {sm} GPU with more than {max(avail):g} GB free at start)"
        put("gpu", desc, src_gpu)
    elif count:
        put("gpu", f"{count} GPU{'s' if count != 1 else ''}" + (f" ({sm})" if sm else ""), count_from)
    for key in ("driver",):
        if key in found:
            put(key, *found[key])
    cuda_parts = []
    if "cuda_driver" in found:
        cuda_parts.append(found["cuda_driver"][0])
    if "cuda_torch" in found:
        d = found["cuda_torch"][0]
        cuda_parts.append(f"{d[:-1]}.{d[-1]} (PyTorch build)")
    if "cuda_toolkit" in found:
        cuda_parts.append(f"{found['cuda_toolkit'][0]} (toolkit path)")
    if cuda_parts:
        put("cuda", ", ".join(cuda_parts),
            next(found[k][1] for k in ("cuda_driver", "cuda_torch", "cuda_toolkit") if k in found))
    if "nvcc" in found:
        put("nvcc", found["nvcc"][0], found["nvcc"][1])
    elif nvcc_rejects:
        target, where = sorted(nvcc_rejects.items())[0]
        fam = kn.family(normalize_sm(target))
        older = f", so older than CUDA {fam.min_cuda}" if fam and fam.min_cuda else ""
        put("nvcc", f"version not logged; it rejects {target}{older}", where)
    for key in ("torch", "flashinfer", "sglang", "python", "kernel", "interconnect"):
        if key in found:
            put(key, *found[key])
    ordered = tuple((k, vals[k]) for k in KEY_ORDER if k in vals)
    hw = Hardware(memory_gb=memory_gb, memory_from=memory_from, gpus_seen=count, gpus_from=count_from)
    return Fingerprint(values=ordered, sources=tuple((k, src[k]) for k, _ in ordered), hardware=hw)


def _hits(store, source_ids: Sequence[str], cond: pl.Expr) -> tuple[pl.DataFrame, pl.DataFrame]:  # noqa: ANN001
    """(records `cond` selects whose message holds a literal: ts, message, path, line, host, source_id;
    the distinct ranks of the records `cond` selects: rank, host, source_id), from each source's profile
    (cached with the store: no record is read)."""
    hits: list[pl.DataFrame] = []
    ranks: list[pl.DataFrame] = []
    for sid in dict.fromkeys(source_ids):
        prof = profile.of_source(store, sid)
        if prof is None:  # its records were replaced and the new ones are gone too: nothing to read
            continue
        hits.append(prof.env_hits.filter(cond).select(*profile.HIT_COLUMNS))
        ranks.append(prof.ranks.filter(cond).select("rank", "host", "source_id").unique(maintain_order=True))
    schema = {"ts": pl.Datetime("us", "UTC"), "message": pl.String, "path": pl.String, "line": pl.Int64,
              "host": pl.String, "source_id": pl.String}
    h = pl.concat(hits, how="vertical_relaxed") if hits else pl.DataFrame(schema=schema)
    r = (pl.concat(ranks, how="vertical_relaxed") if ranks else
         pl.DataFrame(schema={"rank": pl.String, "host": pl.String, "source_id": pl.String}))
    return h, r


def _host_filter(host: str | None, null_host: bool) -> pl.Expr:
    if host is None:
        return pl.col("host").is_null()
    if null_host:
        return (pl.col("host") == host) | pl.col("host").is_null()
    return pl.col("host") == host


def _from_hits(hits: pl.DataFrame, ranks: pl.DataFrame, mine: pl.Expr, evs: Sequence[EventView], kn: Knowledge,
               host: str | None) -> Fingerprint:
    rows = (hits.filter(mine).select("ts", "message", "path", "line").sort(["ts", "path", "line"], nulls_last=False)
            .tail(20000))
    rk = ranks.filter(mine).select("rank").unique().head(1000)["rank"].to_list()
    return fingerprint_records(rows, evs, kn, host, rk)


def fingerprint(store, host: str | None, source_ids: Sequence[str], evs: Sequence[EventView], kn: Knowledge,
                until: datetime | None = None, null_host: bool = True) -> Fingerprint:  # noqa: ANN001
    """The fingerprint of `host` from the given sources of a Store (records at or before `until`, and untimed
    ones). `null_host`: records without a host count as this host's (a single-host store)."""
    if not source_ids:
        return fingerprint_records(pl.DataFrame({"message": [], "path": [], "line": []},
                                                schema={"message": pl.String, "path": pl.String, "line": pl.Int64}),
                                   evs, kn, host)
    cond = _host_filter(host, null_host)
    if until is not None:
        cond = cond & (pl.col("ts").is_null() | (pl.col("ts") <= until))
    hits, ranks = _hits(store, source_ids, cond)
    return _from_hits(hits, ranks, pl.lit(True), evs, kn, host)


def fingerprints(store, asks: Mapping[Any, tuple[str | None, Sequence[str], Sequence[EventView], bool]],  # noqa: ANN001
                 kn: Knowledge) -> dict[Any, Fingerprint]:
    """Several hosts' fingerprints (key -> (host, source ids, events, null_host), as `fingerprint` takes them,
    with `until` None) from one read of the records: the same values as one `fingerprint` call per host."""
    out: dict[Any, Fingerprint] = {}
    sids = sorted({s for _, ids, _, _ in asks.values() for s in ids})
    cond = None
    for h, ids, _, nh in asks.values():
        if ids:
            c = _host_filter(h, nh)
            cond = c if cond is None else cond | c
    hits, ranks = _hits(store, sids, cond) if cond is not None else (None, None)
    for k, (h, ids, evs, nh) in asks.items():
        if not ids or hits is None or ranks is None:
            out[k] = fingerprint(store, h, ids, evs, kn, null_host=nh)
            continue
        out[k] = _from_hits(hits, ranks, pl.col("source_id").is_in(list(ids)) & _host_filter(h, nh), evs, kn, h)
    return out
