"""`forensics incidents [SPEC] [--date YYYY-MM-DD] [--gap MIN] [--json]`: the incidents of the store.

Thin: find the incidents (forensics.incidents: only the hosts a SPEC can name are looked at, and the plain
listing builds no more than ids and root causes), print. Data on stdout, messages on stderr.
Exit codes: 0 incidents listed, 1 none matched, 2 could not run (store, rule or correlation errors).
"""

from __future__ import annotations

import sys

import click

from .incidents import DEFAULT_GAP_MINUTES, IncidentNotFound, find_incidents, incidents_json
from .model import Incident


def _line(inc: Incident) -> str:
    rc = inc.root_cause
    conf = rc.confidence.value if rc is not None else "-"
    when = (f"{inc.start[:19].replace('T', ' ')} .. {(inc.end or '')[11:19] or '-'}" if inc.start
            else "undated (no wall-clock time)")
    return f"{inc.id}\t{when}\t{','.join(inc.hosts)}\t{conf}\t{inc.headline}"


def register(group: click.Group) -> None:
    @group.command("incidents")
    @click.argument("spec", required=False)
    @click.option("--date", "date", help="Only incidents that start on this day (YYYY-MM-DD, UTC).")
    @click.option("--gap", "gap", type=click.FloatRange(min=0.1), default=DEFAULT_GAP_MINUTES, show_default=True,
                  help="Minutes without a significant event that end an incident.")
    @click.option("--json", "as_json", is_flag=True, help="JSON array of incidents (documented in the README).")
    @click.pass_context
    def incidents(ctx: click.Context, spec: str | None, date: str | None, gap: float, as_json: bool) -> None:
        """List incidents: significant events grouped per host, with their root cause.

        SPEC selects incidents by full id, unique id prefix, date (YYYY-MM-DD), or `undated` (those with no
        wall-clock time)."""
        from .configreview import KnowledgeError
        from .correlation_packs import CorrelationError
        from .rulepacks import RulePackError
        from .cli import existing_store
        from .store import StoreError

        if date is not None and not (len(date) == 10 and date[4] == "-" and date[7] == "-"):
            raise click.BadParameter(f"{date!r} is not a date; use YYYY-MM-DD, e.g. 2025-05-25", param_hint="--date")
        store = existing_store(ctx.obj["store"])
        try:
            # the listing needs only what ids take (no events, configuration or environment): skeletons
            found = find_incidents(store, [s for s in (spec, date) if s], gap, full=as_json)
        except (StoreError, CorrelationError, KnowledgeError, RulePackError) as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
        except IncidentNotFound as e:
            click.echo(f"error: {e}", err=True)
            if as_json:
                click.echo("[]")
            sys.exit(1)
        if as_json:
            click.echo(incidents_json(found))
        else:
            for inc in found:
                click.echo(_line(inc))
            if not found:
                click.echo("no incidents (no error, critical or cause event in the store)", err=True)
        sys.exit(0 if found else 1)
