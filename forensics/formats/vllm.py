"""Format `vllm`: vLLM's logger, `INFO 05-25 20:10:05 [api_server.py:1043] msg`; no year.

vLLM's formatter (vllm/logger.py) prints `%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s` with the
date `%m-%d %H:%M:%S` (before 0.6: `%(filename)s:%(lineno)d]`, no opening bracket; newer releases print the file
name alone in the brackets). Its worker and engine processes add `(VllmWorker rank=0 pid=48291) `,
`(EngineCore_DP0 pid=413) ` or `(APIServer pid=1) ` in front (Ray: `(RayWorkerWrapper pid=123, ip=10.0.0.2) `): the
process name is the record's identifier and the pid its pid.

Its NewLineFormatter repeats the whole prefix on every line of a multi-line message (`logger.exception`: the
message, then its traceback): `vllmprefix.Repeats` takes the repeated prefix off those lines before parsing, so
that such a message is one record again.
"""

from .base import Continuation, LineFormat, Stamp

PROCESS = r"\((?P<ident>[A-Za-z_][\w.\-]*)(?: rank=\d+)? pid=(?P<pid>\d+)(?:, ip=[^)]*)?\) "
HEAD = (r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<stamp>(?P<mon>\d{2})-(?P<day>\d{2}) "
        r"(?P<time>\d{2}:\d{2}:\d{2})(?:\.\d{1,6})?) \[?[^\s\[\]]+\] ")

FORMAT = LineFormat(
    name="vllm",
    description="vLLM's log lines: `INFO 05-25 20:10:05 [api_server.py:1043] msg`, maybe behind "
                "`(VllmWorker rank=0 pid=48291) `; no year",
    pattern="^(?:" + PROCESS + ")?" + HEAD + "(?P<msg>.*)$",
    stamp=Stamp.SYSLOG_NOYEAR,
    continuation=Continuation.ANY,
    priority=12,
    defaults={"ident": "vllm"},
    example="(EngineCore_DP0 pid=413) ERROR 05-25 20:16:40 [core.py:710] EngineCore encountered a fatal error.",
)
