"""The incidents of one day, found from the events around that day only.

An incident's id starts with the UTC date of its start, so a date (`2025-05-25`), a full id or a prefix that
names a date can only select incidents that start that day, and their ids (the `-2` of a second incident of
the same host and unit that day) depend on that day's incidents only. Those incidents are found from the events
of a window around the day: the day, widened on each side by a pad, plus the events a correlation may bind at
any distance (launch configurations, architecture errors) and every untimed event.

A window gives the same incidents as the whole store when nothing that decides them lies outside it. The pad
starts at twice the margin a cluster can reach across (the longest correlation window, and three gaps: the
restart of a unit within a gap of one cluster that dies within two gaps in the next), and the window is widened
(4x, then to the whole store) while some cluster comes within the margin of an edge of the window and reaches
the day; and back to the first significant event of a host, less the margin, when one of the day's incidents of
that host holds an untimed event (an untimed event joins the first cluster of its host that shares its unit or
pid, which may lie before any window).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import polars as pl

from .correlation_packs import Correlation
from .correlate_store import us

_DAY = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:$|-)")
LONG_REACH_S = 3600.0          # a step that may bind events further than this is loaded at any time
GROWTH = 4.0                   # each widening multiplies the pad
WIDENINGS = 2                  # after these, the whole store
# off: every date is answered from the whole store (a check that the window changes nothing)
ENABLED = os.environ.get("FORENSICS_DAY_WINDOW", "1") != "0"


def day_of(specs: Sequence[str]) -> str | None:
    """The UTC date (YYYY-MM-DD) every spec names (a date, a full id or a prefix longer than a date), or None."""
    days = set()
    for spec in specs:
        m = _DAY.match(spec.strip())
        if m is None:
            return None
        days.add(m.group(1))
    if len(days) != 1:
        return None
    day = days.pop()
    try:
        datetime.strptime(day, "%Y-%m-%d")
    except ValueError:
        return None
    return day


@dataclass(frozen=True)
class Reach:
    """How far correlations bind: `always`, the kinds loaded at any time (a step that binds them further than
    LONG_REACH_S); `seconds`, the furthest any other step binds from its anchor. A step that may bind untimed
    events (`untimed: true`) binds the timed ones within its window like any other (`correlate.match_at`), and
    every window holds every untimed event: its window is what counts (a DataLoader reading's `trace` step binds
    Python tracebacks within 60 s, so a day reads its own tracebacks, not the store's)."""

    always: frozenset[str]
    seconds: float

    @classmethod
    def of(cls, corrs: Iterable[Correlation], extra: Iterable[str] = ()) -> Reach:
        always = set(extra)
        far = 0.0
        for c in corrs:
            # what a firing binds around its anchor: every step but the anchor's, and what weighs against it
            binds = [(s.kinds, s.within) for s in c.steps if s.name != c.anchor]
            binds += [(a.kinds, a.within) for a in c.against]
            for kinds, within in binds:
                w = within if within is not None else c.window
                if w > LONG_REACH_S:
                    always.update(kinds)
                else:
                    far = max(far, w)
        return cls(frozenset(always), far)


@dataclass(frozen=True)
class Window:
    """[lo, hi] in epoch seconds around `day`, with the margin within which a cluster may have been cut."""

    day: str
    lo: float
    hi: float
    margin: float

    @classmethod
    def around(cls, day: str, pad: float, margin: float) -> Window:
        d0 = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp()
        return cls(day, d0 - pad, d0 + 86400.0 + pad, margin)

    @property
    def day_start(self) -> float:
        return datetime.strptime(self.day, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp()

    def wider(self, lo: float | None = None) -> Window:
        """The next window: the pad GROWTH times wider, reaching back to `lo` at least."""
        pad = (self.day_start - self.lo) * GROWTH
        if lo is not None:
            pad = max(pad, self.day_start - lo)
        return Window.around(self.day, pad, self.margin)

    def mask(self, always: Iterable[str]) -> pl.Expr:
        """The events a window holds: those timed within it, the untimed ones, and the kinds bound at any time."""
        t = pl.col("t_us")
        return t.is_between(us(self.lo), us(self.hi)) | t.is_null() | pl.col("kind").is_in(sorted(always))

    def holds(self, spans: Sequence[Span], firsts: Mapping[str, float] | None = None) -> bool:
        """Whether the incidents found in the window are those of the whole store, given each one's Span and
        the time of each host's first significant event: no cluster reaching the day comes within the margin of
        an edge, and a day's incident holding an untimed event is of a host whose first cluster lies well
        inside the window (the untimed event's home is its host's first cluster sharing its unit or pid)."""
        return self.reach_back(spans, firsts) is None and not self._cut(spans)

    def reach_back(self, spans: Sequence[Span], firsts: Mapping[str, float] | None = None) -> float | None:
        """How far back the window must reach for the day's incidents with an untimed event (None: it does)."""
        need: float | None = None
        for sp in spans:
            if sp.date == self.day and sp.untimed:
                first = (firsts or {}).get(sp.host)
                lo = (first if first is not None else -1e18) - self.margin
                if lo < self.lo:
                    need = lo if need is None else min(need, lo)
        return need

    def _cut(self, spans: Sequence[Span]) -> bool:
        d0 = self.day_start
        d1 = d0 + 86400.0
        for sp in spans:
            if sp.first is None or sp.last is None:
                continue
            if sp.first < d1 and sp.last > self.hi - self.margin:
                return True
            if sp.first < self.lo + self.margin and sp.last > d0 - self.margin:
                return True
        return False


@dataclass(frozen=True)
class Span:
    """What Window.holds reads of an incident found in a window."""

    first: float | None              # its first and last time
    last: float | None
    untimed: bool                    # it holds an untimed event
    date: str | None                 # the date it starts
    host: str


def first_window(day: str, reach: Reach, gap_s: float) -> Window:
    margin = reach.seconds + 3 * gap_s + 60.0
    return Window.around(day, 2 * margin, margin)
