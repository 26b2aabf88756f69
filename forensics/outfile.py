"""Writing a file the user named (`report -o FILE`, `--redact-map FILE`).

A regular file is written whole or not at all: under a temporary name beside it, then renamed over it, so a
reader never sees half a report. A name that is no regular file is written into as it is: renaming over
`/dev/null` (`-o /dev/null` to time a report), a FIFO or `/dev/stdout` would replace the device or pipe with a
file. A symbolic link is followed: the file it points to is replaced, the link stays.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` as above."""
    target = Path(os.path.realpath(path))
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
        return
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
