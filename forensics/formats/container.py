"""Format `container`: a container's output with the runtime's time in front of each line.

`kubectl logs --timestamps` and `docker logs --timestamps` print `2025-05-25T20:16:40.100000001Z ` (RFC 3339 with
nanoseconds, UTC) and the line as the process wrote it; a CRI log file on the node (`/var/log/pods/.../0.log`,
what the kubelet and containerd write) adds the stream and whether the line is whole (`F`) or the head of a line
split at 16 KiB (`P`): `2025-05-25T20:16:40.100000001Z stderr F ...`. The message keeps its indentation (a
traceback's `  File ...` lines), so a traceback the process wrote over several lines is one record again
(`normalise`). A split line's parts stay records of their own.
"""

from .base import Continuation, LineFormat, Stamp

FORMAT = LineFormat(
    name="container",
    description="kubectl/docker logs --timestamps, CRI log files: `2025-05-25T20:16:40.100000001Z [stdout F ]msg`",
    pattern=(r"^(?P<stamp>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})) "
             r"(?:(?P<stream>stdout|stderr) (?P<tag>[PF]) )?(?P<msg>.*)$"),
    stamp=Stamp.ISO,
    continuation=Continuation.NONE,
    priority=70,
    example="2025-05-25T20:16:40.100000001Z [2025-05-25 20:16:40 TP0] Scheduler hit an exception: Traceback (most "
            "recent call last):",
)
