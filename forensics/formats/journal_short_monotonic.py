"""Format `journal-short-monotonic`: journalctl -o short-monotonic: `[ 8123.456789] host ident[pid]: msg` (seconds since boot)."""

from .base import LineFormat, Stamp

FORMAT = LineFormat(
    name='journal-short-monotonic',
    description='journalctl -o short-monotonic: `[ 8123.456789] host ident[pid]: msg` (seconds since boot)',
    pattern='^(?P<stamp>\\[\\s*(?P<mono>\\d+\\.\\d{6})\\]) (?P<host>\\S+) (?P<ident>[^\\s\\[]*?[^\\s\\[:])(?:\\[(?P<pid>\\d+)\\])?:(?: |$)(?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<stamp>\\[ *(?P<mono>[0-9]+\\.[0-9]{6})\\]) (?P<host>\\S+) (?P<ident>[^\\s\\[:]+)(?:\\[(?P<pid>[0-9]+)\\])?:(?: |$))',
    stamp=Stamp.MONO,
    priority=14,
    example='[ 8123.456789] gpu-node-1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.',
)
