"""A GPU the NVIDIA driver cannot initialize (`RmInitAdapter failed!`, logged at each attempt to open it) is the root
cause of the server that needs it failing to start; after the GPU fell off the bus, it is told in the fall's
conclusion."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

BOOT = """\
May 26 06:02:11 gpu-a07 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.133.20  Fri Feb 28 21:29:12 UTC 2025
May 26 06:02:11 gpu-a07 kernel: NVRM: GPU 0000:d8:00.0: RmInitAdapter failed! (0x26:0xffff:1227)
May 26 06:02:11 gpu-a07 kernel: NVRM: GPU 0000:d8:00.0: rm_init_adapter failed, device minor number 7
May 26 06:03:40 gpu-a07 systemd[1]: Started sglang.service - SGLang server.
May 26 06:03:44 gpu-a07 kernel: NVRM: GPU 0000:d8:00.0: RmInitAdapter failed! (0x26:0xffff:1227)
May 26 06:03:44 gpu-a07 kernel: NVRM: GPU 0000:d8:00.0: rm_init_adapter failed, device minor number 7
May 26 06:03:52 gpu-a07 python3[5121]: [2025-05-26 06:03:52 TP7] Scheduler hit an exception: Traceback (most recent call last):
May 26 06:03:52 gpu-a07 python3[5121]:   File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 2306, in run_scheduler_process
May 26 06:03:52 gpu-a07 python3[5121]:     scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank)
May 26 06:03:52 gpu-a07 python3[5121]: RuntimeError: CUDA error: invalid device ordinal
May 26 06:03:53 gpu-a07 systemd[1]: sglang.service: Main process exited, code=exited, status=1/FAILURE
May 26 06:03:53 gpu-a07 systemd[1]: sglang.service: Failed with result 'exit-code'.
"""

FALL = """\
May 26 20:17:03 gpu-a07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
May 26 20:17:03 gpu-a07 kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
May 26 20:17:40 gpu-a07 kernel: NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x62:0x40:2393)
May 26 20:17:40 gpu-a07 kernel: NVRM: GPU 0000:3b:00.0: rm_init_adapter failed, device minor number 2
May 26 20:18:10 gpu-a07 kernel: NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x62:0x40:2393)
May 26 20:18:10 gpu-a07 kernel: NVRM: GPU 0000:3b:00.0: rm_init_adapter failed, device minor number 2
"""


def _run(tmp: Path, text: str) -> tuple[list[str], str]:
    (tmp / "journal.log").write_text(text)
    store = ["--store", str(tmp / "store")]
    r = CliRunner().invoke(main, [*store, "ingest", "--year", "2025", str(tmp / "journal.log")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, [*store, "incidents"])
    heads = [ln.split("\t")[3] + " | " + ln.split("\t")[4] for ln in r.output.splitlines() if "\t" in ln]
    report = CliRunner().invoke(main, [*store, "report", "--incident", "2025-05-26"]).output
    return heads, report


def test_a_gpu_the_driver_cannot_initialize_stops_the_server_that_needs_it(tmp_path: Path) -> None:
    heads, report = _run(tmp_path, BOOT)
    assert heads == ["confirmed | GPU 0000:d8:00.0 on gpu-a07 failed to initialize (RmInitAdapter failed, "
                     "0x26:0xffff:1227)"]
    summary = report.split("## Impact")[0]
    assert "The NVIDIA driver could not initialize GPU 0000:d8:00.0 at 06:02:11 (`RmInitAdapter failed! " in summary
    assert "(and 1 more times, to 06:03:44)" in summary
    # the server's CUDA error is the GPU's consequence; the companion `rm_init_adapter failed` lines are no events
    key = report.split("### CUDA error: invalid device ordinal", 1)[1].split("###", 1)[0]
    assert "Explained by: GPU failed to initialize (NVIDIA driver) (confirmed)." in key
    assert "device minor number 7 |" not in report.split("## What the key lines reveal")[0]
    assert "cat /proc/driver/nvidia/gpus/0000:d8:00.0/information" in report


def test_a_gpu_that_fell_off_the_bus_and_could_not_be_initialized_again(tmp_path: Path) -> None:
    heads, report = _run(tmp_path, FALL)
    assert heads == ["confirmed | GPU 0000:3b:00 fell off the bus"]
    summary = report.split("## Impact")[0]
    assert ("The driver could not initialize the GPU again afterwards (20:17:40: `RmInitAdapter failed! "
            "(0x62:0x40:2393)`") in summary
    assert "(and 1 more times, to 20:18:10): a GPU that fell off the bus stays lost until the host is power-cycled" \
        in summary
    assert "**Also" not in summary
