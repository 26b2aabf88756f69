"""The NVIDIA driver's packages upgraded under the loaded kernel module (unattended upgrades): the next start of
an SGLang server fails to initialise CUDA (error 803), the kernel logs `NVRM: API mismatch`, and dpkg.log holds the
upgrade of the day before. One incident whose root cause is the mismatch, told with the upgrade; the CUDA error alone
(a plain SGLang log) is read by its code."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

JOURNAL = """\
2025-05-25T20:19:40+00:00 dflash-train systemd[1]: Started sglang-k26.service - SGLang Kimi K2.6 (autoregressive).
2025-05-25T20:19:52+00:00 dflash-train kernel: NVRM: API mismatch: the client has the version 570.133.20, but
                                               NVRM: this kernel module has the version 570.124.06.  Please
                                               NVRM: make sure that this kernel module and all NVIDIA driver
                                               NVRM: components have the same version.
2025-05-25T20:19:52+00:00 dflash-train python3[51877]: Traceback (most recent call last):
2025-05-25T20:19:52+00:00 dflash-train python3[51877]:   File "/root/venv/lib/python3.12/site-packages/torch/cuda/__init__.py", line 372, in _lazy_init
2025-05-25T20:19:52+00:00 dflash-train python3[51877]:     torch._C._cuda_init()
2025-05-25T20:19:52+00:00 dflash-train python3[51877]: RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might have already set an error? Error 803: system has unsupported display driver / cuda driver combination
2025-05-25T20:19:53+00:00 dflash-train systemd[1]: sglang-k26.service: Main process exited, code=exited, status=1/FAILURE
2025-05-25T20:19:53+00:00 dflash-train systemd[1]: sglang-k26.service: Failed with result 'exit-code'.
"""
DPKG = """\
2025-05-24 06:25:01 startup archives unpack
2025-05-24 06:25:02 upgrade libnvidia-compute-570:amd64 570.124.06-0ubuntu1 570.133.20-0ubuntu1
2025-05-24 06:25:02 status half-configured libnvidia-compute-570:amd64 570.124.06-0ubuntu1
2025-05-24 06:25:03 upgrade nvidia-driver-570:amd64 570.124.06-0ubuntu1 570.133.20-0ubuntu1
2025-05-24 06:25:05 upgrade libc6:amd64 2.39-0ubuntu8.3 2.39-0ubuntu8.4
2025-05-24 06:25:40 status installed nvidia-driver-570:amd64 570.133.20-0ubuntu1
"""


def _run(tmp: Path, *args: str) -> str:
    r = CliRunner().invoke(main, ["--store", str(tmp / "store"), *args])
    assert r.exit_code == 0, r.output
    return r.output


def test_a_driver_upgraded_under_the_loaded_module(tmp_path: Path) -> None:
    (tmp_path / "journal.log").write_text(JOURNAL)
    (tmp_path / "dpkg.log").write_text(DPKG)
    _run(tmp_path, "ingest", str(tmp_path / "journal.log"), str(tmp_path / "dpkg.log"))
    out = _run(tmp_path, "incidents")
    assert out.splitlines() == [
        "2025-05-25-dflash-train-sglang-k26\t2025-05-25 20:19:52 .. 20:19:53\tdflash-train\tconfirmed\tNVIDIA driver "
        "libraries do not match the loaded kernel module (libraries 570.133.20, module 570.124.06)"]
    events = _run(tmp_path, "events", "--kind", "package_changed")
    assert "dpkg: upgrade nvidia-driver-570 570.124.06-0ubuntu1 to 570.133.20-0ubuntu1" in events
    assert "libc6" not in events and "status installed" not in events
    report = _run(tmp_path, "report", "--incident", "2025-05-25")
    root = report.split("**Root cause (confirmed: the logs show the cause directly).** ", 1)[1].split("\n", 1)[0]
    assert root.startswith("The NVIDIA driver's user-space libraries a process loaded at 20:19:52 (version 570.133.20) "
                           "do not match the kernel module loaded in the running kernel (version 570.124.06).")
    assert ("The driver's packages were upgraded at 2025-05-24 06:25:03 (dpkg: upgrade nvidia-driver-570 "
            "570.124.06-0ubuntu1 to 570.133.20-0ubuntu1, ") in root
    assert "37 h 54 min before the mismatch" in root and "(no reboot)" in root
    # the CUDA error (the exit's cause) and the exit follow it, the upgrade is a context row of the timeline
    assert ("| 2025-05-25 20:19:52 | `journal.log:6-9` | `sglang-k26.service` | CUDA could not initialise: error 803, "
            "system has unsupported display driver / cuda driver combination | cause |") in report, report
    assert "| 2025-05-25 20:19:53 | `journal.log:10` | `sglang-k26.service` | sglang-k26.service: Main process exited" \
           " with status 1 (FAILURE) | symptom |" in report
    assert "| ≈2025-05-24 06:25:03 | `dpkg.log:4` |  | dpkg: upgrade nvidia-driver-570" in report
    # the kernel's line is there: no pointer to it as what "would confirm" the CUDA error's reading
    assert "which would confirm it" not in report


def test_cuda_error_803_alone_is_read_by_its_code(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    log.write_text("[2025-05-25 20:19:41] server_args=ServerArgs(model_path='/root/models/Kimi-K2.6', tp_size=8, "
                   "port=30001)\n" + "\n".join(JOURNAL.splitlines()[5:9]).replace(
                       "2025-05-25T20:19:52+00:00 dflash-train python3[51877]: ", "") + "\n")
    _run(tmp_path, "ingest", str(log))
    out = _run(tmp_path, "incidents")
    assert out.endswith("\tlikely\tCUDA could not initialise: error 803 (system has unsupported display driver / cuda "
                        "driver combination)\n"), out
    report = _run(tmp_path, "report", "--incident", "2025-05-25")
    assert ("so no GPU work could start in the process (error 803 means: the driver's user-space libraries do not "
            "match the loaded kernel module: the driver packages were upgraded without a reboot). The driver's own "
            "account is in the kernel log at that moment (`NVRM:` lines), which would confirm it.") in report
