"""Commands over rule packs and events: `rules list|show|test|check`, `explain`, `events`.

Thin: each command calls `forensics.rulepacks` / `forensics.match` and prints. Data on stdout, everything
else on stderr. Exit codes: 0 all good, 1 findings (a failing example, a lint error, no rule matched the
line given to `explain`, no events), 2 could not run (bad rule packs, unreadable input).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click
import polars as pl

from .model import line_span
from .query import name_filter
from .rulemodel import KINDS, Rule, RuleSet, Severity
from .rulepacks import RulePackError, load_pack, load_rules, ruleset_of

SEVERITY_ORDER = [s.value for s in Severity]        # critical first


def register(group: click.Group) -> None:
    """Add `rules`, `explain` and `events` to the main command group."""
    group.add_command(rules)
    group.add_command(explain_cmd)
    group.add_command(events_cmd)


def rules_option(f: Callable) -> Callable:
    return click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
                        help="Extra rule pack directory, layered over the built-ins (repeatable; also "
                             "FORENSICS_RULES).")(f)


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="JSON output.")(f)


def _load(rules_dirs: Sequence[str]) -> RuleSet:
    try:
        return load_rules([Path(d) for d in rules_dirs], keep=True)
    except RulePackError as e:
        for p, n, m in e.errors:
            click.echo(f"{p}:{n}: {m}", err=True)
        click.echo(f"error: {len(e.errors)} problem(s) in the rule packs; fix them or leave out --rules", err=True)
        sys.exit(2)


def iso(ts: datetime | None) -> str | None:
    if ts is None:
        return None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=timezone.utc)
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rule_json(r: Rule, full: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": r.id, "kind": r.kind, "severity": r.severity.value, "role": r.role.value, "pack": r.pack,
        "source": f"{r.location}", "title": r.title, "engine": r.engine.value,
        "examples": len(r.examples), "near_misses": len(r.near_misses),
    }
    if full:
        d.update({
            "applies": {k: list(v) for k, v in r.applies.columns()}, "pattern": r.pattern,
            "literals": list(r.literals), "ignore_case": r.ignore_case, "exclude": r.exclude,
            "casts": dict(r.casts), "fields": list(r.field_names),
            "derive": [{"field": x.field, "from": list(x.sources), "lookup": x.lookup, "cast": x.cast,
                        "value": x.value} for x in r.derive],
            "context": [{"name": c.name, "pattern": c.pattern, "direction": c.direction.value, "lines": c.lines,
                         "seconds": c.seconds, "same": list(c.same)} for c in r.context],
            "explain": r.explain, "next_steps": list(r.next_steps), "references": list(r.references),
            "versions": list(r.versions),
            "examples": [{"line": e.text, "fields": dict(e.fields), "source": str(e.location)} for e in r.examples],
            "near_misses": [{"line": e.text, "note": e.note, "source": str(e.location)} for e in r.near_misses],
        })
    return d


# ----------------------------------------------------------------------------------------------------------
# forensics rules ...


@click.group()
def rules() -> None:
    """Rule packs: list, show, test their examples, lint pack files."""


@rules.command("list")
@rules_option
@json_option
@click.option("--kind", "kinds", multiple=True, help="Only rules of this kind (repeatable).")
@click.option("--pack", "packs", multiple=True, help="Only rules of this pack (repeatable).")
def rules_list(rules_dirs: tuple[str, ...], as_json: bool, kinds: tuple[str, ...], packs: tuple[str, ...]) -> None:
    """Every rule: id, kind, severity, role, pack and where it is defined."""
    rs = _load(rules_dirs)
    sel = [r for r in rs.rules if (not kinds or r.kind in kinds) and (not packs or r.pack in packs)]
    if as_json:
        click.echo(json.dumps([rule_json(r) for r in sel], indent=1))
        return
    w = max((len(r.id) for r in sel), default=10)
    k = max((len(r.kind) for r in sel), default=10)
    for r in sel:
        click.echo(f"{r.id:{w}}  {r.kind:{k}}  {r.severity.value:8}  {r.role.value:7}  {r.location}")


@rules.command("show")
@click.argument("rule_id")
@rules_option
@json_option
def rules_show(rule_id: str, rules_dirs: tuple[str, ...], as_json: bool) -> None:
    """One rule in full: pattern, fields, explanation, next steps, examples."""
    rs = _load(rules_dirs)
    r = rs.get(rule_id)
    if r is None:
        import difflib

        hint = difflib.get_close_matches(rule_id, [x.id for x in rs.rules], n=3)
        click.echo(f"error: no rule '{rule_id}'" + (f"; did you mean {', '.join(hint)}?" if hint else
                                                     "; see `forensics rules list`"), err=True)
        sys.exit(1)
    if as_json:
        click.echo(json.dumps(rule_json(r, full=True), indent=1))
        return
    d = rule_json(r, full=True)
    click.echo(f"{r.id}  ({r.kind}, {r.severity.value}, {r.role.value})  {r.location}")
    click.echo(f"title:    {r.title}")
    if d["applies"]:
        click.echo("applies:  " + "; ".join(f"{k} {', '.join(v)}" for k, v in d["applies"].items()))
    click.echo(f"pattern:  {r.pattern}")
    click.echo(f"engine:   {r.engine.value}; prefilter: {', '.join(map(repr, r.literals))}")
    if r.exclude:
        click.echo(f"exclude:  {r.exclude}")
    click.echo(f"fields:   {', '.join(r.field_names)}")
    for c in r.context:
        click.echo(f"context:  {c.name} ({c.direction.value}, {c.lines} lines"
                   + (f", {c.seconds:g} s" if c.seconds is not None else "") + f"): {c.pattern}")
    click.echo("")
    click.echo(r.explain)
    if r.next_steps:
        click.echo("\nnext steps:")
        for s in r.next_steps:
            click.echo(f"  {s}")
    for title, items in (("references", r.references), ("versions", r.versions)):
        if items:
            click.echo(f"\n{title}:")
            for s in items:
                click.echo(f"  {s}")
    click.echo("\nexamples:")
    for e in r.examples:
        click.echo(f"  + {e.text}".replace("\n", "\n    "))
    for e in r.near_misses:
        click.echo(f"  - {e.text}".replace("\n", "\n    ") + (f"   ({e.note})" if e.note else ""))


def _select_packs(rs: RuleSet, packs: Sequence[str]) -> tuple[RuleSet, list[str]]:
    """Rules of the named packs or pack files (all when none); unknown names are returned."""
    if not packs:
        return rs, []
    names, ids, unknown = set(), set(), []
    known = {p.name for p in rs.packs}
    for p in packs:
        if p in known:
            names.add(p)
            continue
        path = Path(p)
        if path.is_file():
            try:
                pack = load_pack(path, known_lookups=[t.name for t in rs.lookups])
            except RulePackError as e:
                for pp, n, m in e.errors:
                    click.echo(f"{pp}:{n}: {m}", err=True)
                sys.exit(2)
            ids.update(r.id for r in pack.rules)
            rs = _overlay(rs, pack.rules)
            continue
        unknown.append(p)
    return rs.select(packs=names, ids=ids), unknown


def _overlay(rs: RuleSet, extra: Sequence[Rule]) -> RuleSet:
    from dataclasses import replace

    ids = {r.id for r in extra}
    return replace(rs, rules=tuple(r for r in rs.rules if r.id not in ids) + tuple(extra))


@rules.command("test")
@click.argument("packs", nargs=-1)
@rules_option
@click.option("--quiet", "-q", is_flag=True, help="Print failures only.")
def rules_test(packs: tuple[str, ...], rules_dirs: tuple[str, ...], quiet: bool) -> None:
    """Run every example of the rules (of PACK... names or pack files): each matching example must yield
    its rule's event with the listed fields, each near miss must not. Exit 1 on any failure."""
    from .match import run_examples

    rs = _load(rules_dirs)
    sel, unknown = _select_packs(rs, packs)
    if unknown:
        click.echo(f"error: unknown pack(s) {', '.join(unknown)}; packs: "
                   f"{', '.join(sorted(p.name for p in rs.packs))}", err=True)
        sys.exit(2)
    results = run_examples(sel)
    bad = [r for r in results if not r.ok]
    for r in bad:
        click.echo(f"FAIL {r}")
    if not quiet:
        click.echo(f"{len(results)} examples of {len(sel.rules)} rules, {len(bad)} failed", err=True)
    sys.exit(1 if bad else 0)


@rules.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--no-examples", is_flag=True, help="Validate only; do not run the examples.")
def rules_check(files: tuple[str, ...], no_examples: bool) -> None:
    """Lint rule pack files: strict validation (every error with file:line), then their examples.
    Exit 0 clean, 1 problems found, 2 a file could not be read."""
    from .match import run_examples

    try:
        builtin: RuleSet | None = load_rules(env={})    # user packs may use the built-in lookup tables
    except RulePackError:
        builtin = None
    lookups = [t.name for t in builtin.lookups] if builtin else []
    problems = 0
    unreadable = False
    loaded = []
    for f in files:
        if not Path(f).is_file():
            click.echo(f"{f}:0: no such file", err=True)
            unreadable = True
            continue
        try:
            loaded.append(load_pack(f, known_lookups=lookups))
        except RulePackError as e:
            for p, n, m in e.errors:
                click.echo(f"{p}:{n}: {m}")
            problems += len(e.errors)
    if loaded and not no_examples:
        rs = ruleset_of(loaded)
        if builtin is not None:
            from dataclasses import replace

            names = {t.name for t in rs.lookups}
            rs = replace(rs, lookups=rs.lookups + tuple(t for t in builtin.lookups if t.name not in names))
        for r in run_examples(rs):
            if not r.ok:
                click.echo(f"{r}")
                problems += 1
    n_rules = sum(len(p.rules) for p in loaded)
    click.echo(f"{len(files)} file(s), {n_rules} rules, {problems} problem(s)", err=True)
    sys.exit(2 if unreadable else 1 if problems else 0)


# ----------------------------------------------------------------------------------------------------------
# forensics explain


def _parse(text: str, fmt: str | None, path: str) -> pl.DataFrame:
    from .parse import parse_text

    return parse_text(text, fmt=fmt, path=path)


@click.command("explain")
@click.argument("line", required=False)
@click.option("--file", "file_", type=click.Path(exists=True, dir_okay=False), help="Read the line from this file.")
@click.option("--line", "line_no", type=int, help="Line number in --file (1-based).")
@click.option("--format", "fmt", help="Force the log format (default: detect).")
@rules_option
@json_option
def explain_cmd(line: str | None, file_: str | None, line_no: int | None, fmt: str | None,
                rules_dirs: tuple[str, ...], as_json: bool) -> None:
    """Which rules match LINE (a full log line, or `-` for stdin) and what they extract; when none does, the
    nearest rule and the part of its pattern that failed. Exit 0 when a rule matched, 1 when none did."""
    from .explain import explain

    if (line is None) == (file_ is None):
        raise click.UsageError("give a LINE, or --file F --line N")
    if file_ is not None and line_no is None:
        raise click.UsageError("--file needs --line N")
    rs = _load(rules_dirs)
    if file_ is not None:
        from .sources import SourceError, read_text

        try:  # as ingest reads it: compressed, UTF-16
            text = read_text(file_)
        except SourceError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
        n_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if not 1 <= line_no <= max(n_lines, 1):
            click.echo(f"error: {file_} has {n_lines} lines; --line must be 1..{n_lines}", err=True)
            sys.exit(2)
        records, focus = _parse(text, fmt, file_), line_no
    else:
        text = sys.stdin.read() if line == "-" else line
        records, focus = _parse(text, fmt, "<line>"), None
    ex = explain(records, rs, focus_line=focus)
    if as_json:
        click.echo(json.dumps([{
            "line": r.record["line"], "line_end": r.record["line_end"], "format": r.record["format"],
            "ident": r.record["ident"], "message": r.record["message"], "verdict": r.verdict,
            "events": [event_json(e) | {"title": e["title"]} for e in r.events],
            "part_of": [{"rule": e["rule"], "kind": e["kind"], "line": e["line"], "line_end": e["line_end"]}
                        for e in r.covered_by],
            "near": [{"rule": n.rule, "kind": n.kind, "matched": n.matched, "missing": n.missing,
                      "edits": list(n.edits), "score": round(n.score, 3), "reason": n.reason, "text": n.describe()}
                     for n in r.near],
            "timed_out": list(r.timed_out), "not_applied": list(r.not_applied),
        } for r in ex.records], indent=1))
        sys.exit(0 if ex.matched else 1)
    for r in ex.records:
        rec = r.record
        span = f"{rec['line']}" + (f"-{rec['line_end']}" if rec["line_end"] != rec["line"] else "")
        who = ", ".join(x for x in (rec["format"], rec["ident"] and f"ident {rec['ident']}",
                                    rec["unit"] and f"unit {rec['unit']}") if x)
        click.echo(f"line {span} ({who}): {_short(rec['message'])}")
        for e in r.events:
            rule = rs.get(e["rule"])
            click.echo(f"  match: {e['rule']} -> {e['kind']} ({e['severity']}, {e['role']})")
            click.echo(f"    title:  {e['title']}")
            click.echo(f"    fields: {e['fields']}")
            if e["line_end"] != rec["line_end"] or e["line"] != rec["line"]:
                click.echo(f"    lines:  {e['line']}-{e['line_end']} (with context records)")
            if rule is not None:
                vals = json.loads(e["fields"]) | {"unit": e["unit"], "pid": e["pid"], "host": e["host"]}
                click.echo(f"    means:  {rule.render_explain(vals)}")
        for e in r.covered_by:
            click.echo(f"  part of: {e['rule']} -> {e['kind']} (lines {e['line']}-{e['line_end']})")
        for note in r.timeout_notes:
            click.echo(f"  {note}")
        if not r.events and not r.covered_by:
            if r.near:
                for n in r.near:
                    click.echo(f"  {n.describe()}")
            elif r.timed_out or r.not_applied:
                click.echo("  no other rule matched, and no other rule comes close")
            else:
                click.echo("  no rule matched, and no rule comes close")
    sys.exit(0 if ex.matched else 1)


def _short(s: str | None, n: int = 160) -> str:
    s = (s or "").replace("\n", "\\n")
    return s if len(s) <= n else s[:n - 3] + "..."


# ----------------------------------------------------------------------------------------------------------
# forensics events


def event_json(e: dict[str, Any]) -> dict[str, Any]:
    """The documented JSON of one event: the same keys as its row in `--format jsonl` (`ts_source` says whether
    its time was inferred, and how)."""
    try:
        fields = json.loads(e["fields"]) if e.get("fields") else {}
    except ValueError:
        fields = {}
    return {"ts": iso(e.get("ts")), "ts_source": e.get("ts_source"), "kind": e["kind"], "rule": e["rule"],
            "severity": e["severity"], "role": e["role"], "host": e.get("host"), "unit": e.get("unit"),
            "pid": e.get("pid"), "title": e.get("title"), "source": e.get("path"), "line": e.get("line"),
            "line_end": e.get("line_end"), "message": e.get("message"), "fields": fields}


def _open_store(ctx: click.Context):  # -> Store
    from .cli import existing_store

    obj = ctx.find_root().obj if ctx.find_root().obj else {}
    return existing_store(obj.get("store") if isinstance(obj, dict) else None)


def open_events(ctx: click.Context) -> pl.LazyFrame:
    """The store's events (EVENT_SCHEMA). Tests replace this function."""
    return _open_store(ctx).events()


def event_names(ctx: click.Context) -> tuple[pl.Expr, pl.Expr]:
    """The events' (host, unit) as `--host` and `--unit` read them (query.name_columns: an event of a line that
    names none is the host and unit the incidents take it to be). Tests replace this function."""
    from .query import name_columns

    return name_columns(_open_store(ctx), events=True)


def filter_events(lf: pl.LazyFrame, *, kinds: Sequence[str] = (), severity: str | None = None,
                  roles: Sequence[str] = (), units: Sequence[str] = (), hosts: Sequence[str] = (),
                  rules_: Sequence[str] = (), since: datetime | None = None,
                  until: datetime | None = None, unit_column: pl.Expr | None = None,
                  host_column: pl.Expr | None = None) -> pl.LazyFrame:
    """The events filter of `forensics events` (severity is a minimum: `error` keeps error and critical);
    `unit_column`, `host_column`: what `units` and `hosts` are tested against (the columns when not given)."""
    if kinds:
        lf = lf.filter(pl.col("kind").is_in(list(kinds)))
    if severity:
        keep = SEVERITY_ORDER[:SEVERITY_ORDER.index(severity) + 1]
        lf = lf.filter(pl.col("severity").is_in(keep))
    if roles:
        lf = lf.filter(pl.col("role").is_in(list(roles)))
    if rules_:
        lf = lf.filter(name_filter("rule", rules_))
    if units:
        lf = lf.filter(name_filter(pl.col("unit") if unit_column is None else unit_column, units, unit=True))
    if hosts:
        lf = lf.filter(name_filter(pl.col("host") if host_column is None else host_column, hosts, host=True))
    if since is not None:
        lf = lf.filter(pl.col("ts") >= since)
    if until is not None:
        lf = lf.filter(pl.col("ts") < until)
    return lf.sort(["ts", "path", "line", "rule"], nulls_last=True)


@click.command("events")
@click.option("--kind", "kinds", multiple=True, help="Only this kind (repeatable), e.g. oom_kill.")
@click.option("--severity", type=click.Choice(SEVERITY_ORDER), help="Minimum severity (error: error and critical).")
@click.option("--role", "roles", multiple=True, type=click.Choice(["cause", "symptom", "context"]),
              help="Only this role (repeatable).")
@click.option("--rule", "rule_ids", multiple=True, help="Only this rule id or glob (repeatable).")
@click.option("--unit", "units", multiple=True,
              help="Only this unit or glob (repeatable; sglang-k26 is sglang-k26.service). Lines that name no unit "
                   "count as the unit's where the report takes them to be: in a `journalctl -u` journal of it, or "
                   "in a file named after it (sglang-k26.log).")
@click.option("--host", "hosts", multiple=True,
              help="Only this host or glob (repeatable; '*' is every event). Lines that name no host count as the "
                   "host's where the report takes them to be: in a store of one host, or in a file that names it on "
                   "other lines.")
@click.option("--since", help="Start (e.g. 2025-05-25 or '2025-05-25 20:15'; zone --tz).")
@click.option("--until", help="End (exclusive).")
@click.option("--tz", default="UTC", show_default=True, help="Zone for --since/--until given without one.")
@click.option("--limit", type=int, help="At most N events.")
@json_option
@click.option("--format", "out_format", type=click.Choice(["csv", "jsonl", "timesketch"]),
              help="Export format instead of the listing (CSV, JSON lines, Timesketch JSON lines).")
@click.pass_context
def events_cmd(ctx: click.Context, kinds: tuple[str, ...], severity: str | None, roles: tuple[str, ...],
               rule_ids: tuple[str, ...], units: tuple[str, ...], hosts: tuple[str, ...], since: str | None,
               until: str | None, tz: str, limit: int | None, as_json: bool, out_format: str | None) -> None:
    """The events the rule packs extracted from the stored records, in time order, with path:line."""
    from .cli import parse_window

    since_t, until_t = parse_window(since, until, tz)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        click.echo(f"warning: unknown kind(s) {', '.join(unknown)}; see `forensics rules list`", err=True)
    listing = not (as_json or out_format)
    host_col, unit_col = event_names(ctx) if units or hosts or listing else (None, None)
    lf = filter_events(open_events(ctx), kinds=kinds, severity=severity, roles=roles, units=units, hosts=hosts,
                       rules_=rule_ids, since=since_t, until=until_t, unit_column=unit_col, host_column=host_col)
    if limit is not None:
        lf = lf.head(limit)
    if listing:  # the host and unit a line that names none is taken to be, shown with `~`
        lf = lf.with_columns(host_col.alias("_taken_host"), unit_col.alias("_taken_unit"))
    df = lf.collect()
    if out_format:
        from .export import write_rows

        write_rows(df, out_format, sys.stdout, "events")
        sys.exit(0 if df.height else 1)
    rows = list(df.iter_rows(named=True))
    if as_json:
        click.echo(json.dumps([event_json(e) for e in rows], indent=1, ensure_ascii=False))
    else:
        taken = taken_h = 0
        for e in rows:
            ts = iso(e["ts"]) or "-"
            where = f"{e['path']}:{line_span(e['line'], e['line_end'])}"
            host, unit = e["host"], e["unit"]
            if host is None and e.get("_taken_host"):
                host, taken_h = f"{e['_taken_host']}~", taken_h + 1
            if unit is None and e.get("_taken_unit"):
                unit, taken = f"{e['_taken_unit']}~", taken + 1
            who = " ".join(x for x in (host, unit) if x) or "-"
            click.echo(f"{ts}  {e['severity']:8} {e['role']:7} {e['kind']:27} {who}  {where}  {e['title']}")
        said = [f"host~: {taken_h} of their lines name no host, and are taken to be that host's (the store's "
                "only host, or the one their file names)"] if taken_h else []
        said += [f"unit~: {taken} of their lines name no unit, and are taken to be that unit's (its `journalctl -u` "
                 "journal, or a file named after it)"] if taken else []
        click.echo("; ".join([f"{len(rows)} event(s)", *said]), err=True)
    sys.exit(0 if rows else 1)
