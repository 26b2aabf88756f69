"""Format `journal-short-iso-precise`: journalctl -o short-iso-precise: `2025-05-25T20:17:19.123456+00:00 host ...`."""

from .base import LineFormat, Stamp

FORMAT = LineFormat(
    name='journal-short-iso-precise',
    description='journalctl -o short-iso-precise: `2025-05-25T20:17:19.123456+00:00 host ...`',
    pattern='^(?P<stamp>\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{6}(?:[+-]\\d{2}:?\\d{2}|Z)) (?:(?P<host>[^\\s\\[\\]:]+) )?(?P<ident>[^\\s\\[]*?[^\\s\\[:])(?:\\[(?P<pid>\\d+)\\])?:(?: |$)(?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<stamp>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}(?:[+-][0-9]{2}:?[0-9]{2}|Z)) (?P<host>[^\\s\\[\\]:]+) (?P<ident>[^\\s\\[:]+)(?:\\[(?P<pid>[0-9]+)\\])?:(?: |$))',
    stamp=Stamp.ISO,
    priority=17,
    example='2025-05-25T20:17:19.123456+00:00 gpu-node-1 kernel: Out of memory: Killed process 48213 (python3) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:8kB oom_score_adj:0',
)
