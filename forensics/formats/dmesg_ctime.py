"""Format `dmesg-ctime`: dmesg -T: `[Sun May 25 20:17:19 2025] msg` (local time of the reading host, zone assumed)."""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name='dmesg-ctime',
    description='dmesg -T: `[Sun May 25 20:17:19 2025] msg` (local time of the reading host, zone assumed)',
    pattern='^(?P<stamp>\\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\\d{1,2}) (?P<time>\\d{2}:\\d{2}:\\d{2}) (?P<year>\\d{4})(?: <\\s*[-+]?\\d+\\.\\d+>)?\\]) ?(?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<stamp>\\[(?:Mon|T(?:ue|hu)|Wed|Fri|S(?:at|un)) (?P<mon>J(?:an|u[nl])|Feb|Ma[ry]|A(?:pr|ug)|Sep|Oct|Nov|Dec) +(?P<day>[0-9][0-9]?) (?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2}) (?P<year>[0-9]{4})(?: < *[-+]?[0-9]+\\.[0-9]+>)?\\]) ?)',
    stamp=Stamp.CTIME,
    priority=27,
    continuation=Continuation.INDENTED,
    defaults={"ident": "kernel"},
    example='[Sun May 25 20:17:18 2025] Out of memory: Killed process 48213 (python3) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:8kB oom_score_adj:0',
)
