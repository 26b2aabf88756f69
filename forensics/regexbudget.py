"""Time bounds for `engine: regex` rules: a timeout per message and a time budget per rule and source.

The `regex` module runs look-around and back-references, and a bad pattern can backtrack catastrophically
(`(a|aa)+$` on a long run of `a`). So each search stops after `REGEX_TIMEOUT`, and what a rule spends beyond
`REGEX_FREE` on a message is charged to its budget for that source (`REGEX_BUDGET`, over every batch of one
ingest, rescan or explain of the source). Once the budget is spent the rule is not applied to the rest of
the source: N hostile lines cost about `REGEX_BUDGET` (plus at most one `REGEX_TIMEOUT`), not N x
`REGEX_TIMEOUT`. Nothing is hidden: every rule
that timed out is reported by id (`RuleTimeout.describe()`), with the source, how many messages timed out
and how many were never searched.

    budget = RegexBudget()                          # one per source
    m = budget.search(rule, rx, message, path, line)   # None: no match, timed out, or budget spent
    for t in budget.timeouts(): print("warning:", t.describe())

Searches well under `REGEX_FREE` (every sane pattern) are never charged, so a big source with many candidate
lines never runs out of budget. The charge is the search's CPU time on its thread, not the wall clock: a
pause of the machine or a wait for the GIL held by another worker is not the pattern's cost, and must not
use up the budget of a sane rule on a busy host. Nor is a run of Python's cycle collector, which can start in
any search (when the match object is made) and take milliseconds on a big heap: its time on the thread is
subtracted (`gc.callbacks`). Only the `regex` engine needs this: polars' engine runs in
linear time.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import regex

from .rulemodel import Rule

REGEX_TIMEOUT = 0.25    # seconds: one search of one message is stopped after this
REGEX_BUDGET = 1.0      # seconds: a rule's charged time per source before it is no longer applied to it
REGEX_FREE = 0.001      # seconds per message never charged (a sane pattern takes microseconds)
MAX_LOCATIONS = 1000    # timed-out lines remembered per rule and source (for `explain`)


@dataclass(frozen=True)
class RuleTimeout:
    """What timeouts cost one rule on one source."""

    rule: str
    location: str         # where the rule is defined: `pack.yaml:line`
    source: str           # the path of the records
    timed_out: int        # messages whose search was stopped
    skipped: int          # candidate messages never searched: the budget was spent
    seconds: float        # time charged to the budget
    first: str            # `path:line` of the first message that timed out ("" if none did)
    timeout: float = REGEX_TIMEOUT
    budget: float = REGEX_BUDGET

    @property
    def exhausted(self) -> bool:
        return self.skipped > 0

    def describe(self) -> str:
        where = f" ({self.location})" if self.location else ""
        what = (f"timed out on {self.timed_out} message(s) of {self.source or 'the input'}"
                + (f" (first at {self.first})" if self.first else "")
                + f"; each search stops after {self.timeout:g} s") if self.timed_out else (
            f"was slow on {self.source or 'the input'}")
        if self.skipped:
            lost = (f", and its time budget of {self.budget:g} s for the source is spent: it was not applied to "
                    f"the other {self.skipped} candidate message(s), so its events there are missing")
        else:
            lost = ", so its events on those lines are missing"
        return (f"rule {self.rule}{where} {what}{lost}. Simplify the pattern (nested or overlapping repeats such "
                f"as `(a|aa)+` backtrack catastrophically), anchor it, or narrow its `literals`/`applies`; "
                f"`forensics explain --rules DIR LINE` shows it on one line")


@dataclass
class _Tally:
    """One rule on one source, while matching (internal, mutable)."""

    rule: str
    location: str
    source: str
    charged: float = 0.0
    timed_out: int = 0
    skipped: int = 0
    lines: list[int] = field(default_factory=list)          # of the messages that timed out
    skipped_lines: list[int] = field(default_factory=list)  # of the messages not searched


_GC = threading.local()


def _gc_clock(phase: str, _info: dict) -> None:
    """Adds up, per thread, the CPU time the cycle collector takes on it."""
    now = time.thread_time()
    if phase == "start":
        _GC.start = now
    else:
        _GC.spent = getattr(_GC, "spent", 0.0) + now - getattr(_GC, "start", now)


def _gc_spent() -> float:
    return getattr(_GC, "spent", 0.0)


gc.callbacks.append(_gc_clock)


class RegexBudget:
    """The time `engine: regex` rules may spend, per rule and source path; see the module docstring."""

    def __init__(self, budget: float = REGEX_BUDGET, timeout: float = REGEX_TIMEOUT, free: float = REGEX_FREE):
        self.budget, self.timeout, self.free = budget, timeout, free
        self._tally: dict[tuple[str, str], _Tally] = {}

    def _of(self, rule: Rule, path: str | None) -> _Tally:
        key = (rule.id, path or "")
        t = self._tally.get(key)
        if t is None:
            t = self._tally[key] = _Tally(rule.id, str(rule.location) if rule.location.path else "", path or "")
        return t

    def spent(self, rule: Rule, path: str | None) -> bool:
        t = self._tally.get((rule.id, path or ""))
        return t is not None and t.charged >= self.budget

    def skip(self, rule: Rule, path: str | None, lines: Sequence[int | None]) -> None:
        """Count candidate messages (at `lines`) not searched because the rule's budget for the source is spent."""
        if lines:
            t = self._of(rule, path)
            t.skipped += len(lines)
            room = MAX_LOCATIONS - len(t.skipped_lines)
            t.skipped_lines.extend(ln for ln in lines[:max(room, 0)] if ln is not None)

    def search(self, rule: Rule, rx: regex.Pattern, message: str, path: str | None,
               line: int | None) -> regex.Match | None:
        """`rx.search(message)` within the rule's timeout and budget; None when it does not match, timed
        out, or the budget is spent (then it is counted as skipped)."""
        t = self._tally.get((rule.id, path or ""))
        left = self.budget - (t.charged if t is not None else 0.0)
        if left <= 0:
            self.skip(rule, path, [line])
            return None
        t0, g0 = time.thread_time(), _gc_spent()
        try:
            # the timeout is the whole per-message bound, not what is left of the budget: it runs on the wall
            # clock, and 1 ms left would time out a sane search on a machine that paused it (the budget, in
            # CPU time, can go over by at most one timeout)
            return rx.search(message, timeout=self.timeout)
        except TimeoutError:
            t = self._of(rule, path)
            t.timed_out += 1
            if line is not None and len(t.lines) < MAX_LOCATIONS:
                t.lines.append(line)
            return None
        finally:
            cost = time.thread_time() - t0 - (_gc_spent() - g0) - self.free
            if cost > 0:
                self._of(rule, path).charged += cost

    def timeouts(self) -> tuple[RuleTimeout, ...]:
        """Every rule that timed out or was stopped, in the order they first did."""
        return tuple(RuleTimeout(t.rule, t.location, t.source, t.timed_out, t.skipped, round(t.charged, 3),
                                 f"{t.source}:{t.lines[0]}" if t.lines else "", self.timeout, self.budget)
                     for t in self._tally.values() if t.timed_out or t.skipped)

    def timed_out_on(self, path: str | None, first: int, last: int) -> tuple[str, ...]:
        """Ids of the rules whose search timed out on a record of `path` spanning lines first..last."""
        return tuple(r for (r, p), t in self._tally.items()
                     if p == (path or "") and any(first <= ln <= last for ln in t.lines))

    def skipped_on(self, path: str | None, first: int, last: int) -> tuple[str, ...]:
        """Ids of the rules not applied to a record of `path` spanning first..last (their budget was spent)."""
        return tuple(r for (r, p), t in self._tally.items()
                     if p == (path or "") and any(first <= ln <= last for ln in t.skipped_lines))
