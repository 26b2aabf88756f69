"""The HTML report: the Markdown report through markdown-it-py, the timeline pictures put in, one file.

markdown-it runs with raw HTML off and with links, images, autolinks and reference definitions
disabled, so nothing in the body can load or link anywhere; the page's Content-Security-Policy
(`default-src 'none'`) would block it anyway.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from typing import TYPE_CHECKING

from jinja2 import Environment
from markdown_it.common.utils import escapeHtml
from markupsafe import Markup

from forensics.render.markdown import render_markdown
from forensics.render.mdsafe import visible
from forensics.render.svg import timeline_svg
from forensics.render.templates import render_template
from forensics.render.timefmt import Clock
from forensics.render.view import ReportView

if TYPE_CHECKING:
    from markdown_it import MarkdownIt


# a list of lines in one code span (`journal.log:10137648, 10137751-10137769, ...`): one code span per item in HTML,
# so that a table cell wraps between them (a code span in a cell does not wrap, to keep a unit or a line whole)
_LINE_LIST = re.compile(r"[^\s,`]+:\d+(?:-\d+)?(?:, (?:[^\s,`]+:)?\d+(?:-\d+)?)*(?:, \.\.\.)?")


def _code_inline(self, tokens, idx, options, env) -> str:  # noqa: ANN001 - markdown-it's renderer rule signature
    text = tokens[idx].content
    if ", " in text and _LINE_LIST.fullmatch(text):
        return ", ".join(f"<code>{escapeHtml(x)}</code>" for x in text.split(", "))
    return f"<code{self.renderAttrs(tokens[idx])}>{escapeHtml(text)}</code>"


def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt    # only HTML reports need it (a tenth of a second to import)

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable("table")
    md.disable(["link", "image", "autolink", "html_inline", "html_block", "reference"])
    md.add_render_rule("code_inline", _code_inline)
    return md


def markdown_to_html(text: str) -> str:
    body = _parser().render(text)
    return body.replace("<table>", '<div class="table-wrap"><table>').replace("</table>", "</table></div>")


def render_html(view: ReportView, md_env: Environment, html_env: Environment) -> str:
    slot = "FORENSICS-TIMELINE-" + hashlib.sha256(repr(view).encode()).hexdigest()[:24]
    with_slot = replace(view, svg_slot=slot)
    body = markdown_to_html(render_markdown(with_slot, md_env))
    clock = Clock(view.tz)
    for iv in view.incidents:
        svg = timeline_svg(iv, clock)
        body = body.replace(f"<p>{slot}-{iv.index}</p>", f'<figure class="timeline">{svg}</figure>', 1)
    page = render_template(html_env, "report.html.j2", report=view, title=visible(view.title), body=Markup(body))
    return page if page.endswith("\n") else page + "\n"
