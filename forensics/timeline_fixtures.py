"""Fixture timelines: small YAML files of events (`tests/fixtures/timelines/`), the regression samples each
correlation names in `fixtures:` (see tests/fixtures/timelines/README.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from .correlate import Finding, findings
from .correlation_packs import Correlation, CorrelationError, _Reader
from .coverage import Coverage, SourceSpan


@dataclass(frozen=True)
class TimelineFixture:
    path: str
    description: str
    events: pl.DataFrame
    coverage: Coverage | None          # from `sources:`; None = what the events show
    expect: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]   # correlation id -> expected attributes


_TL_KEYS = ("description", "host", "date", "sources", "events", "expect")
_TL_EVENT_KEYS = ("at", "kind", "host", "unit", "pid", "fields", "severity", "role", "rule", "title", "message",
                  "path", "line", "ts_source", "format")
_TL_SOURCE_KEYS = ("path", "format", "host", "log", "unit", "first", "last", "records", "untimed")
_TL_EXPECT_KEYS = ("confidence", "kind", "explains", "cause", "statement_contains", "unit")
_DEFAULT_SEVERITY = {"cause": "error", "symptom": "warning", "context": "info"}


def _fixture_time(value: Any, date: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    text = str(value).strip()
    if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?", text):
        text = f"{date} {text}"
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def load_timeline(path: Path | str) -> TimelineFixture:
    """A fixture timeline (see tests/fixtures/timelines/README.md). Raises CorrelationError with file:line."""
    from .rulemodel import KINDS

    p = Path(path)
    r = _Reader(str(p), p.read_text(encoding="utf-8"), KINDS)
    try:
        root = r.compose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise CorrelationError([(str(p), (mark.line + 1) if mark else 1, f"not valid YAML: {getattr(e, 'problem', e)}")])
    top = r.mapping(root, "a timeline", _TL_KEYS) if root is not None else None
    if top is None or "events" not in top or not isinstance(top["events"], yaml.SequenceNode):
        r.add(root if root is not None else 1, "a timeline needs `events:` (a list)")
        raise CorrelationError(r.errors)
    host = r.value(top["host"]) if "host" in top else "host1"
    date = str(r.value(top["date"])) if "date" in top else "2025-05-25"
    rows = []
    for i, en in enumerate(top["events"].value, start=1):
        m = r.mapping(en, f"event {i}", _TL_EVENT_KEYS)
        if m is None:
            continue
        v = {k: r.value(n) for k, n in m.items()}
        kind = v.get("kind")
        if kind not in KINDS:
            r.add(en, f"event {i}: unknown or missing kind {kind!r}")
            continue
        role = v.get("role") or KINDS[kind].value
        path_ = v.get("path") or "fixture.log"
        try:
            ts = _fixture_time(v.get("at"), date)
        except ValueError:
            r.add(en, f"event {i}: bad time {v.get('at')!r} (use HH:MM:SS or an ISO date-time)")
            continue
        fields = v.get("fields") or {}
        if not isinstance(fields, dict):
            r.add(en, f"event {i}: fields must be a mapping")
            continue
        unit = v.get("unit", fields.get("unit"))
        rows.append({
            "ts": ts, "ts_source": v.get("ts_source") or ("none" if ts is None else "exact"), "kind": kind,
            "rule": v.get("rule") or f"fixture.{kind}", "severity": v.get("severity") or _DEFAULT_SEVERITY[role],
            "role": role, "host": v.get("host", host), "unit": unit, "pid": v.get("pid"),
            "title": v.get("title") or kind, "fields": json.dumps(fields, sort_keys=True),
            "message": v.get("message") or v.get("title") or kind, "source_id": "fx" + _short(path_),
            "path": path_, "line": int(v.get("line") or en.start_mark.line + 1),
            "line_end": int(v.get("line") or en.start_mark.line + 1), "format": v.get("format") or "fixture"})
    coverage = None
    if "sources" in top:
        spans = []
        for sn in top["sources"].value if isinstance(top["sources"], yaml.SequenceNode) else []:
            m = r.mapping(sn, "a source", _TL_SOURCE_KEYS)
            if m is None:
                continue
            v = {k: r.value(n) for k, n in m.items()}
            if v.get("log") not in ("kernel", "systemd", "service"):
                r.add(sn, "a source needs `log:` kernel, systemd or service")
                continue
            spans.append(SourceSpan(path=v.get("path") or "fixture.log", format=v.get("format") or "fixture",
                                    host=v.get("host", host), log=v["log"], unit=v.get("unit"),
                                    first=_fixture_time(v.get("first"), date), last=_fixture_time(v.get("last"), date),
                                    records=int(v.get("records") or 1), untimed=int(v.get("untimed") or 0)))
        coverage = Coverage(spans)
    expect = []
    if "expect" in top:
        for cid, en in (r.mapping(top["expect"], "expect") or {}).items():
            m = r.mapping(en, f"expect.{cid}", _TL_EXPECT_KEYS)
            if m is not None:
                expect.append((cid, tuple((k, r.value(n)) for k, n in m.items())))
    if r.errors:
        raise CorrelationError(r.errors)
    from .schema import EVENT_SCHEMA

    df = pl.DataFrame(rows, schema=EVENT_SCHEMA) if rows else pl.DataFrame(schema=EVENT_SCHEMA)
    desc = " ".join(str(r.value(top["description"])).split()) if "description" in top else ""
    return TimelineFixture(path=str(p), description=desc, events=df, coverage=coverage, expect=tuple(expect))


def _short(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:14]


def check_fixture(fx: TimelineFixture, correlations: Sequence[Correlation], knowledge: Any = None) -> list[Finding]:
    """The findings of all `correlations` over one fixture timeline."""
    return findings(fx.events, correlations, fx.coverage, knowledge)


def fired(found: Sequence[Finding], correlation_id: str) -> list[Finding]:
    """The findings a correlation contributed to (as the winner or merged into another)."""
    return [f for f in found if correlation_id in f.rules]
