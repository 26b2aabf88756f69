"""The Markdown report: the view through `report.md.j2`, tidied (fence-aware)."""

from __future__ import annotations

import re

from jinja2 import Environment

from forensics.render.sandbox import BoundedSandbox
from forensics.render.templates import render_template
from forensics.render.view import ReportView

_FENCE = re.compile(r"^(`{3,}|~{3,})")


_HEADING = re.compile(r"^#{1,6} ")


class _Tidy:
    """`tidy` a line at a time: the lines out so far are a prefix of those of the whole text (nothing written is
    changed later, but trailing blank lines, dropped at the end), so `at_least` bounds the final length from
    below whatever lines follow."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.fence: str | None = None
        self.after_block = False      # the previous line ended a heading or a fence: a blank line must follow
        self.size = 0                 # len("\n".join(out) + "\n")
        self.blanks = 0               # blank lines at the end of out

    def _put(self, line: str) -> None:
        self.out.append(line)
        self.size += len(line) + 1
        self.blanks = self.blanks + 1 if line == "" else 0

    def _blank(self) -> None:
        if self.out and self.out[-1] != "":
            self._put("")

    def feed(self, line: str) -> None:
        if self.fence is not None:
            self._put(line)
            if line.rstrip() == self.fence:
                self.fence = None
                self.after_block = True
            return
        line = line.rstrip()
        if line == "":
            self._blank()
            self.after_block = False
            return
        m = _FENCE.match(line)
        starts_table = line.startswith("|") and not (self.out and self.out[-1].startswith("|"))
        if self.after_block or _HEADING.match(line) or m or starts_table:
            self._blank()
        self._put(line)
        self.after_block = bool(_HEADING.match(line))
        if m:
            self.fence = m.group(1)

    @property
    def at_least(self) -> int:
        """The length the tidied text will have at least (its trailing blank lines may yet be dropped)."""
        return max(self.size - self.blanks, 1)

    def text(self) -> str:
        out = self.out
        while out and out[-1] == "":
            out.pop()
        return "\n".join(out) + "\n"


def tidy(text: str) -> str:
    """Outside fences: strip trailing blanks, put blank lines around headings, fences and tables, and
    collapse runs of blank lines. Inside fences nothing changes. Ends with one newline."""
    t = _Tidy()
    for line in text.split("\n"):
        t.feed(line)
    return t.text()


def render_markdown(view: ReportView, env: Environment) -> str:
    return tidy(render_template(env, "report.md.j2", report=view))


def render_markdown_upto(view: ReportView, env: Environment, cap: int) -> tuple[str, bool]:
    """(`render_markdown(view, env)`, True); or, once the tidied text is known to be longer than `cap`, (its
    start, more than `cap` characters of it, False): the template is stopped there (a report trimmed to a GitHub
    comment need not be rendered whole each time it is tried). User templates are rendered whole, within their
    limits."""
    if isinstance(env, BoundedSandbox):
        return render_markdown(view, env), True
    t = _Tidy()
    head: list[str] = []            # the start of a line whose end has not come yet
    chunks = env.get_template("report.md.j2").generate(report=view)
    for chunk in chunks:
        if "\n" not in chunk:
            head.append(chunk)
            continue
        lines = chunk.split("\n")
        t.feed("".join(head) + lines[0])
        for line in lines[1:-1]:
            t.feed(line)
        head = [lines[-1]]
        if t.at_least > cap:
            chunks.close()
            return t.text(), False  # what was fed, tidied: the whole text starts with it
    t.feed("".join(head))
    return t.text(), True
