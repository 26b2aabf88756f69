"""Coverage: which logs were ingested for a host around a moment (the kernel's, systemd's lines about a unit, the
unit's own output) and which were not, for a correlation's `coverage:` and its statement's `{coverage.*}`."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import polars as pl

from .eventview import KERNEL_KINDS, SYSTEMD_KINDS, EventView

COVERAGE_LOGS = ("kernel", "unit_output")
COVERAGE_STATES = ("present", "missing")


@dataclass(frozen=True)
class SourceSpan:
    """What one source holds for one host: a class of log lines (`kernel`, `systemd`, `service`) and unit,
    with the time span they cover."""

    path: str
    format: str
    host: str | None
    log: str                          # kernel | systemd | service
    unit: str | None
    first: datetime | None
    last: datetime | None
    records: int
    untimed: int = 0                  # records of this class without a wall time (unanchored kernel seconds)


@dataclass(frozen=True)
class CoverageReport:
    kernel: bool                      # a kernel log whose span reaches the moment
    unit_output: bool                 # the service's own output (not only systemd's lines about it)
    ingested: tuple[str, ...]         # "journal.log (systemd lines for x.service)" ...
    missing: tuple[str, ...]          # "the kernel log (dmesg or journalctl -k) of h around 20:17:19" ...
    notes: tuple[str, ...] = ()       # e.g. "dmesg.log: 12 kernel lines have no wall time (not anchored)"

    def as_values(self) -> dict[str, str]:
        return {"ingested": "; ".join(self.ingested) or "nothing",
                "missing": "; ".join(self.missing) or "nothing",
                "notes": " ".join(self.notes),
                "kernel": "yes" if self.kernel else "no",
                "unit_output": "yes" if self.unit_output else "no",
                "kernel_seen": ("a" if self.kernel else "no") + " kernel log covering the moment was ingested",
                "unit_output_seen": "the service's own output was " + ("" if self.unit_output else "not ") + "ingested"}


_LOG_WORDS = {"kernel": "kernel lines", "systemd": "systemd lines", "service": "the service's own output"}


class Coverage:
    """The sources' spans per host; answers "what was ingested around this moment, and what was not"."""

    def __init__(self, spans: Sequence[SourceSpan]):
        self._spans: tuple[SourceSpan, ...] | None = tuple(sorted(spans, key=lambda s: (s.path, s.host or "", s.log,
                                                                                        s.unit or "")))
        self._frame: pl.DataFrame | None = None
        self._hosts: dict[str | None, _HostSpans] = {}
        self._memo: dict[tuple, CoverageReport] = {}
        self._windows: dict[tuple, dict[str, dict[str, _WindowUnits]]] = {}

    @classmethod
    def from_frame(cls, df: pl.DataFrame) -> Coverage:
        """Coverage of spans given as a frame (path, format, host, log, unit, first, last, records, untimed):
        a store has one span per unit a journal names, often a hundred thousand; a host's are only read (into
        the indexes its reports use) when a report about it is asked for."""
        cov = cls(())
        cov._spans = None
        cov._frame = (df.with_columns(pl.col("host").fill_null("").alias("_h"), pl.col("unit").fill_null("").alias("_u"))
                      .sort(["path", "_h", "log", "_u"], maintain_order=True).drop("_h", "_u"))
        return cov

    @property
    def spans(self) -> tuple[SourceSpan, ...]:
        if self._spans is None:
            assert self._frame is not None
            cols = [self._frame[c].to_list() for c in ("path", "format", "host", "log", "unit", "first", "last",
                                                       "records", "untimed")]
            self._spans = tuple(SourceSpan(path=p, format=f or "", host=h, log=lg, unit=u, first=a, last=z, records=n,
                                           untimed=un) for p, f, h, lg, u, a, z, n, un in zip(*cols))
        return self._spans

    def _host(self, host: str | None) -> _HostSpans:
        hs = self._hosts.get(host)
        if hs is None:
            if self._frame is not None:
                mine = pl.col("host").is_null() if host is None else (pl.col("host") == host) | pl.col("host").is_null()
                hs = _HostSpans.of_frame(self._frame.filter(mine))
            else:
                hs = _HostSpans.of([s for s in self.spans if s.host == host or s.host is None])
            self._hosts[host] = hs
        return hs

    @classmethod
    def from_views(cls, evs: Sequence[EventView]) -> Coverage:
        """Coverage as far as the events themselves show (fixture timelines, stores without records)."""
        acc: dict[tuple, list] = {}
        for e in evs:
            log = "kernel" if e.kind in KERNEL_KINDS else "systemd" if e.kind in SYSTEMD_KINDS else "service"
            key = (e.path, e.format, e.host, log, e.unit if log != "kernel" else None)
            a = acc.setdefault(key, [None, None, 0, 0])
            if e.ts is None:
                a[3] += 1
            else:
                a[0] = e.ts if a[0] is None or e.ts < a[0] else a[0]
                a[1] = e.ts if a[1] is None or e.ts > a[1] else a[1]
            a[2] += 1
        return cls([SourceSpan(path=k[0], format=k[1], host=k[2], log=k[3], unit=k[4], first=v[0], last=v[1],
                               records=v[2], untimed=v[3]) for k, v in acc.items()])

    def report(self, host: str | None, unit: str | None, at: datetime, since: datetime,
               until: datetime) -> CoverageReport:
        key = (host, unit, at, since, until)
        rep = self._memo.get(key)
        if rep is None:
            rep = self._memo[key] = self._report(host, unit, at, since, until)
        return rep

    def _ingested(self, host: str | None, since: datetime, until: datetime) -> dict[str, dict[str, _WindowUnits]]:
        """path -> log -> the units of the spans overlapping [since, until] (for the logs with such a span)."""
        key = (host, since, until)
        ingested = self._windows.get(key)
        if ingested is None:
            ingested = self._windows[key] = self._host(host).window(since, until)
        return ingested

    def _report(self, host: str | None, unit: str | None, at: datetime, since: datetime,
                until: datetime) -> CoverageReport:
        hs = self._host(host)
        ingested = self._ingested(host, since, until)
        notes: list[str] = []
        kernel_spans = hs.kernel
        kernel = any(s.first is not None and s.last is not None and s.first <= at
                     and s.last >= at - timedelta(seconds=5) for s in kernel_spans)
        for s in kernel_spans:
            if s.untimed:
                notes.append(f"{s.path}: {s.untimed} kernel line(s) have no wall-clock time (kernel seconds not "
                             f"anchored to a boot time), so they cannot be placed in the window.")
            elif not kernel and s.last is not None and s.last < at:
                notes.append(f"{s.path}: the kernel log ends at {hms(s.last)}, before {hms(at)}.")
            elif not kernel and s.first is not None and s.first > at:
                notes.append(f"{s.path}: the kernel log starts at {hms(s.first)}, after {hms(at)}.")
        unit_output = False
        for s in hs.service:
            if unit is not None and s.unit not in (unit, None):
                continue
            reaches = hs.reach[s.path]
            if s.first <= at and reaches >= at - timedelta(seconds=60):
                unit_output = True
        missing = []
        h = host or "the host"
        if not kernel:
            missing.append(f"the kernel log (dmesg or journalctl -k) of {h} around {hms(at)}")
        if not unit_output:
            missing.append(f"the service's own output (journalctl -u {unit})" if unit else
                           "the service's own output")
        ing = tuple(f"{p} (" + ", ".join(_log_words(log, us, unit) for log, us in sorted(logs.items())) + ")"
                    for p, logs in sorted(ingested.items()))
        return CoverageReport(kernel=kernel, unit_output=unit_output, ingested=ing, missing=tuple(missing),
                              notes=tuple(dict.fromkeys(notes)))


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US = timedelta(microseconds=1)


def _us(t: datetime) -> int:
    return (t - _EPOCH) // _US


class _SpanGroup:
    """The timed spans of one path and class of log, for counting those that overlap a window (times in
    microseconds): n - (ended before it) - (started after it), by bisection; the distinct units likewise (a
    unit's spans as one interval when they touch, `u_firsts`/`u_lasts`; a unit whose spans leave gaps,
    `multi`, is checked span by span). `units()`: unit -> its intervals; `order()`: (unit, first, last) of the
    spans in coverage order, for naming the units (both made when first asked for)."""

    def __init__(self, firsts: list[int], lasts: list[int], u_firsts: list[int], u_lasts: list[int],
                 multi: list[list[tuple[int, int]]],
                 units: Callable[[], Mapping[str, list[tuple[int, int]]]],
                 order: Callable[[], list[tuple[str | None, int, int]]]):
        self.firsts, self.lasts, self.u_firsts, self.u_lasts, self.multi = firsts, lasts, u_firsts, u_lasts, multi
        self._units_fn, self._order_fn = units, order
        self._units: Mapping[str, list[tuple[int, int]]] | None = None
        self._order: list[tuple[str | None, int, int]] | None = None

    @classmethod
    def of(cls, timed: Sequence[tuple[str | None, int, int]], log: str) -> _SpanGroup:
        """From the (unit, first, last) of the timed spans, in coverage order."""
        units: dict[str, list[tuple[int, int]]] = {}
        if log != "kernel":
            for u, a, z in timed:
                if u:
                    units.setdefault(u, []).append((a, z))
        single: list[tuple[int, int]] = []
        multi: list[list[tuple[int, int]]] = []
        for v in units.values():
            span = _one_interval(v)
            if span is None:
                multi.append(v)
            else:
                single.append(span)
        order = list(timed)
        return cls(sorted(a for _, a, _ in timed), sorted(z for _, _, z in timed), sorted(a for a, _ in single),
                   sorted(z for _, z in single), multi, lambda: units, lambda: order)

    def units(self) -> Mapping[str, list[tuple[int, int]]]:
        if self._units is None:
            self._units = self._units_fn()
        return self._units

    def order(self) -> list[tuple[str | None, int, int]]:
        if self._order is None:
            self._order = self._order_fn()
        return self._order

    @staticmethod
    def _count(firsts: list[int], lasts: list[int], since: int, until: int) -> int:
        return len(firsts) - bisect_left(lasts, since) - (len(firsts) - bisect_right(firsts, until))

    def window(self, since: int, until: int) -> _WindowUnits | None:
        if not self._count(self.firsts, self.lasts, since, until):
            return None
        n = self._count(self.u_firsts, self.u_lasts, since, until)
        n += sum(1 for v in self.multi if any(a <= until and z >= since for a, z in v))
        return _WindowUnits(self, since, until, n)


def _one_interval(iv: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    """The union of intervals when it is one interval (they touch or overlap), else None."""
    iv = sorted(iv)
    lo, hi = iv[0]
    for a, z in iv[1:]:
        if a > hi:
            return None
        hi = max(hi, z)
    return lo, hi


class _UnitIntervals(Mapping):
    """unit -> its spans' intervals, from a frame (unit, as, zs) with one row per unit: a journal names up to a
    hundred thousand units, and a report asks about a few, so a unit is looked for by one vectorised comparison
    (no index of them all is made), and its intervals become Python objects when first asked for."""

    def __init__(self, df: pl.DataFrame):
        self._df = df
        self._units = df.get_column("unit")
        self._done: dict[str, list[tuple[int, int]]] = {}

    def _row(self, unit: object) -> int | None:
        if not isinstance(unit, str):
            return None
        at = (self._units == unit).arg_true()
        return int(at[0]) if at.len() else None

    def __getitem__(self, unit: str) -> list[tuple[int, int]]:
        iv = self._done.get(unit)
        if iv is None:
            i = self._row(unit)
            if i is None:
                raise KeyError(unit)
            iv = self._done[unit] = list(zip(self._df["as"][i].to_list(), self._df["zs"][i].to_list()))
        return iv

    def __contains__(self, unit: object) -> bool:
        return self._row(unit) is not None

    def __iter__(self):  # noqa: ANN204
        return iter(self._units.to_list())

    def __len__(self) -> int:
        return self._units.len()


class _WindowUnits:
    """The distinct units of the spans of a _SpanGroup overlapping a window: their number, membership, and
    (iterating) the units themselves in span order."""

    def __init__(self, group: _SpanGroup, since: int, until: int, n: int):
        self.group, self.since, self.until, self.n = group, since, until, n

    def __len__(self) -> int:
        return self.n

    def __contains__(self, unit: object) -> bool:
        return any(a <= self.until and z >= self.since for a, z in self.group.units().get(unit, ()))  # type: ignore[call-overload]

    def __iter__(self):  # noqa: ANN204
        units = set(self.group.units())
        return iter(dict.fromkeys(u for u, a, z in self.group.order() if u and u in units
                                  and a <= self.until and z >= self.since))


class _HostSpans:
    """The spans one host's reports read (its own and those without a host): the kernel and service spans
    themselves, the last time each path reaches, and the spans of each path and log as a _SpanGroup."""

    def __init__(self, kernel: list[SourceSpan], service: list[SourceSpan], reach: dict[str, datetime],
                 groups: dict[tuple[str, str], _SpanGroup]):
        self.kernel, self.service, self.reach, self.groups = kernel, service, reach, groups

    @classmethod
    def of(cls, spans: Sequence[SourceSpan]) -> _HostSpans:
        reach: dict[str, datetime] = {}
        for s in spans:
            if s.last is not None and (s.path not in reach or s.last > reach[s.path]):
                reach[s.path] = s.last
        acc: dict[tuple[str, str], list[tuple[str | None, int, int]]] = {}
        for s in spans:
            g = acc.setdefault((s.path, s.log), [])
            if s.first is not None and s.last is not None:
                g.append((s.unit, _us(s.first), _us(s.last)))
        return cls([s for s in spans if s.log == "kernel"],
                   [s for s in spans if s.log == "service" and s.first is not None and s.last is not None],
                   reach, {k: _SpanGroup.of(v, k[1]) for k, v in acc.items()})

    @classmethod
    def of_frame(cls, df: pl.DataFrame) -> _HostSpans:
        """The same from a frame of spans (path, format, host, log, unit, first, last, records, untimed) in
        coverage order, without making an object of each span: the sorted times and the units' intervals
        are gathered by polars."""
        def objs(part: pl.DataFrame) -> list[SourceSpan]:
            return [SourceSpan(path=r["path"], format=r["format"] or "", host=r["host"], log=r["log"], unit=r["unit"],
                               first=r["first"], last=r["last"], records=r["records"], untimed=r["untimed"])
                    for r in part.iter_rows(named=True)]

        kernel = objs(df.filter(pl.col("log") == "kernel"))
        service = objs(df.filter((pl.col("log") == "service") & pl.col("first").is_not_null()
                                 & pl.col("last").is_not_null()))
        r = df.filter(pl.col("last").is_not_null()).group_by("path").agg(pl.col("last").max())
        reach = dict(zip(r["path"].to_list(), r["last"].to_list()))
        timed = df.filter(pl.col("first").is_not_null() & pl.col("last").is_not_null()).select(
            "path", "log", "unit", pl.col("first").dt.epoch("us").alias("a"), pl.col("last").dt.epoch("us").alias("z"))
        times = timed.group_by("path", "log").agg(pl.col("a").sort(), pl.col("z").sort())
        named = (timed.filter(pl.col("unit").is_not_null() & (pl.col("unit") != "") & (pl.col("log") != "kernel"))
                 .group_by("path", "log", "unit").agg(pl.len().alias("n"), pl.col("a").min(), pl.col("z").max(),
                                                      pl.col("a").alias("as"), pl.col("z").alias("zs")))
        ones = named.filter(pl.col("n") == 1).group_by("path", "log").agg(pl.col("a").sort(), pl.col("z").sort())
        single: dict[tuple[str, str], tuple[list[int], list[int]]] = {
            (p, lg): (a, z) for p, lg, a, z in ones.iter_rows()}
        more: dict[tuple[str, str], tuple[list[tuple[int, int]], list[list[tuple[int, int]]]]] = {}
        for p, lg, _u, _n, _a, _z, a_s, z_s in named.filter(pl.col("n") > 1).iter_rows():
            iv = list(zip(a_s, z_s))
            one = _one_interval(iv)
            m = more.setdefault((p, lg), ([], []))
            if one is None:
                m[1].append(iv)
            else:
                m[0].append(one)

        def units_of(path: str, log: str) -> Callable[[], Mapping[str, list[tuple[int, int]]]]:
            return lambda: _UnitIntervals(named.filter((pl.col("path") == path) & (pl.col("log") == log))
                                          .select("unit", "as", "zs"))

        def order_of(path: str, log: str) -> Callable[[], list[tuple[str | None, int, int]]]:
            return lambda: list(timed.filter((pl.col("path") == path) & (pl.col("log") == log))
                                .select("unit", "a", "z").iter_rows())

        groups = {(p, lg): _SpanGroup([], [], [], [], [], dict, list) for p, lg in df.select("path", "log").unique().iter_rows()}
        for p, lg, a, z in times.iter_rows():
            uf, ul = single.get((p, lg), ([], []))
            extra, multi = more.get((p, lg), ([], []))
            if extra:
                uf = sorted([*uf, *(x for x, _ in extra)])
                ul = sorted([*ul, *(y for _, y in extra)])
            groups[(p, lg)] = _SpanGroup(a, z, uf, ul, multi, units_of(p, lg), order_of(p, lg))
        return cls(kernel, service, reach, groups)

    def window(self, since: datetime, until: datetime) -> dict[str, dict[str, _WindowUnits]]:
        lo, hi = _us(since), _us(until)
        out: dict[str, dict[str, _WindowUnits]] = {}
        for (path, log), g in self.groups.items():
            w = g.window(lo, hi)
            if w is not None:
                out.setdefault(path, {})[log] = w
        return out


def _log_words(log: str, units: Sequence[str] | _WindowUnits, unit: str | None) -> str:
    base = _LOG_WORDS[log]
    if not units:
        return base
    if unit in units:
        n = len(units) - 1
        return f"{base} of {unit}" + (f" and of {n} other unit{'s' if n > 1 else ''}" if n else "")
    if len(units) <= 2:
        return f"{base} of {' and '.join(units)}"
    return f"{base} of {len(units)} other units"


def hms(t: datetime) -> str:
    """HH:MM:SS of `t` in UTC."""
    u = t.astimezone(timezone.utc)
    return f"{u.hour:02d}:{u.minute:02d}:{u.second:02d}"
