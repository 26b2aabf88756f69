"""Format `dmesg`: dmesg (raw time format): `[ 1234.567890] msg`, seconds since boot; stamps restart at each boot."""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name='dmesg',
    description='dmesg (raw time format): `[ 1234.567890] msg`, seconds since boot; stamps restart at each boot',
    pattern='^(?P<stamp>\\[\\s*(?P<mono>\\d+\\.\\d+)(?: <\\s*[-+]?\\d+\\.\\d+>)?\\]) ?(?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<stamp>\\[ *(?P<mono>[0-9]+\\.[0-9]+)(?: < *[-+]?[0-9]+\\.[0-9]+>)?\\]) ?)',
    stamp=Stamp.MONO,
    priority=30,
    continuation=Continuation.INDENTED,
    defaults={"ident": "kernel"},
    example='[44238.512345] Out of memory: Killed process 48213 (python3) total-vm:503316480kB, anon-rss:490733568kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:960000kB oom_score_adj:0',
)
