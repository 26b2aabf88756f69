"""The JSON report (`schema_version` 1; fields documented in report_templates/README.md)."""

from __future__ import annotations

import json
from typing import Any

from forensics.model import Incident, to_jsonable
from forensics.render.data import ReportData
from forensics.render.impact import unit_impacts
from forensics.render.timefmt import INFERRED, Clock, parse_ts
from forensics.render.view import IncidentView, ReportView

SCHEMA_VERSION = 1


def _iso(dt: Any) -> str | None:
    return None if dt is None else dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _sorted(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _sorted(obj[k]) for k in sorted(obj, key=str)}
    if isinstance(obj, list):
        return [_sorted(v) for v in obj]
    return obj


def _event(e: Any) -> dict[str, Any]:
    doc = to_jsonable(e)
    doc["fields"] = _sorted(doc["fields"])
    return doc


def _incident(inc: Incident, iv: IncidentView, clock: Clock) -> dict[str, Any]:
    root_rule = inc.root_cause.rule if inc.root_cause else None
    events = {e.id: e for e in inc.events}
    impact = []
    for ui in unit_impacts(inc):
        for o in ui.outages:
            impact.append({
                "unit": o.unit, "host": o.host, "down_at": _iso(o.down), "shown_by": o.down_title,
                "back_at": _iso(o.back), "down_seconds": o.seconds, "until_end_of_logs": o.back is None,
                "failed_restarts": o.failed_restarts,
            })
    timeline = []
    for r in iv.timeline:
        first = events[r.event_ids[0]]
        dt = parse_ts(first.ts)
        timeline.append({
            "ts": first.ts, "ts_local": None if dt is None else clock.local(dt).isoformat(timespec="microseconds"),
            "ts_source": first.ts_source, "inferred": first.ts_source in INFERRED,
            "host": first.host, "unit": first.unit, "kind": r.kind, "title": r.title, "role": r.role,
            "root_cause": r.is_root, "source": f"{r.path}:{r.line}" if r.line_end <= r.line else f"{r.path}:{r.line}-{r.line_end}",
            "path": r.path, "line": r.line, "line_end": r.line_end, "count": r.count, "event_ids": list(r.event_ids),
        })
    conclusions = []
    for c in inc.conclusions:
        doc = to_jsonable(c)
        doc["root_cause"] = inc.root_cause is not None and c == inc.root_cause
        conclusions.append(doc)
    return {
        "incident": {"id": inc.id, "start": inc.start, "end": inc.end, "hosts": list(inc.hosts),
                     "units": list(inc.units), "headline": inc.headline, "root_cause": root_rule,
                     "symptoms": list(inc.symptoms)},
        "impact": impact,
        "timeline": timeline,
        "events": [_event(e) for e in inc.events],
        "conclusions": conclusions,
        "configuration": [to_jsonable(c) for c in inc.configs],
        "environment": _sorted(dict(inc.environment)),
        "gaps": [to_jsonable(g) for g in inc.gaps],
        "sources": [to_jsonable(s) for s in inc.sources],
        "repeats": [to_jsonable(r) for r in inc.repeats],
        "background": [to_jsonable(b) for b in inc.background],
        "follows": to_jsonable(inc.follows) if inc.follows is not None else None,
        "followed_by": to_jsonable(inc.followed_by) if inc.followed_by is not None else None,
        "nodes": to_jsonable(inc.nodes) if inc.nodes is not None else None,
    }


def render_json(data: ReportData, view: ReportView) -> str:
    clock = Clock(view.tz)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "generator": {"tool": "forensics", "version": data.tool_version, "rulepacks": dict(data.rulepacks)},
        "generated_at": view.generated_at,
        "timezone": view.tz,
        "redacted": view.redacted,
        "incidents": [_incident(inc, iv, clock) for inc, iv in zip(data.incidents, view.incidents)],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n"
