"""Format `uvicorn`: uvicorn lines inside SGLang output: `INFO:     127.0.0.1:53442 - "POST /v1/chat/completions HTTP/1.1" 200 OK` (no time)."""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name='uvicorn',
    description='uvicorn lines inside SGLang output: `INFO:     127.0.0.1:53442 - "POST /v1/chat/completions HTTP/1.1" 200 OK` (no time)',
    pattern='^(?P<level>INFO|WARNING|ERROR|DEBUG|CRITICAL|TRACE):\\s+(?P<msg>.*)$',
    fast_pattern='^(?P<_head>(?P<level>INFO|WARNING|ERROR|DEBUG|CRITICAL|TRACE):\\s+)',
    stamp=Stamp.NONE,
    priority=40,
    continuation=Continuation.ANY,
    defaults={"ident": "uvicorn"},
    example='INFO:     127.0.0.1:53442 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
)
