"""Command line. Thin: parse options, call the library, print. Data on stdout, everything else on stderr.

Exit codes: 0 all good, 1 some input failed (the rest landed) or nothing matched, 2 could not run.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from datetime import datetime, timezone

import click
import polars as pl
from dateutil import parser as dateparser

from . import __version__
from .formats import FORMATS, StructuredFormat
from .store import Store, StoreError


def parse_when(value: str | None, tz: str = "UTC", option: str | None = None) -> datetime | None:
    """`2025-05-25`, `2025-05-25 20:15`, ISO 8601 with or without zone -> aware UTC datetime (a stamp without
    a zone is in `tz`). The date must be whole: dateutil would fill a missing year, month or day from today
    (`May 25 20:17`, copied from a journal line, would mean this year's), a guess no log's time should rest on.
    `option` names the option in the error (click.BadParameter: exit 2)."""
    if not value:
        return None
    where = zone(tz)
    example = "use e.g. 2025-05-25 or '2025-05-25 20:15'"
    try:  # two defaults that differ in year, month and day: a part the value lacks differs between the two
        a, b = (dateparser.parse(value, default=d) for d in _PROBES)
    except (ValueError, OverflowError) as e:
        raise click.BadParameter(f"{value!r} is not a date/time; {example}", param_hint=option) from e
    missing = [name for name, x, y in (("year", a.year, b.year), ("month", a.month, b.month), ("day", a.day, b.day))
               if x != y]
    if missing:
        lacks = " or ".join([", ".join(missing[:-1]), missing[-1]] if len(missing) > 1 else missing)
        raise click.BadParameter(f"{value!r} has no {lacks}; give the whole date ({example})",
                                 param_hint=option)
    return (a if a.tzinfo is not None else a.replace(tzinfo=where)).astimezone(timezone.utc)


_PROBES = (datetime(2001, 1, 1), datetime(2002, 3, 2))  # months of 31 days: a day given alone always fits


def zone(tz: str):  # noqa: ANN202 - a zoneinfo.ZoneInfo
    """The IANA zone `tz` (click.BadParameter naming --tz when there is none of that name)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a directory of zones, such as `Europe`
        raise click.BadParameter(f"{tz!r} is not an IANA zone name (e.g. UTC, Europe/Berlin)", param_hint="--tz")


def parse_window(since: str | None, until: str | None, tz: str = "UTC") -> tuple[datetime | None, datetime | None]:
    """--since and --until as UTC datetimes; an empty window (until not after since) is a usage error (exit 2),
    not an empty answer. --tz is checked even when neither is given."""
    zone(tz)
    lo, hi = parse_when(since, tz, "--since"), parse_when(until, tz, "--until")
    if lo is not None and hi is not None and hi <= lo:
        raise click.UsageError(f"--until {hi:%Y-%m-%d %H:%M:%S} UTC is not after --since {lo:%Y-%m-%d %H:%M:%S} UTC: "
                               f"the window [since, until) is empty")
    return lo, hi


# commands that live in their own modules -> the module, imported only when its command is asked for (`timeline`
# need not load the report's templates, the rule packs' loader and the correlations)
LAZY_COMMANDS = {"rules": "cli_rules", "explain": "cli_rules", "events": "cli_rules", "incidents": "cli_incidents",
                 "report": "cli_report", "store": "cli_store"}


class _LazyGroup(click.Group):
    """A group whose LAZY_COMMANDS are registered by their module when first looked up (or listed in --help):
    registering adds all of a module's commands, so one missing from the group is one not yet imported."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *(n for n, m in LAZY_COMMANDS.items() if _available(m))})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = LAZY_COMMANDS.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            mod = _import_optional(module)
            if mod is not None:
                mod.register(self)
        return super().get_command(ctx, cmd_name)


def _import_optional(name: str):  # noqa: ANN202 - a module or None
    try:
        return importlib.import_module(f"forensics.{name}")
    except ImportError as e:
        if e.name and e.name.endswith(name):
            return None
        raise


def _available(name: str) -> bool:
    return importlib.util.find_spec(f"forensics.{name}") is not None


@click.group(cls=_LazyGroup)
@click.option("--store", "store_path", envvar="FORENSICS_STORE", default=".forensics", show_default=True,
              help="Store directory (env FORENSICS_STORE).")
@click.version_option(__version__, prog_name="forensics")
@click.pass_context
def main(ctx: click.Context, store_path: str) -> None:
    """forensics: read logs off a broken GPU host, find the incident, write the postmortem."""
    ctx.ensure_object(dict)
    ctx.obj["store"] = store_path


def get_store(ctx: click.Context) -> Store:
    return Store(ctx.obj["store"])


def existing_store(path: str | None) -> Store:
    """The store at `path` (None: the default), or exit 2 saying there is none: a mistyped `--store` must not
    read as a store without records (an empty timeline, no sources, no incident)."""
    store = Store(path) if path else Store()
    if not store.exists():
        click.echo(f"error: no store at {store.path}; ingest logs first: forensics --store {store.path} ingest PATH",
                   err=True)
        sys.exit(2)
    return store


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(sorted(FORMATS)), help="Force a format (default: detect).")
@click.option("--host", help="Host name for sources that print none (raw dmesg).")
@click.option("--year", type=int, help="Year of year-less stamps (the year of the last line).")
@click.option("--tz", default="UTC", show_default=True, help="IANA zone of stamps that print no zone.")
@click.option("--boot-time", help="Wall time of the boot (a dmesg's last), to anchor its monotonic seconds.")
@click.option("--force", is_flag=True, help="Read sources already in the store again (keeping the options they "
                                            "were read with, except those given).")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="Extra rule pack directory (repeatable; also FORENSICS_RULES).")
@click.option("--no-rules", is_flag=True, help="Store records only; extract events later with `forensics rescan`.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar, no summary lines.")
@click.pass_context
def ingest(ctx: click.Context, paths: tuple[str, ...], fmt: str | None, host: str | None, year: int | None,
           tz: str, boot_time: str | None, force: bool, rules_dirs: tuple[str, ...], no_rules: bool,
           quiet: bool) -> None:
    """Read log files (globs, directories, .gz/.bz2/.xz/.zst, `-` for stdin) into the store."""
    from .ingestoptions import READ_OPTIONS
    from .pipeline import IngestOptions, ingest as run

    zone(tz)
    opts = IngestOptions(fmt=fmt, host=host, year=year, tz=tz, boot_time=parse_when(boot_time, tz, "--boot-time"),
                         force=force, rules_dirs=rules_dirs, match=not no_rules,
                         given=tuple(key for key, name in READ_OPTIONS.items()  # what was asked for, even the default
                                     if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE))
    show = not quiet and sys.stderr.isatty()
    bars: list = []

    def progress(src):  # noqa: ANN001, ANN202
        size = src.real.stat().st_size if src.real else 0
        if not show or size < (64 << 20):
            return None
        bar = click.progressbar(length=size, label=src.display, file=sys.stderr)
        bar.__enter__()
        bars.append(bar)
        last = [0]

        def tick(done: int) -> None:
            bar.update(done - last[0])
            last[0] = done
        return tick

    from .rulepacks import RulePackError

    try:
        report = run(get_store(ctx), list(paths), opts, progress)
    except (StoreError, RulePackError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    for bar in bars:
        bar.__exit__(None, None, None)
    if not quiet:
        for s in report.skipped:
            click.echo(f"skipped   {s}", err=True)
    for err in report.errors:
        click.echo(f"error: {err}", err=True)
    for r in report.results:
        for w in r.warnings:
            click.echo(f"warning: {w}", err=True)
        if r.again and not quiet:
            click.echo(f"again     {r.path}: {r.again}", err=True)
        if r.status == "failed":
            click.echo(f"error: {r.error}", err=True)
        elif not quiet and r.entry and r.status == "unchanged" and r.entry.path != r.path:
            click.echo(f"unchanged {r.path}: the same bytes as {r.entry.path}, in the store already", err=True)
        elif not quiet and r.entry:
            e = r.entry
            span = f"{e.first_ts or '-'} .. {e.last_ts or '-'}"
            slow = (f" ({len(r.timeouts)} rule(s) timed out: {', '.join(t.rule for t in r.timeouts)})"
                    if r.timeouts else "")
            click.echo(f"{r.status:9} {e.path}: {e.format} ({e.confidence:.0%}), {e.records} records, "
                       f"{e.unparsed} unparsed, {e.events} events{slow}, {span}; time: {e.time_anchor}", err=True)
        for t in r.timeouts:   # even with --quiet: the user's pattern is the problem and events are missing
            click.echo(f"warning: {t.describe()}", err=True)
    for z in report.zones:   # a warning even with --quiet: the times of the source may be hours off
        if z.warning or not quiet:
            click.echo(f"{'warning:' if z.warning else 'zone     '} {z.path}: {z.said}", err=True)
    if not quiet:
        for a in report.anchors:
            click.echo(f"anchored  {a.boot_id}: {a.how}", err=True)
    sys.exit(1 if report.failed else 0)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
@click.pass_context
def sources(ctx: click.Context, as_json: bool) -> None:
    """List the sources in the store."""
    from dataclasses import asdict

    entries = existing_store(ctx.obj["store"]).sources()
    if as_json:
        click.echo(json.dumps([asdict(e) for e in entries], indent=1, sort_keys=True))
        return
    for e in entries:
        click.echo(f"{e.path}\t{e.format}\t{e.records} records\t{e.unparsed} unparsed\t"
                   f"{e.first_ts or '-'} .. {e.last_ts or '-'}\tsha256 {e.sha256[:12]}\t{e.time_anchor}")


@main.command()
@click.option("--since", help="Start (e.g. 2025-05-25 or '2025-05-25 20:15'; zone --tz).")
@click.option("--until", help="End (exclusive).")
@click.option("--host", help="Only this host (a name or a glob: gpu-a0*; '*' is every line); a line that names no host "
                            "counts as the host's where the report takes it to be (a store of one host, or a file "
                            "naming it elsewhere).")
@click.option("--unit", help="Only this unit (a name or a glob; sglang-k26 is sglang-k26.service), as `journalctl -u` "
                            "shows it: with its own output, the lines of a `journalctl -u` journal of it and of a "
                            "file named after it (sglang-k26.log), which name no unit.")
@click.option("--grep", "pattern", help="Only records whose message matches this regex.")
@click.option("--tz", default="UTC", show_default=True, help="Zone for --since/--until given without one.")
@click.option("--json", "as_json", is_flag=True, help="JSON array output (same as --format json).")
@click.option("--format", "out_format", type=click.Choice(["table", "json", "jsonl", "csv", "timesketch"]),
              default="table", show_default=True)
@click.pass_context
def timeline(ctx: click.Context, since: str | None, until: str | None, host: str | None, unit: str | None,
             pattern: str | None, tz: str, as_json: bool, out_format: str) -> None:
    """The merged chronological view of every source, with path:line on every row."""
    from .export import RECORD_FIELDS, TABLE_FIELDS, with_plain
    from .query import timeline_stream

    if pattern is not None:
        try:
            pl.Series([""]).str.contains(pattern)
        except Exception as e:  # polars' regex engine: no look-around, no back-references
            raise click.BadParameter(f"{pattern!r} is not a regular expression polars can run ({e}); "
                                     f"look-around and back-references are not supported", param_hint="--grep")
    fmt = "json" if as_json else out_format
    lo, hi = parse_window(since, until, tz)
    columns = TABLE_FIELDS if fmt == "table" else RECORD_FIELDS  # only what is written is read
    tl = timeline_stream(existing_store(ctx.obj["store"]), lo, hi, host, unit, pattern, columns,
                         prepare=with_plain if fmt == "table" else None)  # the table's check, where a window is read
    if not _write_stream(tl, fmt):  # as `events` and grep: an empty answer is exit 1, said on stderr
        click.echo("no records matched" + ("" if since or until or host or unit or pattern else
                                           " (the store holds no records)"), err=True)
        sys.exit(1)


def _write_stream(tl, fmt: str) -> int:  # noqa: ANN001 - a query.TimelineStream
    """A timeline a window at a time (the same text as `export.write_rows` of the whole of it); returns how
    many rows were written (Timesketch's rows without a time are not)."""
    from .export import odd_names, table_widths, write_record_stream, write_record_table, write_rows

    if fmt == "table":
        _, host_len, ident_len = tl.widths()
        names = tl.names()  # checked once for every window, not window by window
        return write_record_table(tl.frames, sys.stdout, table_widths(host_len, ident_len),
                                  None if names is None else odd_names(names))
    if fmt == "timesketch":  # JSON lines made row by row: each window's rows follow the last's
        return sum(write_rows(df, fmt, sys.stdout, "records").rows for df in tl.frames)
    return write_record_stream(tl.frames, fmt, sys.stdout)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
def formats(as_json: bool) -> None:
    """List the formats forensics reads, with a sample line each."""
    rows = []
    for f in FORMATS.values():
        sample = f.sample_path
        rows.append({"name": f.name, "description": f.description, "example": f.example,
                     "sample": str(sample.relative_to(sample.parents[2])) if sample.exists() else None,
                     "structured": isinstance(f, StructuredFormat)})
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    for r in rows:
        click.echo(f"{r['name']:26} {r['description']}")
        click.echo(f"{'':26} e.g. {r['example'].splitlines()[0][:110]}")


@main.command()
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False))
@click.pass_context
def rescan(ctx: click.Context, rules_dirs: tuple[str, ...]) -> None:
    """Re-apply the rule packs to the stored records (after a pack changed), without re-reading files."""
    from .pipeline import IngestOptions, rescan as run

    from .rulepacks import RulePackError

    slow: list[str] = []

    def warn(t) -> None:  # noqa: ANN001 - a forensics.regexbudget.RuleTimeout
        slow.append(t.rule)
        click.echo(f"warning: {t.describe()}", err=True)

    try:
        n = run(existing_store(ctx.obj["store"]), IngestOptions(rules_dirs=rules_dirs), on_timeout=warn)
    except RulePackError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    rules_slow = sorted(set(slow))
    click.echo(f"rescanned: {n} events" + (f" ({len(rules_slow)} rule(s) timed out: {', '.join(rules_slow)})"
                                           if rules_slow else ""), err=True)


def run() -> None:
    """The `forensics` console command: `main` in a process of its own, its garbage collector tuned for one run
    (forensics.gcpolicy; tests that call `main` in their own process keep theirs)."""
    from .gcpolicy import for_command

    for_command()
    main()


if __name__ == "__main__":
    run()
