"""Format `journal-short-iso`: journalctl -o short-iso: `2025-05-25T20:17:19+00:00 host ...` (`+HH:MM` since systemd v255, `+HHMM` before)."""

from .base import LineFormat, Stamp

FORMAT = LineFormat(
    name='journal-short-iso',
    description='journalctl -o short-iso: `2025-05-25T20:17:19+00:00 host ...` (`+HH:MM` since systemd v255, `+HHMM` before)',
    pattern='^(?P<stamp>\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(?:[+-]\\d{2}:?\\d{2}|Z)) (?:(?P<host>[^\\s\\[\\]:]+) )?(?P<ident>[^\\s\\[]*?[^\\s\\[:])(?:\\[(?P<pid>\\d+)\\])?:(?: |$)(?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<stamp>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:[+-][0-9]{2}:?[0-9]{2}|Z)) (?P<host>[^\\s\\[\\]:]+) (?P<ident>[^\\s\\[:]+)(?:\\[(?P<pid>[0-9]+)\\])?:(?: |$))',
    stamp=Stamp.ISO,
    priority=18,
    example='2025-05-25T20:17:19+00:00 dflash-train systemd[1]: sglang-k26.service: Main process exited, code=killed, status=9/KILL',
)
