"""Xid 13, 31 and 43 name the process whose own GPU code faulted: with that process's CUDA error beside the Xid,
the root cause is the application's fault (confirmed), not a GPU error whose consequences the CUDA errors are; a
memory Xid (48) keeps the GPU reading."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

JOURNAL = """\
2025-05-26T09:00:00+00:00 gpu-12 systemd[1]: Started sglang-ds.service - SGLang DeepSeek.
2025-05-26T09:00:02+00:00 gpu-12 python3[7000]: [2025-05-26 09:00:02] server_args=ServerArgs(model_path='/models/DeepSeek-V3', tp_size=8, port=30000, mem_fraction_static=0.85)
2025-05-26T09:08:40+00:00 gpu-12 python3[7000]: [2025-05-26 09:08:40] The server is fired up and ready to roll!
2025-05-26T11:42:17+00:00 gpu-12 kernel: NVRM: Xid (PCI:0000:3b:00): 31, pid=7104, name=sglang::schedul, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1d_2c3fe000. Fault is of type FAULT_PDE ACCESS_TYPE_READ
2025-05-26T11:42:17+00:00 gpu-12 python3[7000]: [2025-05-26 11:42:17 TP2] Scheduler hit an exception: Traceback (most recent call last):
2025-05-26T11:42:17+00:00 gpu-12 python3[7000]:   File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 2405, in run_scheduler_process
2025-05-26T11:42:17+00:00 gpu-12 python3[7000]:     scheduler.event_loop_overlap()
2025-05-26T11:42:17+00:00 gpu-12 python3[7000]: RuntimeError: CUDA error: an illegal memory access was encountered
2025-05-26T11:42:17+00:00 gpu-12 python3[7000]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
2025-05-26T11:42:17+00:00 gpu-12 python3[7000]: For debugging consider passing CUDA_LAUNCH_BLOCKING=1
2025-05-26T11:42:17+00:00 gpu-12 python3[7000]: [2025-05-26 11:42:17] Received sigquit from a child process. It usually means the child failed.
2025-05-26T11:42:18+00:00 gpu-12 systemd[1]: sglang-ds.service: Main process exited, code=killed, status=9/KILL
2025-05-26T11:42:18+00:00 gpu-12 systemd[1]: sglang-ds.service: Failed with result 'signal'.
"""


def _incidents(tmp: Path, text: str) -> tuple[list[str], str]:
    (tmp / "journal.log").write_text(text)
    store = ["--store", str(tmp / "store")]
    r = CliRunner().invoke(main, [*store, "ingest", str(tmp / "journal.log")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, [*store, "incidents"])
    lines = [ln.split("\t")[3] + " | " + ln.split("\t")[4] for ln in r.output.splitlines() if "\t" in ln]
    report = CliRunner().invoke(main, [*store, "report", "--incident", "2025-05-26"]).output
    return lines, report


def test_an_mmu_fault_beside_the_process_cuda_error_is_the_applications(tmp_path: Path) -> None:
    lines, report = _incidents(tmp_path, JOURNAL)
    assert lines == ["confirmed | CUDA error: an illegal memory access was encountered (Xid 31 on GPU 0000:3b:00: an "
                     "application fault)"]
    assert ("The driver logged Xid 31 on GPU 0000:3b:00 (process sglang::schedul, pid 7104): GPU memory page fault"
            in report)
    assert "this is the application's fault, not the GPU's" in report
    assert "CUDA_LAUNCH_BLOCKING=1" in report


def test_a_double_bit_ecc_error_stays_the_gpus(tmp_path: Path) -> None:
    text = (JOURNAL.replace("31, pid=7104, name=sglang::schedul, Ch 00000008, intr 10000000. MMU Fault: ENGINE "
                            "GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1d_2c3fe000. Fault is of type FAULT_PDE "
                            "ACCESS_TYPE_READ", "48, pid=7104, name=sglang::schedul, An uncorrectable double bit error "
                            "(DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.")
            .replace("an illegal memory access was encountered", "uncorrectable ECC error encountered"))
    lines, report = _incidents(tmp_path, text)
    assert lines == ["likely | GPU 0000:3b:00: Xid 48"]
    assert "application's fault" not in report
