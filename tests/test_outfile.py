"""`report -o FILE`: a regular file is replaced whole; a device, FIFO or link target is written into, never
replaced (`-o /dev/null` once turned the machine's /dev/null into a regular file)."""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from pathlib import Path

from forensics.outfile import write_text


def test_a_regular_file_is_replaced_whole_and_no_temporary_is_left(tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    out.write_text("old, longer text\n")
    write_text(out, "new\n")
    assert out.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["r.md"]


def test_a_fifo_is_written_into_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_text(fifo, "report\n")
    reader.join(10)
    assert got == ["report\n"] and stat.S_ISFIFO(fifo.stat().st_mode)


def test_dev_null_stays_a_device() -> None:
    write_text(Path("/dev/null"), "report\n")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_symlink_keeps_pointing_at_the_replaced_file(tmp_path: Path) -> None:
    real = tmp_path / "real.md"
    real.write_text("old\n")
    link = tmp_path / "latest.md"
    link.symlink_to(real)
    write_text(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"


def test_report_output_to_a_fifo_goes_through_the_fifo(tmp_path: Path) -> None:
    from forensics.cli_report import _write

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    _write("# report\n", fifo)
    still_a_fifo = stat.S_ISFIFO(os.stat(fifo).st_mode)
    reader.join(5)
    if reader.is_alive():  # the old code renamed a file over the FIFO: release the reader blocked on it
        with contextlib.suppress(OSError):
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
    assert still_a_fifo and got == ["# report\n"]
