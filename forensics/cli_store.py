"""`forensics store check [--repair]`: verify the store against its manifest, and repair it. `forensics store
remove SOURCE...`: take sources out of the store (by path, or by a prefix of their sha256).

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

    @store.command("remove")
    @click.argument("sources", nargs=-1, required=True)
    @click.pass_context
    def remove(ctx: click.Context, sources: tuple[str, ...]) -> None:
        """Take sources out of the store: each SOURCE is a path as `forensics sources` lists it (every version
        of it) or a prefix of a source's sha256 (at least 6 hex digits). Nothing is removed unless every SOURCE
        names a source."""
        from .cli import existing_store

        st = existing_store(ctx.obj["store"])
        entries = st.sources()
        ids: list[str] = []
        for s in sources:
            hits = pick_sources(entries, s)
            if isinstance(hits, str):
                click.echo(f"error: {hits}", err=True)
                sys.exit(2)
            ids += [e.source_id for e in hits]
        for e in st.remove(ids):  # (a source named twice is removed once)
            click.echo(f"removed   {e.path}: {e.records} records, {e.events} events (sha256 {e.sha256[:12]})",
                       err=True)


def pick_sources(entries: list, spec: str) -> list | str:  # SourceEntry list, or why none
    """The sources `spec` names: every version of a path, or the one source whose sha256 starts with it."""
    by_path = [e for e in entries if e.path == spec]
    if by_path:
        return by_path
    low = spec.lower()
    if len(low) >= 6 and all(c in "0123456789abcdef" for c in low):
        by_sha = [e for e in entries if e.sha256.startswith(low)]
        if len(by_sha) == 1:
            return by_sha
        if by_sha:
            return (f"{spec!r} is the start of the sha256 of {len(by_sha)} sources ("
                    + ", ".join(f"{e.path} {e.sha256[:12]}" for e in by_sha) + "); give more of it")
    return (f"no source {spec!r} in the store: give a path as `forensics sources` lists it, or at least 6 hex "
            f"digits of its sha256")
