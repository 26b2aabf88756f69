"""Format `generic-syslog`: a line that starts with a syslog-style stamp but is not `host ident[pid]: msg`
(e.g. `Jun 19 04:09:11 combo syslogd 1.4.1: restart.`). The time is kept; host and identifier are not guessed."""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name="generic-syslog",
    description="any line starting with a syslog stamp `Mon DD HH:MM:SS` that no stricter format claims; no year",
    pattern=(r"^(?P<stamp>(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\d{1,2}) "
             r"(?P<time>\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?))\s+(?P<msg>.*)$"),
    fast_pattern='^(?P<_head>(?P<stamp>(?P<mon>J(?:an|u[nl])|Feb|Ma[ry]|A(?:pr|ug)|Sep|Oct|Nov|Dec) +(?P<day>[0-9][0-9]?) (?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\\.[0-9]{1,9})?))\\s+)',
    stamp=Stamp.SYSLOG_NOYEAR,
    continuation=Continuation.INDENTED,
    priority=81,
    detect_weight=0.5,
    example="Jun 19 04:09:11 combo syslogd 1.4.1: restart.",
)
