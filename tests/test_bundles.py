"""Files that bundle several logs: nvidia-bug-report.log(.gz), what `sudo nvidia-bug-report.sh` writes on a GPU
host. Its sections (`____` rules) hold a `date` stamp, `journalctl -b -0 | grep NVRM` lines (no year), a raw
`dmesg` (kernel seconds) and `nvidia-smi --query` output, one after the other in one file."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import polars as pl
from click.testing import CliRunner

from forensics.cli import main
from helpers import ingest_text, iso, records

BUNDLE = Path(__file__).parent / "fixtures" / "nvidia-bug-report.log"
Y2026 = 1796083200  # 2026-12-01T00:00:00Z: a copy made long after the capture


def _ingest(tmp_path: Path, text: str) -> tuple[Path, object]:
    path = tmp_path / "nvidia-bug-report.log.gz"
    path.write_bytes(gzip.compress(text.encode(), mtime=0))
    os.utime(path, (Y2026, Y2026))
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    store = Store(tmp_path / "store")
    return path, (store, ingest(store, [str(path)], IngestOptions()))


def test_the_year_comes_from_the_date_the_bundle_printed_not_the_file_time(tmp_path: Path) -> None:
    # without the systemctl status section (whose `Active: ... since` is a dated line), only `Date:` dates it
    text = BUNDLE.read_text()
    start, end = text.index("/usr/bin/systemctl status"), text.index("____", text.index("Started nvidia-persistenced"))
    _, (store, rep) = _ingest(tmp_path, text[:start] + text[end:])
    df = records(store).filter(pl.col("ts_source") == "year_inferred")
    assert df.height and set(d.year for d in df["ts"]) == {2025}
    assert "`Date: Sun May 25 20:31:02 UTC 2025`" in df["ts_anchor"][0]
    assert "the date printed when the file was captured" in rep.results[0].entry.time_anchor


def test_the_dmesg_section_ends_where_the_next_section_starts(tmp_path: Path) -> None:
    _, (store, _) = _ingest(tmp_path, BUNDLE.read_text())
    df = records(store)
    seg = df.filter(pl.col("message").str.contains("segfault at 18"))
    assert seg.height == 1 and seg["line_end"][0] == seg["line"][0]
    assert "NVSMI" not in seg["message"][0]
    smi = df.filter(pl.col("message").str.contains("Product Name"))
    assert smi.height == 1 and smi["format"][0] == "text"
    # the dmesg section is anchored by its own kernel lines in the journal section of the same file
    xid = df.filter(pl.col("message").str.contains("Xid") & (pl.col("format") == "dmesg"))
    assert xid["ts_source"].to_list() == ["boot_anchored"]
    assert iso(xid)[0].startswith("2025-05-25T20:17:0")


def test_the_bundle_explains_the_lost_gpu_and_what_died_of_it(tmp_path: Path) -> None:
    _ingest(tmp_path, BUNDLE.read_text())
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "store"), "report", "--incident", "2025-05-25"])
    assert r.exit_code == 0, r.output
    assert "# GPU 0000:3b:00 fell off the bus" in r.output
    assert "**Root cause (confirmed" in r.output
    explains = next(line for line in r.output.splitlines() if line.startswith("It explains:"))
    assert "segfault in libcuda.so.570.133.20" in explains
    assert "| gpu | 1 x NVIDIA H100 80GB HBM3 (80 GB) |" in r.output


def test_a_dmesg_record_keeps_its_indented_continuation_but_not_a_plain_line(tmp_path: Path) -> None:
    text = ("[  100.000001] first line of a two-line record\n"
            "               its indented continuation\n"
            "[  100.000002] next record\n"
            "some pasted text that is no kernel line\n")
    store, _ = ingest_text(tmp_path, "dmesg.txt", text)
    df = records(store)
    assert df["line"].to_list() == [1, 3, 4]
    assert df["line_end"].to_list() == [2, 3, 4]
    assert df["format"].to_list() == ["dmesg", "dmesg", "text"]


def test_a_previous_boots_journal_section_leaves_the_dmesg_anchored(tmp_path: Path) -> None:
    # `journalctl -b -1 | grep NVRM` repeats the driver's load lines of this boot: those texts are ambiguous and
    # not paired; the Xid burst is one moment, but its `GPU at PCI:...: GPU-<uuid>` line is this host's alone
    text = BUNDLE.read_text()
    prev = ("\n  journalctl -b -1:\n"
            "May 24 06:11:40 gpu-a07 kernel: nvidia: loading out-of-tree module taints kernel.\n"
            "May 24 06:11:40 gpu-a07 kernel: nvidia-nvlink: Nvlink Core is being initialized, major device number 508\n"
            "May 24 06:11:41 gpu-a07 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.133.20  "
            "Thu Mar 27 14:45:27 UTC 2025\n")
    at = text.index("\n____________________________________________\n\ndmesg:")
    _, (store, rep) = _ingest(tmp_path, text[:at] + prev + text[at:])
    assert len(rep.anchors) == 1 and rep.anchors[0].pairs == 4
    assert rep.anchors[0].boot_time.strftime("%Y-%m-%d %H:%M") == "2025-05-25 08:01"
    seg = records(store).filter(pl.col("message").str.contains("segfault at 18"))
    assert seg["ts_source"].to_list() == ["boot_anchored"]
