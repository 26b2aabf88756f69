"""Format `journal-short-delta`: journalctl -o short-delta (v252+): `[ 8123.456789 <    0.000123 >] host ident[pid]: msg`.

The monotonic seconds of the entry's boot, then the time since the entry before it: ` ` after the delta when it is
taken on the same boot's monotonic clock, `*` when it falls back to wall-clock time (a new boot), and 16 spaces in
its place when there is no previous entry (`output_timestamp_monotonic()` in systemd's src/shared/logs-show.c).
The delta repeats what the stamps say, so only the monotonic seconds are read.
"""

from .base import LineFormat, Stamp

FORMAT = LineFormat(
    name='journal-short-delta',
    description='journalctl -o short-delta: `[ 8123.456789 <    0.000123 >] host ident[pid]: msg` (seconds since boot, '
                'then since the entry before)',
    pattern='^(?P<stamp>\\[\\s*(?P<mono>\\d+\\.\\d{6})(?: <\\s*\\d+\\.\\d{6}[ *]>| {16})\\]) (?P<host>\\S+) '
            '(?P<ident>[^\\s\\[]*?[^\\s\\[:])(?:\\[(?P<pid>\\d+)\\])?:(?: |$)(?P<msg>.*)$',
    stamp=Stamp.MONO,
    priority=14,
    example='[ 8123.456789 <    0.000123 >] gpu-node-1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.',
)
