"""Format `generic`: any line that starts with a recognisable date and time (`2025-05-25 20:17:19,123 ERROR ...`, `2025/05/25 ...`, `[2025-05-25T20:17:19Z] ...`)."""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name='generic',
    description='any line that starts with a recognisable date and time (`2025-05-25 20:17:19,123 ERROR ...`, `2025/05/25 ...`, `[2025-05-25T20:17:19Z] ...`)',
    pattern='^\\[?(?P<stamp>\\d{4}[-/]\\d{2}[-/]\\d{2}[T ]\\d{2}:\\d{2}:\\d{2}(?:[.,]\\d{1,9})?(?:Z|[+-]\\d{2}:?\\d{2})?)\\]?[\\s:|,\\-]*(?P<msg>.*)$',
    stamp=Stamp.ISO,
    priority=80,
    continuation=Continuation.ANY,
    detect_weight=0.5,
    example='2025-05-25 20:17:19,123 ERROR worker: connection refused',
)
