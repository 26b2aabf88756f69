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
the day, or one of the day's incidents holds an untimed event (an untimed event joins the first cluster of its
host that shares its unit or pid, which may lie before any window).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import polars as pl

from .correlate import Correlation
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
    LONG_REACH_S, or untimed); `seconds`, the furthest any other step binds from its anchor."""

    always: frozenset[str]
    seconds: float

    @classmethod
    def of(cls, corrs: Iterable[Correlation], extra: Iterable[str] = ()) -> Reach:
        always = set(extra)
        far = 0.0
        for c in corrs:
            binds = [(s.kinds, s.within, s.untimed, s.name == c.anchor) for s in c.steps]
            binds += [(a.kinds, a.within, False, False) for a in c.against]
            for kinds, within, untimed, anchor in binds:
                w = within if within is not None else c.window
                if anchor:
                    continue
                if untimed or w > LONG_REACH_S:
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

    def wider(self) -> Window:
        pad = (self.day_start - self.lo) * GROWTH
        return Window.around(self.day, pad, self.margin)

    def mask(self, always: Iterable[str]) -> pl.Expr:
        """The events a window holds: those timed within it, the untimed ones, and the kinds bound at any time."""
        t = pl.col("t_us")
        return t.is_between(us(self.lo), us(self.hi)) | t.is_null() | pl.col("kind").is_in(sorted(always))

    def holds(self, spans: Sequence[tuple[float | None, float | None, bool, str | None]]) -> bool:
        """Whether the incidents found in the window are those of the whole store, given each one's (first
        time, last time, holds an untimed event, start date): no cluster reaching the day comes within the
        margin of an edge, and none of the day's holds an untimed event."""
        d0 = self.day_start
        d1 = d0 + 86400.0
        for first, last, untimed, date in spans:
            if date == self.day and untimed:
                return False
            if first is None or last is None:
                continue
            if first < d1 and last > self.hi - self.margin:
                return False
            if first < self.lo + self.margin and last > d0 - self.margin:
                return False
        return True


def first_window(day: str, reach: Reach, gap_s: float) -> Window:
    margin = reach.seconds + 3 * gap_s + 60.0
    return Window.around(day, 2 * margin, margin)


def date_of(t: float | None) -> str | None:
    if t is None:
        return None
    return f"{datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=t):%Y-%m-%d}"
