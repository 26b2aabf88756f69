"""Everything a report shows, gathered before redaction: the incidents and the cited excerpts.

Redaction runs over this whole value, so text read from source files for context is redacted
exactly like the incidents themselves.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import PurePath

from forensics import journalfile
from forensics.ansi import strip_text
from forensics.formats.journal_json import field_text
from forensics.model import Evidence, Incident, SourceInfo
from forensics.render.options import ReportOptions, SourceReader


@dataclass(frozen=True)
class ExcerptLine:
    number: int
    text: str
    cited: bool


@dataclass(frozen=True)
class Excerpt:
    """Consecutive lines of one source around one or more cited records."""

    path: str
    first: int
    last: int
    lines: tuple[ExcerptLine, ...]
    notes: tuple[str, ...]      # `1041: the kill line`
    from_file: bool             # True: lines read from the (sha256-verified) source; False: record text only


@dataclass(frozen=True)
class ReportData:
    incidents: tuple[Incident, ...]
    excerpts: tuple[tuple[Excerpt, ...], ...]     # per incident, in source then line order
    tool_version: str
    rulepacks: tuple[tuple[str, str], ...]


def cited_evidence(incident: Incident) -> tuple[Evidence, ...]:
    """Every evidence line cited by the incident's conclusions and configurations, once each."""
    seen: dict[tuple[str, int, int], Evidence] = {}
    for c in incident.conclusions:
        for ev in (*c.evidence_for, *c.evidence_against):
            if ev.line > 0:
                seen.setdefault((ev.path, ev.line, ev.line_end), ev)
    for b in incident.background:
        for ev in b.evidence:
            if ev.line > 0:
                seen.setdefault((ev.path, ev.line, ev.line_end), ev)
    for cfg in incident.configs:
        if cfg.evidence.line > 0:
            seen.setdefault((cfg.evidence.path, cfg.evidence.line, cfg.evidence.line_end), cfg.evidence)
    order = {s.path: i for i, s in enumerate(incident.sources)}
    return tuple(sorted(seen.values(), key=lambda e: (order.get(e.path, len(order)), e.path, e.line, e.line_end)))


def _record_lines(ev: Evidence) -> list[ExcerptLine]:
    texts = ev.text.replace("\r\n", "\n").split("\n")
    return [ExcerptLine(ev.line + i, t, True) for i, t in enumerate(texts)]


def _note(ev: Evidence) -> str:
    where = f"{ev.line}" if ev.line_end <= ev.line else f"{ev.line}-{ev.line_end}"
    return f"{where}: {ev.note}" if ev.note else ""


JSON_FORMATS = frozenset({"journal-json"})   # one journal entry per line (`journalctl -o json`, a binary journal)
AS_SHORT = "each JSON entry shown as `journalctl -o short-iso-precise` prints it"


def as_short(line: str) -> str | None:
    """A `journalctl -o json` line as `-o short-iso-precise` prints its entry (`2025-05-25T20:17:18.000000+0000
    host ident[pid]: message`), or None when it is no journal entry."""
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
        us = int(obj["__REALTIME_TIMESTAMP"])
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(obj, dict) or "MESSAGE" not in obj:
        return None
    t = datetime.fromtimestamp(us // 1_000_000, timezone.utc)
    ident = field_text(obj.get("SYSLOG_IDENTIFIER") or obj.get("_COMM") or "unknown")
    pid = field_text(obj.get("SYSLOG_PID") or obj.get("_PID") or "")
    host = field_text(obj.get("_HOSTNAME") or "localhost")
    head = f"{t:%Y-%m-%dT%H:%M:%S}.{us % 1_000_000:06d}+0000 {host} {ident}{f'[{pid}]' if pid else ''}: "
    return head + field_text(obj["MESSAGE"]).rstrip("\n")


def _binary_note(path: str) -> str | None:
    """For a binary journal file, what its line numbers are."""
    try:
        with open(path, "rb") as fh:
            if not journalfile.is_journal(fh.read(len(journalfile.MAGIC))):
                return None
    except OSError:
        return None
    return (f"a binary journal file: line N is the N-th entry `{journalfile.command(PurePath(path).name)}` prints, "
            "shown as `journalctl -o short-iso-precise` prints it")


def build_excerpts(incident: Incident, context: int, reader: SourceReader | None) -> tuple[Excerpt, ...]:
    sources: dict[str, SourceInfo] = {s.path: s for s in incident.sources}
    cache: dict[str, Sequence[str] | None] = {}

    def lines_of(path: str) -> Sequence[str] | None:
        if path not in cache:
            src = sources.get(path)
            cache[path] = reader(src) if (reader is not None and src is not None) else None
        return cache[path]

    # group evidence into blocks: with the file, merge when the context windows touch
    blocks: list[list[Evidence]] = []
    for ev in cited_evidence(incident):
        gap = 2 * context + 1 if lines_of(ev.path) is not None else 1
        if blocks and blocks[-1][-1].path == ev.path and ev.line <= max(e.line_end for e in blocks[-1]) + gap:
            blocks[-1].append(ev)
        else:
            blocks.append([ev])

    out: list[Excerpt] = []
    for block in blocks:
        path = block[0].path
        first = min(e.line for e in block)
        last = max(max(e.line_end, e.line) for e in block)
        file_lines = lines_of(path)
        notes = tuple(n for n in (_note(e) for e in block) if n)
        if file_lines is not None and last <= len(file_lines):
            cited = {n for e in block for n in range(e.line, max(e.line_end, e.line) + 1)}
            lo, hi = max(1, first - context), min(len(file_lines), last + context)
            # as ingest read them: terminal colour codes out (a coloured dmesg's stamps)
            texts = [strip_text(file_lines[n - 1].rstrip("\r\n")) for n in range(lo, hi + 1)]
            src = sources.get(path)
            if src is not None and src.format in JSON_FORMATS:   # a JSON entry as the journal's own text shows it
                shown = [as_short(t) for t in texts]
                if any(x is not None for x in shown):
                    texts = [x if x is not None else t for x, t in zip(shown, texts)]
                    notes = (_binary_note(path) or AS_SHORT, *notes)
            lines = tuple(ExcerptLine(n, t, n in cited) for n, t in zip(range(lo, hi + 1), texts))
            out.append(Excerpt(path, lo, hi, lines, notes, True))
        else:
            merged: dict[int, ExcerptLine] = {}
            for e in block:
                for ln in _record_lines(e):
                    merged.setdefault(ln.number, ln)
            lines = tuple(merged[k] for k in sorted(merged))
            out.append(Excerpt(path, first, last, lines, notes, False))
    return tuple(out)


def gather(incidents: Sequence[Incident], options: ReportOptions) -> ReportData:
    return ReportData(
        incidents=tuple(incidents),
        excerpts=tuple(build_excerpts(i, max(0, options.context_lines), options.source_reader) for i in incidents),
        tool_version=options.tool_version,
        rulepacks=tuple(sorted((str(k), str(v)) for k, v in options.rulepack_versions.items())),
    )
