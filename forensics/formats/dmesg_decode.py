"""Format `dmesg-decode`: dmesg -x: `kern  :err   : [ 1234.567890] msg` (facility and level decoded)."""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name='dmesg-decode',
    description='dmesg -x: `kern  :err   : [ 1234.567890] msg` (facility and level decoded)',
    pattern='^(?P<facility>[a-z0-9]+)\\s*:(?P<level>[a-z]+)\\s*: (?P<stamp>\\[\\s*(?P<mono>\\d+\\.\\d+)(?: <\\s*[-+]?\\d+\\.\\d+>)?\\]) ?(?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<facility>[a-z0-9]+) *:(?P<level>[a-z]+) *: (?P<stamp>\\[ *(?P<mono>[0-9]+\\.[0-9]+)(?: < *[-+]?[0-9]+\\.[0-9]+>)?\\]) ?)',
    stamp=Stamp.MONO,
    priority=28,
    continuation=Continuation.INDENTED,
    defaults={"ident": "kernel"},
    example='kern  :err   : [ 8123.456801] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.',
)
