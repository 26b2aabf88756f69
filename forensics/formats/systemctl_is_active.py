"""Format `systemctl-is-active`: the one-word answers of `systemctl is-active UNIT`."""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name="systemctl-is-active",
    description="`systemctl is-active UNIT` answers, one per line: active, failed, inactive, activating, ...",
    pattern=r"^(?P<msg>active|inactive|failed|activating|deactivating|reloading|refreshing|maintenance|unknown)$",
    stamp=Stamp.NONE,
    continuation=Continuation.NONE,
    priority=36,
    detect_weight=0.3,
    defaults={"ident": "systemctl"},
    example="failed",
)
