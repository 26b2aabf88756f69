"""Correlations evaluated only where they can matter to an incident, with the findings `find_matches` +
`resolve` would give over every anchor (for the findings that matter).

Most firings of a large store are far from any incident (a unit that crash-loops all day fires
`systemd.failed_result` at every exit). An incident only shows findings that bind one of its significant
events or are anchored within its span, and the findings those can be merged with. So:

  * A correlation is *independent* when its firing at one anchor cannot change its firing at another: no
    step but the anchor binds the anchor's kinds (an event bound by a firing cannot anchor a later one) and
    no step is `unique`. Its firings are computed anchor by anchor, only at the anchors asked for. The other
    (chained) correlations are computed in full, as find_matches does.
  * The anchors asked for start with those whose firing could bind a significant event (any step, within its
    window, joined on the entities the step must share), and grow until nothing else can matter:
      - every event a firing blames, explains or is anchored at may anchor a firing (a fold targets the
        conclusion that blames or explains its anchor), and the firings that could blame or explain it are
        asked for (a fold targets the first conclusion with the same cause, or that explains its anchor;
        and what a fold explains is added to its target);
      - every anchor inside an incident's span is asked for (a finding anchored there belongs to it), the
        incidents being recomputed until their spans stop growing (`LocalMatcher.add_spans`).
    A firing at an anchor never asked for can then share no event with a firing that was computed: it could
    neither take part in a group, a fold or a merge with one, nor belong to an incident.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import replace

from .correlate import Match, Timeline, find_matches, kernel_window, match_at, untimed_ok
from .correlation_packs import Correlation, Join, Step
from .coverage import Coverage
from .eventview import EventView


def independent(c: Correlation) -> bool:
    anchor = set(c.step(c.anchor).kinds)
    return not any(s.unique for s in c.steps) and not any(
        set(s.kinds) & anchor for s in c.steps if s.name != c.anchor)


def _key(e: EventView, same: tuple[str, ...]) -> tuple[str, ...] | None:
    vals = tuple(e.entities.get(k) for k in same)
    return None if any(v is None for v in vals) else vals  # type: ignore[return-value]


class LocalMatcher:
    """The matches of `corrs` over a Timeline: chained correlations in full, independent ones at the anchors
    asked for (`ask`, `ask_near`), growing by the rules of the module docstring as firings are found."""

    def __init__(self, tl: Timeline, corrs: Sequence[Correlation], coverage: Coverage | None):
        self.tl = tl
        self.corrs = tuple(corrs)
        self.cov = coverage if coverage is not None else Coverage([])
        self.indep = [c for c in self.corrs if independent(c)]
        self.by_anchor_kind: dict[str, list[Correlation]] = {}
        for c in self.indep:
            for k in dict.fromkeys(c.step(c.anchor).kinds):
                self.by_anchor_kind.setdefault(k, []).append(c)
        # every non-anchor step by the kinds it binds: (correlation, step, blames or explains)
        self.steps_of: dict[str, list[tuple[Correlation, Step, bool]]] = {}
        for c in self.corrs:
            for s in c.steps:
                if s.name == c.anchor:
                    continue
                role = s.name == c.cause or s.name in c.explains
                for k in dict.fromkeys(s.kinds):
                    self.steps_of.setdefault(k, []).append((c, s, role))
        self._index: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[tuple[str, ...] | None, tuple[list[float], list[EventView]]]] = {}
        self.asked: set[int] = set()
        self.pending: list[EventView] = []
        self.matches: list[Match] = []
        for c in self.corrs:
            if not independent(c):
                for m in find_matches(tl, c, self.cov):
                    self.matches.append(m)
                    self._grow(m)
        # untimed anchors (kernel seconds not anchored) are few: always asked for
        for k, cs in self.by_anchor_kind.items():
            if any(untimed_ok(c) for c in cs):
                self.ask(self.tl.untimed(k))

    # -- asking for anchors
    def ask(self, evs: Iterable[EventView]) -> int:
        n = 0
        for e in evs:
            if e.seq not in self.asked and e.kind in self.by_anchor_kind:
                self.asked.add(e.seq)
                self.pending.append(e)
                n += 1
        return n

    def _anchors(self, c: Correlation, same: tuple[str, ...]) -> dict[tuple[str, ...] | None, tuple[list[float], list[EventView]]]:
        """The timed anchor events of `c` by the values of the entities `same` (None: not all known)."""
        key = (tuple(dict.fromkeys(c.step(c.anchor).kinds)), same)
        idx = self._index.get(key)
        if idx is None:
            groups: dict[tuple[str, ...] | None, list[EventView]] = {}
            for k in dict.fromkeys(c.step(c.anchor).kinds):
                for e in self.tl.by_kind.get(k, []):
                    if e.t is not None:
                        groups.setdefault(_key(e, same) if same else (), []).append(e)
            idx = {}
            for g, evs in groups.items():
                evs.sort(key=lambda e: (e.t, e.seq))
                idx[g] = ([e.t for e in evs], evs)  # type: ignore[misc]
            self._index[key] = idx
        return idx

    def ask_near(self, x: EventView, roles_only: bool) -> int:
        """Ask for `x` as an anchor and for every anchor whose firing could bind `x` (in a step that blames or
        explains, when `roles_only`)."""
        n = self.ask((x,))
        for c, s, role in self.steps_of.get(x.kind, ()):
            if roles_only and not role:
                continue
            j: Join = s.join if s.join is not None else c.join
            if x.t is None:
                if not s.untimed:
                    continue
                for g, (_ts, evs) in self._anchors(c, ()).items():
                    n += self.ask(evs)
                continue
            same = tuple(sorted(j.same))
            k = _key(x, same) if same else ()
            if k is None:
                continue
            hit = self._anchors(c, same).get(k)
            if hit is None:
                continue
            w = s.within if s.within is not None else c.window
            ts, evs = hit
            n += self.ask(evs[bisect_left(ts, x.t - w):bisect_right(ts, x.t + w)])
        return n

    def ask_span(self, host: str, start: float, end: float) -> int:
        """Every anchor on `host` within [start, end] (a finding anchored there belongs to that incident)."""
        n = 0
        for c in self.indep:
            for (ts, evs) in self._anchors(c, ()).values():
                n += self.ask(e for e in evs[bisect_left(ts, start):bisect_right(ts, end)] if e.host == host)
        return n

    # -- computing
    def run(self) -> list[Match]:
        """Fire at every anchor asked for (and at those the firings ask for); all the matches so far."""
        while self.pending:
            todo = sorted(self.pending, key=lambda e: (e.t is None, e.t or 0.0, e.seq))
            self.pending = []
            for a in todo:
                for c in self.by_anchor_kind.get(a.kind, ()):
                    m = self._fire(c, a)
                    if m is not None:
                        self.matches.append(m)
                        self._grow(m)
        return self.matches

    def _fire(self, c: Correlation, a: EventView) -> Match | None:
        """find_matches' firing at one anchor (an independent correlation has no other state)."""
        if a.t is None and not untimed_ok(c):
            return None
        m = match_at(self.tl, c, a)
        if m is None or a.ts is None:
            return m
        since, until = kernel_window(a.ts)
        rep = self.cov.report(a.entities.get("host"), a.entities.get("unit"), a.ts, since, until)
        state = {"kernel": rep.kernel, "unit_output": rep.unit_output}
        if any(state[log] != (want == "present") for log, want in c.coverage):
            return None
        return replace(m, coverage=rep)

    def _grow(self, m: Match) -> None:
        c = m.correlation
        seen: set[int] = set()
        for x in (m.anchor, *m.events(c.cause), *(e for n in c.explains for e in m.events(n))):
            if x.seq not in seen:
                seen.add(x.seq)
                self.ask_near(x, roles_only=True)
