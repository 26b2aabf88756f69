"""Format `journal-short-precise`: journalctl -o short-precise: `May 25 20:17:19.123456 host ident[pid]: msg`; no year, no zone."""

from .base import LineFormat, Stamp

FORMAT = LineFormat(
    name='journal-short-precise',
    description='journalctl -o short-precise: `May 25 20:17:19.123456 host ident[pid]: msg`; no year, no zone',
    pattern='^(?P<stamp>(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\\d{1,2}) (?P<time>\\d{2}:\\d{2}:\\d{2}\\.\\d{1,9})) (?:(?P<host>[^\\s\\[\\]:]+) )?(?P<ident>[^\\s\\[]*?[^\\s\\[:])(?:\\[(?P<pid>\\d+)\\])?:(?: |$)(?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<stamp>(?P<mon>J(?:an|u[nl])|Feb|Ma[ry]|A(?:pr|ug)|Sep|Oct|Nov|Dec) +(?P<day>[0-9][0-9]?) (?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{1,9})) (?P<host>[^\\s\\[\\]:]+) (?P<ident>[^\\s\\[:]+)(?:\\[(?P<pid>[0-9]+)\\])?:(?: |$))',
    stamp=Stamp.SYSLOG_NOYEAR,
    priority=19,
    example="May 25 20:17:19.123456 dflash-train systemd[1]: sglang.service: Failed with result 'signal'.",
)
