"""Binary systemd journal files (`/var/log/journal/<machine-id>/system.journal`, `system@....journal~`), read
through the machine's own `journalctl --file F -o json --all`, whose text then reads as `journal-json`.

The journal file format is systemd's own (hash tables, entry arrays, compressed fields, versions that add
incompatible flags); journalctl is its reader, and a file copied off a box is read with it here as it would be
there. Line N of what it prints is the file's N-th entry in time order: that is the `line` a record and a report
cite. A file journalctl cannot read in full (copied while journald wrote it, a newer systemd's incompatible
features) keeps the entries it printed, and its error ends the read as a damaged compressed file's does.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import BinaryIO

MAGIC = b"LPKSHHRH"
ARGS = ("-o", "json", "--all", "--no-pager", "--file")   # --all: fields over 4 KiB too (else printed as null)


def is_journal(head: bytes) -> bool:
    return head.startswith(MAGIC)


@cache
def journalctl() -> str | None:
    return shutil.which("journalctl")


@cache
def version() -> str:
    """`systemd 252 (252.39-1~deb12u2)`, the first line of `journalctl --version` ("" when it cannot run)."""
    exe = journalctl()
    if exe is None:
        return ""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, timeout=30, env=_env()).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.decode("utf-8", "replace").splitlines()[0].strip() if out else ""


def command(path: str) -> str:
    """The command a source note names, as a user would type it."""
    return f"journalctl --file {path} -o json --all"


def _env() -> dict[str, str]:
    return {**os.environ, "LC_ALL": "C", "SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": "", "PAGER": "cat"}


class JournalStream(io.RawIOBase):
    """What `journalctl --file PATH -o json --all` prints, as a binary stream. At its end, a non-zero exit is an
    OSError that quotes journalctl's message (what it printed before stays read)."""

    def __init__(self, path: Path, exe: str) -> None:
        super().__init__()
        self._err = tempfile.TemporaryFile()     # a file, not a pipe: journalctl never blocks on its stderr
        self._proc = subprocess.Popen([exe, *ARGS, str(path)], stdout=subprocess.PIPE, stderr=self._err,
                                      stdin=subprocess.DEVNULL, env=_env())
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        assert self._proc.stdout is not None
        n = self._proc.stdout.readinto(b)
        if not n and not self._done:
            self._done = True
            rc = self._proc.wait()
            if rc != 0:
                self._err.seek(0)
                msg = " ".join(self._err.read().decode("utf-8", "replace").split())[:400]
                raise OSError(f"journalctl could not read all of it (exit {rc}: {msg or 'no message'})")
        return n or 0

    def close(self) -> None:
        if self.closed:
            return
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._err.close()
        super().close()


def write_all(path: Path, out: BinaryIO) -> bool:
    """What journalctl prints for the file, written to `out` (a report quoting its entries reads them from there,
    a journal's JSON being several times the file); False when it cannot run."""
    exe = journalctl()
    if exe is None:
        return False
    try:
        subprocess.run([exe, *ARGS, str(path)], stdout=out, stderr=subprocess.DEVNULL, timeout=600, env=_env(),
                       stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return False
    return True
