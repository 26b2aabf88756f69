"""Format `dmesg-iso`: dmesg --time-format iso: `2025-05-25T20:17:19,123456+00:00 msg` (no brackets; `+HHMM` before util-linux 2.32)."""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name='dmesg-iso',
    description='dmesg --time-format iso: `2025-05-25T20:17:19,123456+00:00 msg` (no brackets; `+HHMM` before util-linux 2.32)',
    pattern='^(?P<stamp>\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2},\\d{6}[+-]\\d{2}:?\\d{2}) (?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<stamp>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]{6}[+-][0-9]{2}:?[0-9]{2}) )',
    stamp=Stamp.ISO,
    priority=26,
    continuation=Continuation.INDENTED,
    defaults={"ident": "kernel"},
    example='2025-05-25T20:17:18,512345+00:00 Out of memory: Killed process 48213 (python3) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:8kB oom_score_adj:0',
)
