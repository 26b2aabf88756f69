"""Times for people: UTC and one chosen zone, with inferred times marked."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

# TimeSource values (forensics.schema.TimeSource) whose time was not printed whole in the log.
INFERRED = frozenset({"zone_assumed", "year_inferred", "boot_anchored", "monotonic_only"})
MARK = "≈"

TIME_SOURCE_WORDS: dict[str, str] = {
    "exact": "printed with date, time and zone (or as epoch seconds)",
    "zone_assumed": "date and time printed, zone assumed",
    "year_inferred": "no year printed: year taken from an anchor, zone assumed",
    "boot_anchored": "kernel seconds since boot plus the boot time",
    "monotonic_only": "kernel seconds since boot, no boot time: ordered within its boot only",
    "none": "no time printed",
}


def parse_ts(value: str | None) -> datetime | None:
    """An ISO 8601 UTC string of the model (`...Z`) as an aware datetime."""
    if not value:
        return None
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)


def clock(dt: datetime, with_date: bool) -> str:
    """`20:17:19` or `2025-05-25 20:17:19`, with `.123` when the time has a fraction."""
    text = dt.strftime("%H:%M:%S")
    if dt.microsecond:
        text += f".{dt.microsecond // 1000:03d}"
    return f"{dt:%Y-%m-%d} {text}" if with_date else text


def zone_abbrev(dt: datetime) -> str:
    name = dt.tzname() or ""
    if not name or name[0] in "+-":
        off = dt.utcoffset()
        minutes = int(off.total_seconds() // 60) if off is not None else 0
        sign = "+" if minutes >= 0 else "-"
        return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    return name


@dataclass(frozen=True)
class Clock:
    """How times are shown in one report: UTC always, plus `zone` unless it is UTC."""

    zone: str = "UTC"

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.zone)

    @property
    def is_utc(self) -> bool:
        return self.zone in ("UTC", "Etc/UTC", "Z", "UCT", "Etc/UCT", "Universal", "Zulu")

    def local(self, dt: datetime) -> datetime:
        return dt.astimezone(self.tz)

    def utc_text(self, dt: datetime | None, with_date: bool = False) -> str:
        return "—" if dt is None else clock(dt, with_date)

    def local_text(self, dt: datetime | None, with_date: bool = False) -> str:
        if dt is None:
            return "—"
        loc = self.local(dt)
        return f"{clock(loc, with_date)} {zone_abbrev(loc)}"

    def both(self, dt: datetime | None, with_date: bool = True) -> str:
        """`2025-05-25 20:17:19 UTC (22:17:19 CEST)`; UTC alone when the zone is UTC."""
        if dt is None:
            return "unknown time"
        text = f"{clock(dt, with_date)} UTC"
        if not self.is_utc:
            loc = self.local(dt)
            same_day = loc.date() == dt.date()
            text += f" ({clock(loc, with_date and not same_day)} {zone_abbrev(loc)})"
        return text


def duration(seconds: float) -> str:
    """`36 s`, `9 min 31 s`, `2 h 5 min`, `3 d 4 h`."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m} min {s} s" if s else f"{m} min"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"
