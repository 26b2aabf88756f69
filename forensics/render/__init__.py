"""Render incidents as a report: Markdown, self-contained HTML, or JSON.

    from forensics.render import ReportOptions, render_report
    text = render_report(incidents, "md", ReportOptions(tz="Europe/Berlin"))

The flow: gather (incidents + cited excerpts) -> redact (optional, the whole gathered value)
-> view (times, folding, impact) -> template (Markdown; HTML = Markdown through markdown-it-py
plus the SVG timeline) or JSON. Output is byte-identical for the same input and options.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from forensics.model import Incident
from forensics.redact import RedactionMap, Redactor
from forensics.render.data import ReportData, gather
from forensics.render.html import render_html
from forensics.render.jsondoc import SCHEMA_VERSION, render_json
from forensics.render.markdown import render_markdown_upto
from forensics.render.options import FORMATS, GITHUB_COMMENT_LIMIT, ReportOptions, SourceReader
from forensics.render.sandbox import Limits
from forensics.render.templates import html_env, markdown_env
from forensics.render.trim import fit
from forensics.render.view import build_view

__all__ = ["ReportOptions", "render_report", "FORMATS", "GITHUB_COMMENT_LIMIT", "SCHEMA_VERSION", "SourceReader"]


def _redact(data: ReportData, map_path: Path | None) -> tuple[ReportData, Redactor]:
    mapping = RedactionMap.load(map_path) if map_path is not None and map_path.exists() else None
    redactor = Redactor(mapping)
    redactor.learn(data)
    return redactor.apply(data), redactor


def render_report(incidents: Sequence[Incident], fmt: Literal["md", "html", "json"], options: ReportOptions) -> str:
    """The report of `incidents` (one document, a section per incident) in `fmt`.

    With `options.redact` (or a `redact_map`), every host name, user name, address, e-mail and
    secret is replaced by a pseudonym before rendering, the mapping is written to `redact_map`
    when given, and the output is checked: `forensics.redact.RedactionError` if anything survived.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")
    data = gather(incidents, options)
    redactor: Redactor | None = None
    if options.redact or options.redact_map is not None:
        data, redactor = _redact(data, options.redact_map)
    view = build_view(data, options, redacted=redactor is not None)
    user_dir = options.template_dir
    limits = Limits(seconds=options.template_seconds)     # user templates only: one budget for the report
    if fmt == "json":
        out = render_json(data, view)
    elif fmt == "html":
        out = render_html(view, markdown_env(user_dir, limits), html_env(user_dir, limits))
    else:
        env = markdown_env(user_dir, limits)
        out = fit(view, lambda v, cap: render_markdown_upto(v, env, cap), options.max_chars)
    if redactor is not None:
        redactor.check(out, fmt)
        if options.redact_map is not None:
            redactor.mapping.save(options.redact_map)
    return out
