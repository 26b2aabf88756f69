"""Format `syslog-rfc3339`: rsyslog high-precision (RFC 3339): `2025-05-25T20:17:19.123456+00:00 host prog[pid]: msg`."""

from .base import LineFormat, Stamp

FORMAT = LineFormat(
    name='syslog-rfc3339',
    description='rsyslog high-precision (RFC 3339): `2025-05-25T20:17:19.123456+00:00 host prog[pid]: msg`',
    pattern='^(?P<stamp>\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(?:\\.\\d{1,9})?(?:[+-]\\d{2}:?\\d{2}|Z)) (?P<host>\\S+) (?P<ident>[^\\s\\[]*?[^\\s\\[:])(?:\\[(?P<pid>\\d+)\\])?:(?: |$)(?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<stamp>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\\.[0-9]{1,9})?(?:[+-][0-9]{2}:?[0-9]{2}|Z)) (?P<host>\\S+) (?P<ident>[^\\s\\[:]+)(?:\\[(?P<pid>[0-9]+)\\])?:(?: |$))',
    stamp=Stamp.ISO,
    priority=22,
    example='2025-05-25T20:17:19.123+02:00 gpu-node-1 sshd[1234]: Accepted publickey for root from 10.1.2.3 port 51234 ssh2',
)
