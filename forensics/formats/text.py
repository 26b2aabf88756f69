"""Format `text`: any line no other format claims. Kept as an untimed record, never dropped."""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name="text",
    description="untimed text (a shell transcript, a note): every line kept as a record with no time",
    pattern=r"^(?P<msg>.*)$",
    stamp=Stamp.NONE,
    continuation=Continuation.NONE,
    priority=99,
    detect_weight=0.05,
    example="$ systemctl is-active sglang-k26-eagle3.service",
)
