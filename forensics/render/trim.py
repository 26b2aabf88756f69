"""Fitting Markdown into a size limit (a GitHub comment holds 65,536 characters).

In order, until the report fits:
1. the appendix's cited excerpts are dropped from the end, keeping as many as fit;
2. timeline rows and key lines are dropped, context first, causes and symptoms last
   (the summary, analysis, configuration, gaps and actions always stay);
3. the report is cut at a line boundary, any open fence closed.
Each step leaves a note saying what was left out and how to get everything (`--max-chars 0`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from forensics.render.view import IncidentView, KeyLine, ReportView, TimelineRow

T = TypeVar("T", TimelineRow, KeyLine)


def trim_note(view: ReportView, limit: int, what: str = "the report is trimmed") -> str:
    rerun = "run the same `forensics report` command with `--max-chars 0`"
    if view.single and not view.redacted:
        rerun = f"run `forensics report --incident {view.incidents[0].id} --max-chars 0`"
    return f"{what} to fit {limit:,} characters. For everything, {rerun} (or use `--format html`)."


def _priority(row: TimelineRow | KeyLine) -> int:
    if row.is_root:
        return 0
    if row.role == "cause" or (isinstance(row, TimelineRow) and row.is_cause):
        return 1
    return 2 if row.role == "symptom" else 3


def _keep(rows: Sequence[T], n: int) -> tuple[tuple[T, ...], int]:
    """The `n` most important rows, in their original order, and how many were left out."""
    if n >= len(rows):
        return tuple(rows), 0
    ranked = sorted(range(len(rows)), key=lambda i: (_priority(rows[i]), i))[:max(0, n)]
    keep = set(ranked)
    return tuple(r for i, r in enumerate(rows) if i in keep), len(rows) - len(keep)


def _limit(view: ReportView, excerpts: int, rows: int | None, limit: int) -> ReportView:
    incidents: list[IncidentView] = []
    left = excerpts
    for iv in view.incidents:
        n = max(0, min(left, len(iv.excerpts)))
        left -= n
        iv = replace(iv, excerpts=iv.excerpts[:n])
        if rows is not None:
            timeline, t_out = _keep(iv.timeline, rows)
            keys, k_out = _keep(iv.key_lines, rows)
            iv = replace(iv, timeline=timeline, timeline_omitted=t_out, key_lines=keys, key_lines_omitted=k_out)
        incidents.append(iv)
    return replace(view, incidents=tuple(incidents), trim_note=trim_note(view, limit))


# a render that may stop early: (the text, True), or (its start, longer than the cap it was given, False)
Render = Callable[[ReportView, int], tuple[str, bool]]


def _largest(lo: int, hi: int, render: Callable[[int], tuple[str, bool]], limit: int,
             hi_len: int | None = None) -> str | None:
    """The output for the largest n in [lo, hi] whose output fits in `limit` (its length grows with n), or
    None. `render(n)` may stop early, past the limit: (the start of its output, False). The same n bisection
    finds, in fewer renders: each guess interpolates the lengths at the ends of the bracket (`hi_len`, an
    estimate of the length past `hi`, is only used to guess; a stopped render's length is a lower bound), every
    other guess halves the bracket, so it takes at most twice bisection's renders, and about three when the
    length grows evenly with n."""
    if lo > hi:
        return None
    texts: dict[int, str] = {}

    def length(n: int) -> int:
        text, whole = render(n)
        if not whole:
            return max(len(text), limit + 1)
        if len(text) <= limit:
            texts[n] = text
        return len(text)

    good_len = length(lo)
    if good_len > limit:
        return None
    good, bad, bad_len = lo, hi + 1, hi_len
    interpolate = True
    while bad - good > 1:
        mid = (good + bad) // 2
        if interpolate and bad_len is not None and bad_len > good_len:
            step = (limit - good_len) * (bad - good) / (bad_len - good_len)
            mid = min(max(good + int(step), good + 1), bad - 1)
        interpolate = not interpolate
        n_len = length(mid)
        if n_len <= limit:
            good, good_len = mid, n_len
        else:
            bad, bad_len = mid, n_len
    return texts[good]


def _close_fences(text: str) -> str:
    fence: str | None = None
    for line in text.split("\n"):
        stripped = line.strip()
        if fence is None and stripped.startswith("```"):
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
        elif fence is not None and stripped == fence:
            fence = None
    return text if fence is None else text + fence + "\n"


def _hard_cut(text: str, limit: int, note: str) -> str:
    tail = f"\n**{note}**\n"
    budget = limit - len(tail)
    while budget > 0:
        cut = text[:budget]
        cut = cut[: cut.rfind("\n") + 1]
        result = _close_fences(cut) + tail
        if len(result) <= limit:
            return result
        budget -= max(1, len(result) - limit)
    return tail.lstrip("\n")[:limit]


def fit(view: ReportView, render: Render, limit: int) -> str:
    """The whole report if it fits in `limit` characters (0 = no limit), else the trimmed report. `render(view,
    cap)` may stop once the text is longer than `cap`: the reports tried while trimming are rendered to twice
    the limit at most, and the one cut at the limit only past it."""
    if limit <= 0:
        return render(view, sys.maxsize)[0]
    cap = 2 * limit
    full, whole = render(view, cap)
    if whole and len(full) <= limit:
        return full

    total = sum(len(iv.excerpts) for iv in view.incidents)
    no_excerpts: list[int] = []

    def with_excerpts(n: int) -> tuple[str, bool]:
        got = render(_limit(view, n, None, limit), cap)
        if n == 0:
            no_excerpts.append(len(got[0]))
        return got

    best = _largest(0, total - 1, with_excerpts, limit, len(full))
    if best is not None:
        return best
    most = max((max(len(iv.timeline), len(iv.key_lines)) for iv in view.incidents), default=0)
    bare: list[str] = []   # the report with no excerpt, row or key line, when rendered: what a hard cut cuts

    def with_rows(n: int) -> tuple[str, bool]:
        got = render(_limit(view, 0, n, limit), cap)
        if n == 0:
            bare.append(got[0])
        return got

    best = _largest(0, most - 1, with_rows, limit, no_excerpts[0] if no_excerpts else None)
    if best is not None:
        return best
    note = trim_note(view, limit, "Trimmed: the report is cut here and the rest left out")
    # that render, past the limit, starts as the one cut at the limit would (a stopped render is a start of the
    # whole): a many-incident day's report is cut without rendering it again
    text = bare[0] if bare and len(bare[0]) > limit else render(_limit(view, 0, 0, limit), limit)[0]
    return _hard_cut(text, limit, note)
