"""Format `dmesg-prio`: dmesg -r: `<6>[ 1234.567890] msg` (facility<<3|level before the stamp)."""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name='dmesg-prio',
    description='dmesg -r: `<6>[ 1234.567890] msg` (facility<<3|level before the stamp)',
    pattern='^<(?P<prio>\\d{1,3})>(?P<stamp>\\[\\s*(?P<mono>\\d+\\.\\d+)(?: <\\s*[-+]?\\d+\\.\\d+>)?\\]) ?(?P<msg>.*)$',
    fast_pattern='^(?P<_head><(?P<prio>[0-9]{1,3})>(?P<stamp>\\[ *(?P<mono>[0-9]+\\.[0-9]+)(?: < *[-+]?[0-9]+\\.[0-9]+>)?\\]) ?)',
    stamp=Stamp.MONO,
    priority=29,
    continuation=Continuation.INDENTED,
    defaults={"ident": "kernel"},
    example='<3>[ 8123.456801] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.',
)
