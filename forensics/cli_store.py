"""`forensics store check [--repair]`: verify the store against its manifest, and repair it.

Exit codes: 0 the store is clean (after `--repair`: clean now, the repairs listed); 1 problems found (after
`--repair`: problems it could not fix remain); 2 could not run (no store, a store of a newer forensics).
Findings go to stdout (one line each, or `--json`), the verdict to stderr.
"""

from __future__ import annotations

import json
import sys

import click


def register(group: click.Group) -> None:
    @group.group("store")
    def store() -> None:
        """Store maintenance: check the files against the manifest, repair, migrate."""

    @store.command("check")
    @click.option("--repair", is_flag=True,
                  help="Migrate an old manifest, delete orphan files and leftovers of interrupted writes, and drop "
                       "broken sources from the manifest (re-ingest them; the commands are printed).")
    @click.option("--sources", "verify_sources", is_flag=True,
                  help="Also compare each logged file that still exists with the sha256 the store holds (notes only).")
    @click.option("--min-age", type=click.FloatRange(min=0), default=60.0, show_default=True, metavar="SECONDS",
                  help="Leave tmp/ leftovers younger than this (a running ingest may own them); 0 when none runs.")
    @click.option("--json", "as_json", is_flag=True, help="One JSON object: counts, problems, repairs, notes.")
    @click.pass_context
    def check(ctx: click.Context, repair: bool, verify_sources: bool, min_age: float, as_json: bool) -> None:
        """Verify every source's files (they decode; columns, row counts and source ids match the manifest),
        and find orphan files and leftovers in tmp/."""
        from .store import StoreError
        from .storecheck import check as run_check
        from .storecheck import remaining
        from .storecheck import repair as run_repair

        path = ctx.obj["store"]
        try:
            res = (run_repair if repair else run_check)(path, verify_sources=verify_sources, min_age=min_age)
        except StoreError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
        if as_json:
            click.echo(json.dumps(res.to_json(), indent=1, sort_keys=True))
        else:
            for p in res.problems:
                click.echo(p.line())
            for r in res.repaired:
                click.echo(f"repaired: {r}")
            for n in res.notes:
                click.echo(f"note: {n}")
        summary = f"{res.sources} source(s), {res.records} records, {res.events} events"
        if res.ok:
            click.echo(f"store {path} is clean: {summary}", err=True)
            sys.exit(0)
        if repair:
            left = remaining(res)
            if not left:
                click.echo(f"store {path} repaired ({len(res.problems)} problem(s) fixed); it now holds {summary}",
                           err=True)
                sys.exit(0)
            click.echo(f"store {path}: {len(left)} problem(s) remain after the repair (see above)", err=True)
            sys.exit(1)
        click.echo(f"store {path}: {len(res.problems)} problem(s) found (the intact part holds {summary}); "
                   f"run `forensics --store {path} store check --repair` to fix them", err=True)
        sys.exit(1)
