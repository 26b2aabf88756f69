"""The PCIe link under a GPU: the root port's AER report of an uncorrected (fatal) error before the GPU falls off
the bus says the link failed first (the riser, slot, cable or power, not the driver); a GPU already gone when the
driver loads is a GPU off the bus too; corrected errors (the link's own retries) are no incident."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

KERN = """\
Jun  3 10:12:01 gpu-7 kernel: [88123.400100] pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0
Jun  3 10:12:01 gpu-7 kernel: [88123.400120] nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)
Jun  3 10:12:01 gpu-7 kernel: [88123.400130] nvidia 0000:3b:00.0:   device [10de:2330] error status/mask=00004000/00000000
Jun  3 10:12:01 gpu-7 kernel: [88123.400140] nvidia 0000:3b:00.0:    [14] CmpltTO                (First)
Jun  3 10:12:01 gpu-7 kernel: [88123.400300] nvidia 0000:3b:00.0: AER: can't recover (no error_detected callback)
Jun  3 10:12:02 gpu-7 kernel: [88124.456789] NVRM: GPU at PCI:0000:3b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae
Jun  3 10:12:02 gpu-7 kernel: [88124.456795] NVRM: GPU Board Serial Number: 1652123456789
Jun  3 10:12:02 gpu-7 kernel: [88124.456800] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.
Jun  3 10:12:02 gpu-7 kernel: [88124.456900] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
Jun  3 10:12:03 gpu-7 kernel: [88125.500000] pcieport 0000:00:03.0: AER: Root Port link has been reset (0)
Jun  3 10:12:03 gpu-7 kernel: [88125.500100] pcieport 0000:00:03.0: AER: device recovery failed
"""
SGLANG = """\
[2025-06-03 10:12:05 TP3] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 2405, in run_scheduler_process
    scheduler.event_loop_overlap()
RuntimeError: CUDA error: unspecified launch failure
[2025-06-03 10:12:05] Received sigquit from a child process. It usually means the child failed.
"""
PROBE = """\
[    0.000000] Linux version 6.8.0-60-generic (buildd@lcy02-amd64-098) #63-Ubuntu SMP PREEMPT_DYNAMIC
[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0
               NVRM: (PCI ID: 10de:26b5) installed in this system has
               NVRM: fallen off the bus and is not responding to commands.
[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).
"""
CORRECTED = """\
[68183.615790] pcieport 0000:00:03.1: AER: Correctable error message received from 0000:00:00.0
[68183.615810] pcieport 0000:00:03.1: PCIe Bus Error: severity=Correctable, type=Data Link Layer, (Transmitter ID)
[68183.615818] pcieport 0000:00:03.1:   device [1022:1453] error status/mask=00001000/00006000
[68183.615826] pcieport 0000:00:03.1:    [12] Timeout
"""


def _run(tmp: Path, files: dict[str, str], *args: str) -> str:
    paths = []
    for name, text in files.items():
        (tmp / name).write_text(text)
        os.utime(tmp / name, (1748952000, 1748952000))   # copied with its time (2025-06-03): the year of `Jun  3`
        paths.append(str(tmp / name))
    store = ["--store", str(tmp / "store")]
    r = CliRunner().invoke(main, [*store, "ingest", *paths])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, [*store, *args])
    return r.output


def test_a_fatal_pcie_error_before_the_gpu_falls_off_the_bus(tmp_path: Path) -> None:
    out = _run(tmp_path, {"kern.log": KERN, "sglang.log": SGLANG}, "incidents")
    assert [ln.split("\t")[3:] for ln in out.splitlines()] == [["confirmed", "GPU 0000:3b:00 fell off the bus"]]
    report = CliRunner().invoke(main, ["--store", str(tmp_path / "store"), "report", "--incident",
                                       "2025-06-03"]).output
    root = report.split("**Root cause", 1)[1].split("\n", 1)[0]
    assert ("The PCIe link failed first: the root port 0000:00:03.0 reported an uncorrected (fatal) error (from "
            "0000:3b:00.0) 1 s before (`") in root
    assert root.count("The PCIe link failed first") == 1          # the driver's two lines for the lost GPU: once
    assert ("| `kern.log:1` |  | PCIe uncorrected (Fatal) error (from 0000:3b:00.0) (reported by 0000:00:03.0) |"
            in report)


def test_a_gpu_gone_when_the_driver_loads(tmp_path: Path) -> None:
    out = _run(tmp_path, {"dmesg.log": PROBE}, "events", "--kind", "gpu_fallen_off_bus")
    assert "GPU 0000:b3:00.0 has fallen off the bus (found at driver load)" in out


def test_corrected_errors_are_no_incident(tmp_path: Path) -> None:
    out = _run(tmp_path, {"dmesg.log": CORRECTED}, "events", "--kind", "pcie_error")
    assert out.strip() == "0 event(s)"
