"""The timeline picture: events on a time axis, one lane per unit (or source), the root cause marked.

Plain SVG text with every string XML-escaped; no fonts, images or scripts from anywhere.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from html import escape

from forensics.render.mdsafe import visible
from forensics.render.timefmt import Clock, parse_ts, zone_abbrev
from forensics.render.view import IncidentView, TimelineRow

WIDTH = 960
LABEL_W = 220
RIGHT = 24
TOP = 64
LANE_H = 34
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
COLOURS = {"cause": "#c62828", "symptom": "#ef6c00", "context": "#78909c"}
STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
         172800, 604800)


def _e(text: object) -> str:
    return escape(visible(str(text)), quote=True)


def _short(text: str, n: int = 30) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _step(span: float) -> int:
    for s in STEPS:
        if span / s <= 8:
            return s
    return STEPS[-1]


def _tick_label(dt: datetime, step: int, span: float) -> str:
    if span > 86400:
        return f"{dt:%m-%d %H:%M}"
    return f"{dt:%H:%M:%S}" if step < 60 else f"{dt:%H:%M}"


def _marker(x: float, y: float, row: TimelineRow) -> str:
    role = "cause" if (row.is_cause or row.is_root or row.role == "cause") else row.role
    colour = COLOURS.get(role, COLOURS["context"])
    if row.is_root:
        return (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="11" fill="#ffffff" stroke="{colour}" stroke-width="2"/>'
                f'<path d="M{x:.1f} {y - 7:.1f} L{x + 7:.1f} {y:.1f} L{x:.1f} {y + 7:.1f} L{x - 7:.1f} {y:.1f} Z" '
                f'fill="{colour}"/>')
    if role == "cause":
        return (f'<path d="M{x:.1f} {y - 6:.1f} L{x + 6:.1f} {y:.1f} L{x:.1f} {y + 6:.1f} L{x - 6:.1f} {y:.1f} Z" '
                f'fill="{colour}"/>')
    if role == "symptom":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5.5" fill="{colour}"/>'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4.5" fill="#ffffff" stroke="{colour}" stroke-width="2"/>'


def timeline_svg(iv: IncidentView, clock: Clock) -> str:
    timed = [(parse_ts(r.time.iso), r) for r in iv.timeline if r.time.iso]
    points = [(t, r) for t, r in timed if t is not None]
    untimed = len(iv.timeline) - len(points)
    lanes: list[str] = []
    for _t, r in points:
        if r.lane not in lanes:
            lanes.append(r.lane)
    title_id = f"tl-title-{iv.index}"
    desc_id = f"tl-desc-{iv.index}"
    height = TOP + max(1, len(lanes)) * LANE_H + 58
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" viewBox="0 0 {WIDTH} {height}" '
           f'role="img" aria-labelledby="{title_id} {desc_id}" font-family="{_e(FONT)}" font-size="13">',
           f'<title id="{title_id}">Timeline of incident {_e(iv.id)}</title>',
           f'<desc id="{desc_id}">{len(points)} events in {len(lanes)} lanes'
           f'{f"; {untimed} events without a time are not drawn" if untimed else ""}.</desc>',
           f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>']
    if not points:
        out.append(f'<text x="{WIDTH / 2}" y="{height / 2}" text-anchor="middle" fill="#555">'
                   'No event of this incident has a time.</text></svg>')
        return "".join(out)

    t0 = min(t for t, _ in points)
    t1 = max(t for t, _ in points)
    span = max((t1 - t0).total_seconds(), 60.0)
    pad = span * 0.04
    lo = t0 - timedelta(seconds=pad)
    hi = lo + timedelta(seconds=span + 2 * pad)
    total = (hi - lo).total_seconds()
    plot_w = WIDTH - LABEL_W - RIGHT

    def x_of(t: datetime) -> float:
        return LABEL_W + (t - lo).total_seconds() / total * plot_w

    bottom = TOP + len(lanes) * LANE_H
    # lanes
    for i, lane in enumerate(lanes):
        y = TOP + i * LANE_H
        if i % 2 == 0:
            out.append(f'<rect x="0" y="{y}" width="{WIDTH}" height="{LANE_H}" fill="#f4f6f8"/>')
        out.append(f'<text x="8" y="{y + LANE_H / 2 + 4.5:.1f}" fill="#222"><title>{_e(lane)}</title>'
                   f'{_e(_short(lane))}</text>')
    # ticks
    step = _step(total)
    first = math.ceil(lo.timestamp() / step) * step
    tick = first
    zone_label = "" if clock.is_utc else zone_abbrev(clock.local(t0))
    while tick <= hi.timestamp():
        dt = datetime.fromtimestamp(tick, tz=timezone.utc)
        x = x_of(dt)
        out.append(f'<line x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{bottom}" stroke="#d0d5da" stroke-width="1"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP - 24}" text-anchor="middle" fill="#333">{_tick_label(dt, step, total)}</text>')
        if zone_label:
            out.append(f'<text x="{x:.1f}" y="{TOP - 10}" text-anchor="middle" fill="#777" font-size="11">'
                       f'{_tick_label(clock.local(dt), step, total)}</text>')
        tick += step
    out.append(f'<text x="8" y="{TOP - 24}" fill="#333" font-weight="bold">UTC</text>')
    if zone_label:
        out.append(f'<text x="8" y="{TOP - 10}" fill="#777" font-size="11">{_e(zone_label)}</text>')
    # events: context first, the root cause last (on top); markers that would overlap are spread vertically
    def rank(r: TimelineRow) -> int:
        return 3 if r.is_root else 2 if (r.is_cause or r.role == "cause") else 1 if r.role == "symptom" else 0

    placed: dict[str, list[float]] = {}
    spots: list[tuple[int, float, float, datetime, TimelineRow]] = []
    for t, r in sorted(points, key=lambda p: (-rank(p[1]), p[0])):     # the most important keeps the lane's centre
        x = x_of(t)
        near = sum(1 for px in placed.setdefault(r.lane, []) if abs(px - x) < 9)
        placed[r.lane].append(x)
        y = TOP + lanes.index(r.lane) * LANE_H + LANE_H / 2 + (0, -9, 9)[near % 3]
        spots.append((rank(r), x, y, t, r))
    root_label = ""
    for _rank, x, y, t, r in sorted(spots, key=lambda s: (s[0], s[3], s[1])):
        tip = f"{r.time.mark}{clock.both(t)} · {r.source} · {r.title}" + (f" (x{r.count})" if r.count > 1 else "")
        out.append(f'<g><title>{_e(tip)}</title>{_marker(x, y, r)}</g>')
        if r.is_root and not root_label:
            anchor = "end" if x > WIDTH - 140 else "start"
            dx = -14 if anchor == "end" else 14
            root_label = (f'<text x="{x + dx:.1f}" y="{y - 8:.1f}" text-anchor="{anchor}" fill="{COLOURS["cause"]}" '
                          f'font-weight="bold" stroke="#fff" stroke-width="3" paint-order="stroke">root cause</text>')   # legible over markers
    out.append(root_label)
    # legend
    ly = bottom + 30
    legend = [("root cause", None), ("cause", "cause"), ("symptom", "symptom"), ("context", "context")]
    lx = LABEL_W
    for label, role in legend:
        fake = TimelineRow(time=None, source="", path="", line=0, line_end=0, host="", unit="", lane="",  # type: ignore[arg-type]
                           kind="", title="", role=role or "cause", severity="", count=1, is_root=role is None,
                           is_cause=role == "cause", event_ids=())
        out.append(_marker(lx, ly - 4, fake))
        out.append(f'<text x="{lx + 16}" y="{ly}" fill="#333">{label}</text>')
        lx += 130
    if untimed:
        out.append(f'<text x="{WIDTH - RIGHT}" y="{ly}" text-anchor="end" fill="#777">'
                   f'{untimed} untimed not drawn</text>')
    out.append("</svg>")
    return "".join(out)
