"""A store's events for incidents, turned into EventViews only where an incident needs them.

The whole store is looked at once, vectorised: a narrow polars frame of every event (no message, no fields)
with the hosts and units the logs imply, each event's place in the deterministic order (`seq`), whether it
is significant, and its *fold session*: the events of one kind and host whose first lines read the same,
chained by at most DUP_SECONDS. A line seen in several sources can only be folded with events of its own
session, so a session is the unit of work: asking for some events (`EventSource.load(mask)`) builds the
EventViews of every session they touch, gives them the unit of their process (`units_by_pid`, answered
for the pids at hand by a filtered scan), folds the copies, and keeps the primaries. Asking twice builds
nothing twice, and what comes back is exactly what preparing every event of the store would give for those
events: the same EventViews (ids, seq, entities), the same primaries and copies.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import polars as pl

from .cachefiles import code_digest, generation, prune, stamps, write_atomic
from .correlate import SERVER_UNIT
from .correlation_packs import Correlation
from .eventview import SYSTEMD_KINDS, UNKNOWN_HOST, EventView, views
from .schema import EVENT_SCHEMA

DUP_SECONDS = 2.0                      # the same line in two sources: this close in time
_DUP_US = int(DUP_SECONDS * 1_000_000) + 1   # sessions break only past this (float rounding of times is < 1 us)
_TS_RANK = {"exact": 0, "boot_anchored": 1, "zone_assumed": 2, "year_inferred": 3}
_PREFIX_RX = r"^\[\d{4}-\d{2}-\d{2} [\d:.,]+(?: [A-Z_]+\d+)*\] "
_PREFIX = re.compile(_PREFIX_RX)
# what Python's str.strip() strips (str.isspace), so the polars signature is the Python one
PY_WHITESPACE = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
                 "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
SLICE_ROWS = 100_000                   # events read at a time when looking at all of them
_DEBUG = bool(os.environ.get("FORENSICS_DEBUG_LOAD"))
_INT_TEXT = r"^-?\d+(?:\.0+)?$"


# ----------------------------------------------------------------------------------------------------------
# the same line in several sources (the fold), on EventViews


def signature(e: EventView) -> str:
    first = e.message.split("\n", 1)[0].strip()
    return _PREFIX.sub("", first).strip()


def _compatible(a: EventView, b: EventView) -> bool:
    for ent in ("unit", "pid"):
        va, vb = a.entities.get(ent), b.entities.get(ent)
        if va is not None and vb is not None and va != vb:
            return False
    return True


def _primary_score(e: EventView) -> tuple:
    return (e.entities.get("unit") is None, e.host is None, _TS_RANK.get(e.ts_source, 5), -len(e.fields),
            e.path, e.line)


def fold_copies(evs: Sequence[EventView]) -> tuple[list[EventView], dict[str, tuple[EventView, ...]]]:
    """The same line seen in several sources (a kernel line in dmesg and in the journal, a journal tail pasted
    in a terminal log) becomes one event; the others are kept as its copies (cited as evidence too).

    `evs` in seq order. Each event joins the first group (in the order groups were made) of its kind, host and
    first line whose first event is within DUP_SECONDS and whose members it is compatible with; groups whose
    first event is further back than that can take nothing more and are no longer looked at."""
    groups: list[list[EventView]] = []
    by_key: dict[tuple[str, str | None, str], list[int]] = {}
    for e in evs:
        key = (e.kind, e.host, signature(e))
        placed = False
        open_ = by_key.get(key)
        if open_:
            if e.t is not None:
                # events come in time order (timed first): a timed head more than DUP_SECONDS back stays closed
                drop = 0
                while drop < len(open_) and groups[open_[drop]][0].t is not None \
                        and e.t - groups[open_[drop]][0].t > DUP_SECONDS:
                    drop += 1
                if drop:
                    del open_[:drop]
            for gi in open_:
                g = groups[gi]
                head = g[0]
                same = [x for x in g if x.source_id == e.source_id]
                if same and (e.kind not in SYSTEMD_KINDS or min(abs(x.line - e.line) for x in same) <= 5):
                    continue   # the same text twice in one source is two events, unless a pasted journal tail repeats
                if (head.t is None) != (e.t is None):
                    continue
                if head.t is not None and abs(head.t - e.t) > DUP_SECONDS:
                    continue
                if all(_compatible(x, e) for x in g):
                    g.append(e)
                    placed = True
                    break
        if not placed:
            by_key.setdefault(key, []).append(len(groups))
            groups.append([e])
    prim: list[EventView] = []
    copies: dict[str, tuple[EventView, ...]] = {}
    for g in groups:
        g.sort(key=_primary_score)
        p = g[0]
        # the primary keeps the richest entities of the group
        ents = dict(p.entities)
        for x in g[1:]:
            for k, v in x.entities.items():
                ents.setdefault(k, v)
        if ents != p.entities:
            p = replace(p, entities=ents, unit=ents.get("unit"))
        prim.append(p)
        if len(g) > 1:
            copies[p.id] = tuple(g[1:])
    prim.sort(key=lambda e: e.seq)
    return prim, copies


def owners_of(evs: Iterable[EventView], keys: set[tuple[str | None, str]] | None = None
              ) -> dict[tuple[str | None, str], str]:
    """(host, pid) -> the unit of the first event (in seq order) about that process that names one."""
    owner: dict[tuple[str | None, str], str] = {}
    for e in evs:
        p, u = e.entities.get("pid"), e.entities.get("unit")
        if p and u and (keys is None or (e.host, p) in keys):
            owner.setdefault((e.host, p), u)
    return owner


def with_owner_units(evs: Sequence[EventView], owner: Mapping[tuple[str | None, str], str]) -> list[EventView]:
    """An event without a unit takes the unit of another event about the same process (host, pid): the OOM
    kill of pid 48213 in /system.slice/x.service puts `python3[48213]` lines in x.service."""
    out = []
    for e in evs:
        p = e.entities.get("pid")
        if e.entities.get("unit") is None and p and (e.host, p) in owner:
            u = owner[(e.host, p)]
            e = replace(e, unit=u, entities={**e.entities, "unit": u})
        out.append(e)
    return out


def units_by_pid(evs: list[EventView]) -> list[EventView]:
    return with_owner_units(evs, owners_of(evs))


# ----------------------------------------------------------------------------------------------------------
# what the correlations can reach


def correlation_kinds(corrs: Sequence[Correlation]) -> set[str]:
    """Every event kind a correlation looks at (anchors, steps, evidence against)."""
    out: set[str] = set()
    for c in corrs:
        for s in c.steps:
            out.update(s.kinds)
        for a in c.against:
            out.update(a.kinds)
    return out


def host_local(corrs: Sequence[Correlation]) -> bool:
    """True when no correlation can bind events of two hosts: every step but the anchor, and every `against`,
    joins on the same host (and no folded conclusion lacks a cause event). Incidents of one host then depend on
    that host's events only."""
    for c in corrs:
        if c.fold and c.suspected:
            return False
        for s in c.steps:
            if s.name != c.anchor and "host" not in (s.join if s.join is not None else c.join).same:
                return False
        for a in c.against:
            if "host" not in (a.join if a.join is not None else c.join).same:
                return False
    return True


# ----------------------------------------------------------------------------------------------------------
# the store's events


def _signature_expr() -> pl.Expr:
    first = pl.col("message").fill_null("").str.split("\n").list.first().fill_null("")
    return (first.str.strip_chars(PY_WHITESPACE).str.replace(_PREFIX_RX, "")
            .str.strip_chars(PY_WHITESPACE))


def part_expr() -> pl.Expr:
    """The host an event's incidents are grouped under (`unknown host` for none)."""
    host = pl.col("host")
    return pl.when(host.is_null() | (host == "")).then(pl.lit(UNKNOWN_HOST)).otherwise(host)


def _server_exit() -> pl.Expr:
    """`correlate.server_exit` over the events table."""
    status = pl.col("fields").fill_null("").str.extract(r'"status":\s*"?(\d+)', 1)
    return ((pl.col("kind") == "service_exited") & pl.col("ts").is_not_null()
            & pl.col("unit").fill_null("").str.contains(SERVER_UNIT) & (status.fill_null("") != "0"))


def _group_hash() -> pl.Expr:
    return pl.struct("kind", "host", "_sig").hash()


def _sessions(keyed: pl.DataFrame) -> pl.DataFrame:
    """(_seq, _sess) of events (`_seq`, kind, host, `_sig`, `t_us`, in seq order, so in time order with the
    untimed last): a session is a run of one (kind, host, signature) whose times are no more than DUP_SECONDS
    apart, or all its untimed events. A session's number only names it.

    Each group's events must be together in time order. The frame is in time order already, so a stable sort on
    a hash of the three keys does it: 0.05 s for 483 k events, where sorting on the keys themselves took
    0.2-0.25 s. Two groups with one hash would be interleaved; that shows as more runs of the keys than hashes,
    and the keys themselves are sorted on then."""
    group = (pl.col("kind").ne_missing(pl.col("kind").shift(1)) | pl.col("host").ne_missing(pl.col("host").shift(1))
             | pl.col("_sig").ne_missing(pl.col("_sig").shift(1)))
    s = keyed.with_columns(_group_hash().alias("_g")).sort("_g", maintain_order=True)
    runs, hashes = s.select(group.sum(), pl.col("_g").n_unique()).row(0)
    if runs != hashes:  # a collision: the exact sort
        s = keyed.sort(["kind", "host", "_sig", "t_us", "_seq"], nulls_last=True)
    brk = (group | pl.col("t_us").is_null().ne_missing(pl.col("t_us").is_null().shift(1))
           | ((pl.col("t_us") - pl.col("t_us").shift(1)) > _DUP_US).fill_null(False))
    return s.select("_seq", brk.cum_sum().alias("_sess"))


class EventSource:
    """The events of a store (a lazy frame with hosts and units filled, and `_row`), prepared on demand.

    `narrow` holds every event (of the hosts `keep` selects, an expression over the filled events such as
    `part_expr().is_in(...)`: another host's events cannot change a host's incidents) without its text: `_row`
    (position in `lf`), `_seq` (position in the deterministic order), `t_us`, kind, host, unit, path, line, pid,
    `part` (the host incidents group it under), `significant`, whether its fields may name an architecture, a
    unit or a pid, and `_sess` (its fold session). `load(mask)` prepares the events a mask over `narrow`
    selects, with what their fold needs, and returns the primaries among them, in seq order. `primaries` holds
    every primary prepared so far (seq -> EventView), `by_id` the same by id, `copies` primary id -> copies.
    `prepare_view` (optional) is applied to each event once the unit of its process is known, before the fold
    (the CUDA OOM's load); `finish` (settable) to each primary as it is kept (the GPU of the host)."""

    def __init__(self, lf: pl.LazyFrame, enrich: Callable | None,
                 prepare_view: Callable[[EventView], EventView] | None = None,
                 significant_kinds_excluded: Iterable[str] = (), keep: pl.Expr | None = None,
                 cache: Path | None = None):
        names = lf.collect_schema().names()
        cols = [pl.col(n).cast(t) if n in names else pl.lit(None, dtype=t).alias(n) for n, t in EVENT_SCHEMA.items()]
        self.lf = lf.select(pl.col("_row"), *cols)
        self.enrich = enrich
        self.prepare_view = prepare_view
        self.finish: Callable[[EventView], EventView] | None = None
        narrow = _read_narrow(cache) if cache is not None else None
        if narrow is None:
            narrow = self._narrow(list(significant_kinds_excluded), None if cache is not None else keep)
            if cache is not None:
                _keep_narrow(narrow, cache)
        if keep is not None and cache is not None:
            narrow = narrow.filter(keep)
        self.narrow = narrow
        self.done_sessions: set[int] = set()
        self.primaries: dict[int, EventView] = {}
        self.by_id: dict[str, EventView] = {}
        self.copies: dict[str, tuple[EventView, ...]] = {}
        self.owner: dict[tuple[str | None, str], str | None] = {}
        self._examined: set[int] = set()           # seqs read as possible owners
        self._owner_cands: list[tuple[int, str | None, str, str]] = []   # (seq, host, pid, unit) among them
        self.views_built = 0

    def _narrow(self, excluded: list[str], keep: pl.Expr | None) -> pl.DataFrame:
        """The narrow frame of the events (of those `keep` selects), in the deterministic order."""
        kind = pl.col("kind").fill_null("")
        exprs = [
            "_row", "ts", "path", "line", "rule", "kind", "host", "unit", "pid",
            pl.col("ts").dt.epoch("us").alias("t_us"),
            part_expr().alias("part"),
            (~kind.is_in(excluded) & (pl.col("severity").fill_null("info").is_in(["error", "critical"])
                                      | (pl.col("role").fill_null("context") == "cause")
                                      | _server_exit())).alias("significant"),
            pl.col("fields").fill_null("").str.contains_any(['"sm"', '"gpu_arch"', '"arch"', '"compute_capability"',
                                                            '"capability"']).alias("archish"),
            pl.col("fields").fill_null("").str.contains_any(['"unit"', '"cgroup"', '"task_memcg"', '"oom_memcg"'])
            .alias("unitish"),
            pl.col("fields").fill_null("").str.contains_any(['"pid"', '"main_pid"']).alias("pidish"),
            _signature_expr().hash().alias("_sig")]
        # a slice of rows at a time: only one slice's messages and fields are in memory
        n = self.lf.select(pl.len()).collect().item()
        chunks = []
        for off in range(0, max(n, 1), SLICE_ROWS):
            lf = self.lf.slice(off, SLICE_ROWS)
            if keep is not None:
                lf = lf.filter(keep)
            chunks.append(lf.select(exprs).collect())
        narrow = (pl.concat(chunks, how="vertical_relaxed")
                  .sort(["ts", "path", "line", "rule"], nulls_last=True, maintain_order=True)
                  .with_row_index("_seq").drop("ts", "rule"))
        del chunks
        # fold sessions: kind, host, first line; timed events chained by <= DUP_SECONDS, untimed ones together
        sess = _sessions(narrow.select("_seq", pl.col("kind").fill_null(""), "host", "_sig", "t_us"))
        col = pl.Series("_sess", [0] * narrow.height, dtype=sess["_sess"].dtype)
        col.scatter(sess["_seq"], sess["_sess"])
        return narrow.drop("_sig").with_columns(col)

    @property
    def empty(self) -> bool:
        return self.narrow.height == 0

    def load(self, what: pl.Expr | pl.DataFrame) -> list[EventView]:
        """Prepare the events `what` selects (a mask over the narrow frame, or a frame of `path` and `line`:
        the events on those lines), with every event of their fold sessions; the primaries among the
        selected events, in seq order (prepared now or before)."""
        if isinstance(what, pl.DataFrame):
            picked = self.narrow.join(what, on=list(what.columns), how="semi").select("_seq", "_sess")
        else:
            picked = self.narrow.filter(what).select("_seq", "_sess")
        new_sess = set(picked["_sess"].unique().to_list()) - self.done_sessions
        if new_sess:
            self.done_sessions |= new_sess
            rows = self.narrow.filter(pl.col("_sess").is_in(sorted(new_sess)))["_row"]
            if _DEBUG:
                print(f"load: picked {picked.height} rows, {len(new_sess)} new sessions, {rows.len()} rows",
                      file=sys.stderr)
            self._prepare(rows)
        return [self.primaries[s] for s in sorted(picked["_seq"].to_list()) if s in self.primaries]

    def load_windows(self, windows: Sequence[tuple[float, float, pl.Expr]]) -> list[EventView]:
        """`load` of the events each window (start, end in epoch seconds, a mask) selects among those whose time
        may fall within it (`window_mask`). The narrow frame is in time order, so each window is a slice found
        by binary search: an `any_horizontal` of the windows' masks would be evaluated on every event."""
        t = self.narrow.get_column("t_us")
        timed = t.len() - t.null_count()
        t = t.slice(0, timed)
        if t.null_count() or not t.is_sorted():   # not in time order (cannot happen for a narrow frame): masks
            return self.load(pl.any_horizontal([window_mask(lo, hi) & m for lo, hi, m in windows]))
        if not windows:
            return []
        # the slices' bounds in two searches, and their filters in one collect (each its own collect: 1 ms a window)
        firsts = t.search_sorted(pl.Series([us(lo - _SLACK_S) for lo, _, _ in windows], dtype=pl.Int64), side="left")
        ends = t.search_sorted(pl.Series([us(hi + _SLACK_S) for _, hi, _ in windows], dtype=pl.Int64), side="right")
        narrow = self.narrow.lazy()
        parts = [narrow.slice(a, b - a).filter(mask).select("_seq")
                 for a, b, (_, _, mask) in zip(firsts.to_list(), ends.to_list(), windows) if b > a]
        if not parts:
            return []
        return self.load(pl.concat(parts).unique().collect())

    def remap(self, fn: Callable[[EventView], EventView]) -> None:
        """Apply `fn` again to every primary kept so far (after what `finish` does changed)."""
        for seq, e in list(self.primaries.items()):
            e2 = fn(e)
            if e2 is not e:
                self.primaries[seq] = e2
                self.by_id[e2.id] = e2

    def _fetch(self, rows: pl.Series | list[int]) -> pl.DataFrame:
        """The events at these rows, with their `_seq`. The scan is also given the span of their times, which
        the files' statistics answer: the row groups outside it are not read."""
        cond = pl.col("_row").is_in(pl.Series(rows, dtype=pl.UInt32).implode())
        # the seq of these rows only: joining with every row of the narrow frame cost 15-20 ms a fetch
        seq = self.narrow.select("_row", "_seq", "t_us").filter(cond)
        lo, hi, untimed = seq.select(
            pl.col("t_us").min().alias("lo"), pl.col("t_us").max().alias("hi"),
            pl.col("t_us").is_null().any().alias("untimed")).row(0)
        if lo is not None and hi is not None:
            ts = pl.col("ts")
            timed = ts.is_between(pl.lit(lo).cast(pl.Datetime("us", "UTC")), pl.lit(hi).cast(pl.Datetime("us", "UTC")))
            cond = cond & ((timed | ts.is_null()) if untimed else timed)
        df = self.lf.filter(cond).collect()
        return df.join(seq.drop("t_us"), on="_row", how="left").drop("_row")

    def _prepare(self, rows: pl.Series) -> None:
        df = self._fetch(rows)
        evs = views(df, self.enrich, seq="_seq")
        self.views_built += len(evs)
        need = {(e.host, e.entities["pid"]) for e in evs if e.entities.get("unit") is None and e.entities.get("pid")}
        self._resolve_owners(need - self.owner.keys())
        owner = {k: v for k in need if (v := self.owner.get(k)) is not None}
        evs = with_owner_units(evs, owner)
        if self.prepare_view is not None:
            evs = [self.prepare_view(e) for e in evs]
        prim, copies = fold_copies(evs)
        self.copies.update(copies)
        for p in prim:
            if self.finish is not None:
                p = self.finish(p)
            self.primaries[p.seq] = p
            self.by_id[p.id] = p

    def _resolve_owners(self, keys: set[tuple[str | None, str]]) -> None:
        """The owner unit of each (host, pid): the events that can be about that process (its pid in the pid
        column, a pid in the fields, or a launch configuration, whose flags become fields) and name a unit (in
        the unit column, or in their fields) are read once, and the first of them about the process wins, as
        owners_of would over every event."""
        if not keys:
            return
        hosts = {h for h, _ in keys}
        ints = sorted({int(p) for _, p in keys if re.fullmatch(r"-?\d{1,18}", p)})
        host_ok = pl.col("host").is_in([h for h in hosts if h is not None])
        if None in hosts:
            host_ok = host_ok | pl.col("host").is_null()
        config = pl.col("kind") == "server_config"
        names_unit = (pl.col("unit").is_not_null() & (pl.col("unit") != "")) | pl.col("unitish") | config
        about = pl.col("pid").is_in(ints) | pl.col("pidish") | config
        cand = self.narrow.filter(host_ok & names_unit & about & ~pl.col("_seq").is_in(sorted(self._examined)))
        if _DEBUG:
            print(f"owners: {len(keys)} keys {sorted(keys, key=str)[:8]}, {cand.height} candidates "
                  f"{cand.group_by('kind').len().sort('len', descending=True).head(5).rows()}", file=sys.stderr)
        if cand.height:
            self._examined.update(cand["_seq"].to_list())
            evs = views(self._fetch(cand["_row"]), self.enrich, seq="_seq")
            self.views_built += len(evs)
            for e in evs:
                p, u = e.entities.get("pid"), e.entities.get("unit")
                if p and u:
                    self._owner_cands.append((e.seq, e.host, p, u))
            self._owner_cands.sort()
        found: dict[tuple[str | None, str], str] = {}
        for _seq, h, p, u in self._owner_cands:
            if (h, p) in keys:
                found.setdefault((h, p), u)
        for k in keys:
            self.owner[k] = found.get(k)


# the narrow frame kept between runs: computing it reads every event's message and fields (a second for half a
# million events); its file is named by a digest of what it derives from (see prepare.prepare)
NARROW_KEPT = 4                        # the newest narrow files kept in a store's cache
_CODE = code_digest(__file__)          # how the frame is computed (and polars' version, below) name it too


def narrow_cache(cache_dir: Path, files: Sequence[Path], inputs: object) -> Path | None:
    """The cache file of the narrow frame of these events files (their names, sizes and times) read with these
    `inputs` (what fills the hosts and units, JSON-able); None when a file is gone."""
    files_stamp = stamps(files)
    if files_stamp is None:
        return None
    h = hashlib.sha256(f"narrow\0{_CODE}\0{pl.__version__}\0{files_stamp}".encode())
    h.update(json.dumps(inputs, sort_keys=True, default=str).encode())
    return cache_dir / f"narrow~{h.hexdigest()[:32]}.parquet"


def _read_narrow(path: Path) -> pl.DataFrame | None:
    try:
        return pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError):  # not cached yet, or being replaced
        return None


def _keep_narrow(df: pl.DataFrame, path: Path) -> None:
    """Keep the narrow frame, and only the newest NARROW_KEPT of them."""
    if write_atomic([(path, lambda tmp: df.write_parquet(tmp, compression="zstd", compression_level=1))]):
        prune(path.parent, "narrow", generation(path), NARROW_KEPT)


def us(t: float) -> int:
    """Epoch seconds -> microseconds, rounded down."""
    return int(t * 1_000_000) if t >= 0 else -int(-t * 1_000_000) - 1


_SLACK_S = 1.0


def window_mask(t_lo: float, t_hi: float, slack_s: float = _SLACK_S) -> pl.Expr:
    """Events whose time may fall within [t_lo, t_hi] (a little wider: the exact test is made on the views)."""
    return pl.col("t_us").is_between(us(t_lo - slack_s), us(t_hi + slack_s))


def unit_may_be(units: Sequence[str]) -> pl.Expr:
    """Events whose unit, once prepared, may be None or one of `units`: a unit in the column is the event's."""
    u = pl.col("unit")
    return u.is_null() | (u == "") | u.is_in(list(units))
