"""The events a correlation can bind only near one of its anchors, read only there.

A kind that is no correlation's anchor (a kubelet's `Probe failed`, its `CrashLoopBackOff`: tens of thousands
of lines a day on a busy node) takes part in an incident only as a step of a firing, and a firing binds a step
within that step's window of its anchor (`correlate.match_at`; what weighs against a conclusion too). Such an
event is not significant (clusters are made of significant events), and the report's own windows read it again
around each incident (`incidents._Builder.build`). So the events of that kind farther than the window from every
anchor of every correlation that may bind it cannot change any firing, cluster or finding: they are left out of
the events correlation reads (`StepOnly.select`), which are prepared in Python one by one.

A kind stays whole when some step binds it without joining on the host (an anchor of another host could bind
it), at any distance (`dayscope.Reach.always`), or when it is an anchor, a launch configuration, a server's
start or readiness (clustering and the configuration review read those wherever they are). Untimed events, events
with no host and significant ones are always read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from .correlation_packs import Correlation, Join

SLACK_S = 1.0   # added to each window: a superset only makes more events read, never fewer


@dataclass(frozen=True)
class StepOnly:
    """kind -> (the anchor kinds of the correlations that may bind it, the furthest any of them binds it)."""

    kinds: Mapping[str, tuple[frozenset[str], float]]

    @classmethod
    def of(cls, corrs: Sequence[Correlation], whole: Iterable[str] = ()) -> StepOnly:
        """The step-only kinds of `corrs`, leaving out `whole` (the kinds read at any time)."""
        anchors = {k for c in corrs for k in c.step(c.anchor).kinds}
        keep = set(whole) | anchors
        binds: dict[str, tuple[set[str], float]] = {}
        for c in corrs:
            a_kinds = set(c.step(c.anchor).kinds)
            slack = c.slack + SLACK_S
            # a step that may bind untimed events (`untimed: true`) binds the timed ones within its window like
            # any other (`correlate.match_at`), and untimed events are always read: as `dayscope.Reach` has it
            parts: list[tuple[Iterable[str], float | None, Join | None]] = [
                (s.kinds, s.within, s.join) for s in c.steps if s.name != c.anchor]
            parts += [(a.kinds, a.within, a.join) for a in c.against]
            for kinds, within, join in parts:
                j = join if join is not None else c.join
                w = (within if within is not None else c.window) + slack
                for k in kinds:
                    if "host" not in j.same:
                        keep.add(k)
                        continue
                    got = binds.setdefault(k, (set(), 0.0))
                    binds[k] = (got[0] | a_kinds, max(got[1], w))
        return cls({k: (frozenset(a), w) for k, (a, w) in sorted(binds.items()) if k not in keep})

    def select(self, narrow: pl.DataFrame) -> pl.DataFrame:
        """The `_seq` of the events of `narrow` (a selection of the narrow frame: the events correlation would
        read) that it still reads: all but those of a step-only kind farther than its window from every anchor,
        on the same host, that may bind it."""
        kind, t, host = pl.col("kind"), pl.col("t_us"), pl.col("host")
        loose = (kind.is_in(sorted(self.kinds)) & ~pl.col("significant") & t.is_not_null() & host.is_not_null()
                 & ~pl.col("archish"))
        parts = [narrow.filter(~loose).select("_seq")]
        step_only = narrow.filter(loose).select("_seq", "kind", "host", "t_us")
        if step_only.is_empty():
            return parts[0]
        timed = narrow.filter(t.is_not_null() & host.is_not_null()).select("kind", "host", pl.col("t_us").alias("_a"))
        for k in sorted(set(step_only.get_column("kind").unique().to_list())):
            anchor_kinds, w = self.kinds[k]
            anchors = timed.filter(kind.is_in(sorted(anchor_kinds))).select("host", "_a").sort("_a")
            if anchors.is_empty():
                continue
            mine = step_only.filter(kind == k).select("_seq", "host", "t_us").sort("t_us")
            near = mine.join_asof(anchors, left_on="t_us", right_on="_a", by="host", strategy="nearest",
                                  tolerance=int(w * 1_000_000), check_sortedness=False)   # sorted above
            parts.append(near.filter(pl.col("_a").is_not_null()).select("_seq"))
        return pl.concat(parts).sort("_seq")   # the parts are disjoint: the other kinds, then each step-only kind
