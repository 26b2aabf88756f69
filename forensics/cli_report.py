"""`forensics report`: the incident report as Markdown (default), HTML or JSON.

Exit codes: 0 written; 1 the incident spec matches nothing (or redaction could not be made
complete, so nothing was written); 2 bad usage (unknown zone, unreadable redaction map,
a broken user template, ...).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from forensics.outfile import write_text
from forensics.render.sandbox import SECONDS as TEMPLATE_SECONDS
from forensics.sourcefile import read_source_file


def _rulepack_versions(store: Any) -> dict[str, str]:
    found = getattr(store, "rulepack_versions", None)
    if callable(found):
        found = found()
    if isinstance(found, Mapping):
        return {str(k): str(v) for k, v in found.items()}
    return {}


def _generated_at(value: str | None) -> str | None:
    if value is None:
        return None
    if value == "now":
        return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as e:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time; give e.g. 2025-05-26T09:00:00Z or 'now'",
                                 param_hint="--generated-at") from e
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write(text: str, output: Path | None) -> None:
    if output is None:
        click.echo(text, nl=False)
        return
    write_text(output, text)


@click.command("report")
@click.option("--incident", "spec", required=True, metavar="ID|PREFIX|DATE",
              help="The incident: its id, a unique prefix of it, a date (YYYY-MM-DD) for every incident that day, "
                   "or `undated` for every incident with no wall-clock time.")
@click.option("--format", "fmt", type=click.Choice(["md", "html", "json"]), default="md", show_default=True,
              help="Markdown (GitHub/GitLab/Jira), one self-contained HTML file, or JSON (schema_version 1).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to FILE instead of standard output.")
@click.option("--redact", is_flag=True,
              help="Replace host names, user names, IP/MAC/e-mail addresses and secrets by pseudonyms (host-1, ip-1...).")
@click.option("--redact-map", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Read pseudonyms from FILE if it exists and save the mapping back (implies --redact). "
                   "The file holds the original values: keep it private.")
@click.option("--max-chars", type=click.IntRange(min=0), default=65_536, show_default=True,
              help="Markdown only: trim the appendix to fit N characters (a GitHub comment holds 65,536); 0 = no limit.")
@click.option("--template", "template_dir", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="A directory of Jinja templates overriding report.md.j2 / report.html.j2 / partials "
                   "(run in a sandbox).")
@click.option("--template-seconds", type=click.FloatRange(min=0, min_open=True), default=TEMPLATE_SECONDS,
              show_default=True, metavar="SECONDS",
              help="Time the --template templates may take to render, in all; past it, exit 2.")
@click.option("--tz", "tz", default="UTC", show_default=True, metavar="ZONE",
              help="IANA time zone shown beside UTC, e.g. Europe/Berlin.")
@click.option("--generated-at", "generated_at", default=None, metavar="TIME|now",
              help="Print this generation time in the report (omitted by default, so reports are reproducible).")
@click.pass_context
def report(ctx: click.Context, spec: str, fmt: str, output: Path | None, redact: bool, redact_map: Path | None,
           max_chars: int, template_dir: Path | None, template_seconds: float, tz: str,
           generated_at: str | None) -> None:
    """Write the incident report: summary, impact, timeline, analysis, configuration, gaps, actions."""
    from forensics import __version__
    from forensics.redact import RedactionError
    from forensics.render import ReportOptions, render_report

    from forensics.cli import zone

    zone(tz)
    stamp = _generated_at(generated_at)

    from forensics.cli import existing_store
    from forensics.correlate import resolve_incidents

    store = existing_store((ctx.obj or {}).get("store") if isinstance(ctx.obj, dict) else None)
    try:
        incidents = resolve_incidents(store, spec)
    except LookupError as e:
        click.echo(f"forensics report: {e.args[0] if e.args else e}", err=True)
        ctx.exit(1)
    if not incidents:
        click.echo(f"forensics report: no incident matches {spec!r}. "
                   "List the incidents in this store with `forensics incidents`.", err=True)
        ctx.exit(1)

    options = ReportOptions(
        tz=tz, max_chars=max_chars, template_dir=template_dir, template_seconds=template_seconds,
        redact=redact or redact_map is not None,
        redact_map=redact_map, generated_at=stamp, tool_version=__version__,
        rulepack_versions=_rulepack_versions(store),
        source_reader=functools.partial(read_source_file, cache=store.cache_dir / "files"))
    try:
        text = render_report(incidents, fmt, options)  # type: ignore[arg-type]
    except RedactionError as e:
        click.echo(f"forensics report: {e}", err=True)
        ctx.exit(1)
    except ValueError as e:
        if redact_map is not None and str(redact_map) in str(e):
            raise click.BadParameter(str(e), param_hint="--redact-map") from e
        raise
    except Exception as e:  # jinja2 errors from a user template
        import jinja2
        from jinja2.exceptions import SecurityError

        if template_dir is not None and isinstance(e, (jinja2.TemplateError, SecurityError)):
            where = f"{getattr(e, 'filename', '') or ''}:{getattr(e, 'lineno', '') or ''}".strip(":")
            raise click.UsageError(f"template error{' in ' + where if where else ''}: {e}") from e
        raise
    _write(text, output)


def register(group: click.Group) -> None:
    """Add `report` to the main command group."""
    group.add_command(report)
