"""The Markdown report: the view through `report.md.j2`, tidied (fence-aware)."""

from __future__ import annotations

import re

from jinja2 import Environment

from forensics.render.templates import render_template
from forensics.render.view import ReportView

_FENCE = re.compile(r"^(`{3,}|~{3,})")


_HEADING = re.compile(r"^#{1,6} ")


def tidy(text: str) -> str:
    """Outside fences: strip trailing blanks, put blank lines around headings, fences and tables, and
    collapse runs of blank lines. Inside fences nothing changes. Ends with one newline."""
    out: list[str] = []
    fence: str | None = None
    after_block = False           # the previous line ended a heading or a fence: a blank line must follow

    def blank() -> None:
        if out and out[-1] != "":
            out.append("")

    for line in text.split("\n"):
        if fence is not None:
            out.append(line)
            if line.rstrip() == fence:
                fence = None
                after_block = True
            continue
        line = line.rstrip()
        if line == "":
            blank()
            after_block = False
            continue
        m = _FENCE.match(line)
        starts_table = line.startswith("|") and not (out and out[-1].startswith("|"))
        if after_block or _HEADING.match(line) or m or starts_table:
            blank()
        out.append(line)
        after_block = bool(_HEADING.match(line))
        if m:
            fence = m.group(1)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def render_markdown(view: ReportView, env: Environment) -> str:
    return tidy(render_template(env, "report.md.j2", report=view))
