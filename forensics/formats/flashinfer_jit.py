"""Format `flashinfer-jit`: FlashInfer JIT logger: `2025-05-25 20:17:19,123 - INFO - core.py:123 - flashinfer.jit: msg`."""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name='flashinfer-jit',
    description='FlashInfer JIT logger: `2025-05-25 20:17:19,123 - INFO - core.py:123 - flashinfer.jit: msg`',
    pattern='^(?P<stamp>(?P<date>\\d{4}-\\d{2}-\\d{2}) (?P<time>\\d{2}:\\d{2}:\\d{2},\\d{3})) - (?P<level>[A-Z]+) - (?P<file>[\\w.]+:\\d+) - (?P<ident>[\\w.]+): (?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<stamp>(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2}) (?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2},[0-9]{3})) - (?P<level>[A-Z]+) - (?P<file>[\\w.]+:[0-9]+) - (?P<ident>[\\w.]+): )',
    stamp=Stamp.LOCAL,
    priority=12,
    continuation=Continuation.ANY,
    defaults={"ident": "flashinfer.jit"},
    example='2025-05-25 20:29:46,981 - INFO - core.py:123 - flashinfer.jit: Loading JIT ops: sampling',
)
