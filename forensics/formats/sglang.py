"""Format `sglang`: SGLang server log: `[2025-05-25 20:17:19 TP0] msg` (any sequence of DP/PP/ATTN_CP/MOE_DP/TP/EP rank tokens; `.mmm` with SGLANG_LOG_MS); raw traceback lines belong to the record before."""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name='sglang',
    description='SGLang server log: `[2025-05-25 20:17:19 TP0] msg` (any sequence of DP/PP/ATTN_CP/MOE_DP/TP/EP rank tokens; `.mmm` with SGLANG_LOG_MS); raw traceback lines belong to the record before',
    pattern='^(?P<stamp>\\[(?P<date>\\d{4}-\\d{2}-\\d{2}) (?P<time>\\d{2}:\\d{2}:\\d{2}(?:\\.\\d{1,6})?)(?P<rank>(?: (?:DP|PP|TP|EP|ATTN_CP|MOE_DP)\\d+)*)\\]) (?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<stamp>\\[(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2}) (?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\\.[0-9]{1,6})?)(?P<rank>(?: (?:DP|PP|TP|EP|ATTN_CP|MOE_DP)[0-9]+)*)\\]) )',
    stamp=Stamp.LOCAL,
    priority=10,
    continuation=Continuation.ANY,
    defaults={"ident": "sglang"},
    example='[2025-05-25 20:29:47 TP0] Scheduler hit an exception: Traceback (most recent call last):',
)
