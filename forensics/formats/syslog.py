"""Format `syslog`: traditional syslog (/var/log/syslog, messages, kern.log): `May 25 20:17:19 host prog[pid]: msg`; no year."""

from .base import LineFormat, Stamp

FORMAT = LineFormat(
    name='syslog',
    description='traditional syslog (/var/log/syslog, messages, kern.log): `May 25 20:17:19 host prog[pid]: msg`; no year',
    pattern='^(?:<(?P<prio>\\d{1,3})>)?(?P<stamp>(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\\d{1,2}) (?P<time>\\d{2}:\\d{2}:\\d{2})) (?P<host>\\S+) (?P<ident>[^\\s\\[]*?[^\\s\\[:])(?:\\[(?P<pid>\\d+)\\])?:(?: |$)(?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?:<(?P<prio>[0-9]{1,3})>)?(?P<stamp>(?P<mon>J(?:an|u[nl])|Feb|Ma[ry]|A(?:pr|ug)|Sep|Oct|Nov|Dec) +(?P<day>[0-9][0-9]?) (?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})) (?P<host>\\S+) (?P<ident>[^\\s\\[:]+)(?:\\[(?P<pid>[0-9]+)\\])?:(?: |$))',
    stamp=Stamp.SYSLOG_NOYEAR,
    priority=21,
    example='Jun 14 15:16:01 combo sshd(pam_unix)[19939]: check pass; user unknown',
)
