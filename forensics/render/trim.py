"""Fitting Markdown into a size limit (a GitHub comment holds 65,536 characters).

First the appendix's cited excerpts are dropped from the end, keeping as many as fit; only when
the report is still too long is it cut at a line boundary (closing an open fence).
Either way a note says what was left out and how to get everything (`--max-chars 0`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from forensics.render.view import ReportView


def trim_note(view: ReportView, shown: int, total: int, limit: int) -> str:
    rerun = "run the same `forensics report` command with `--max-chars 0`"
    if view.single and not view.redacted:
        rerun = f"run `forensics report --incident {view.incidents[0].id} --max-chars 0`"
    return (f"Trimmed to fit {limit:,} characters: the appendix shows {shown} of {total} cited excerpts. "
            f"For everything, {rerun} (or use `--format html`).")


def _limit_excerpts(view: ReportView, keep: int, limit: int) -> ReportView:
    total = sum(iv.excerpts_total for iv in view.incidents)
    incidents = []
    left = keep
    for iv in view.incidents:
        n = max(0, min(left, len(iv.excerpts)))
        left -= n
        incidents.append(replace(iv, excerpts=iv.excerpts[:n]))
    return replace(view, incidents=tuple(incidents), trim_note=trim_note(view, keep, total, limit))


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


def fit(view: ReportView, render: Callable[[ReportView], str], limit: int) -> str:
    """`render(view)` if it fits in `limit` characters (0 = no limit), else the trimmed report."""
    full = render(view)
    if limit <= 0 or len(full) <= limit:
        return full
    total = sum(len(iv.excerpts) for iv in view.incidents)
    lo, hi = 0, total - 1           # the largest number of excerpts that fits, by bisection
    best: str | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        text = render(_limit_excerpts(view, mid, limit))
        if len(text) <= limit:
            best, lo = text, mid + 1
        else:
            hi = mid - 1
    if best is not None:
        return best
    smallest = render(_limit_excerpts(view, 0, limit))
    note = (f"Trimmed to fit {limit:,} characters: the report is cut here and the appendix left out. "
            f"For everything, run the same `forensics report` command with `--max-chars 0` (or use `--format html`).")
    return _hard_cut(smallest, limit, note)
