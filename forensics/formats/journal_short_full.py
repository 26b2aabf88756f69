"""Format `journal-short-full`: journalctl -o short-full: `Sun 2025-05-25 20:17:19 UTC host ident[pid]: msg` (zone abbreviation)."""

from .base import LineFormat, Stamp

FORMAT = LineFormat(
    name='journal-short-full',
    description='journalctl -o short-full: `Sun 2025-05-25 20:17:19 UTC host ident[pid]: msg` (zone abbreviation)',
    pattern='^(?P<stamp>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<date>\\d{4}-\\d{2}-\\d{2}) (?P<time>\\d{2}:\\d{2}:\\d{2}(?:\\.\\d{1,6})?) (?P<zone>[A-Za-z][A-Za-z0-9+\\-/_]*)) (?:(?P<host>[^\\s\\[\\]:]+) )?(?P<ident>[^\\s\\[]*?[^\\s\\[:])(?:\\[(?P<pid>\\d+)\\])?:(?: |$)(?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<stamp>(?:Mon|T(?:ue|hu)|Wed|Fri|S(?:at|un)) (?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2}) (?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\\.[0-9]{1,6})?) (?P<zone>[A-Za-z][A-Za-z0-9+\\-/_]*)) (?P<host>[^\\s\\[\\]:]+) (?P<ident>[^\\s\\[:]+)(?:\\[(?P<pid>[0-9]+)\\])?:(?: |$))',
    stamp=Stamp.FULL,
    priority=16,
    example="Sun 2025-05-25 20:17:19 UTC dflash-train systemd[1]: sglang.service: Failed with result 'signal'.",
)
