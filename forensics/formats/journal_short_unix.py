"""Format `journal-short-unix`: journalctl -o short-unix: `1748204239.123456 host ident[pid]: msg` (seconds since the epoch)."""

from .base import LineFormat, Stamp

FORMAT = LineFormat(
    name='journal-short-unix',
    description='journalctl -o short-unix: `1748204239.123456 host ident[pid]: msg` (seconds since the epoch)',
    pattern='^(?P<stamp>(?P<epoch>\\d{9,11}\\.\\d{6})) (?:(?P<host>[^\\s\\[\\]:]+) )?(?P<ident>[^\\s\\[]*?[^\\s\\[:])(?:\\[(?P<pid>\\d+)\\])?:(?: |$)(?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<stamp>(?P<epoch>[0-9]{9,11}\\.[0-9]{6})) (?P<host>[^\\s\\[\\]:]+) (?P<ident>[^\\s\\[:]+)(?:\\[(?P<pid>[0-9]+)\\])?:(?: |$))',
    stamp=Stamp.EPOCH,
    priority=13,
    example='1748204239.123456 gpu-node-1 python3[48213]: [2025-05-25 20:17:19 TP0] Load weight begin. avail mem=78.53 GB',
)
