"""An HGX box whose driver was upgraded without its NVIDIA fabric manager: after the reboot the fabric manager
refuses to start (`fabric manager NVIDIA GPU driver interface version X doesn't match with driver version Y`) and
every CUDA program fails with error 802 (`system not yet initialized`). One incident whose root cause is the fabric
manager, told with the upgrade; the CUDA error and the server's exit its consequences."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

JOURNAL = """\
2025-06-02T06:40:11+00:00 hgx-07 kernel: Linux version 6.8.0-60-generic (buildd@lcy02-amd64-098) (x86_64-linux-gnu-gcc-13 (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0, GNU ld (GNU Binutils for Ubuntu) 2.42) #63-Ubuntu SMP PREEMPT_DYNAMIC Tue Apr 15 19:04:15 UTC 2025
2025-06-02T06:40:31+00:00 hgx-07 kernel: nvidia-nvlink: Nvlink Core is being initialized, major device number 509
2025-06-02T06:40:31+00:00 hgx-07 kernel: NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.133.20  Fri Feb 28 05:18:23 UTC 2025
2025-06-02T06:40:36+00:00 hgx-07 systemd[1]: Starting nvidia-fabricmanager.service - NVIDIA fabric manager service...
2025-06-02T06:40:36+00:00 hgx-07 nvidia-fabricmanager-start.sh[2214]: Detected Pre-NVL5 system
2025-06-02T06:40:36+00:00 hgx-07 nv-fabricmanager[2231]: fabric manager NVIDIA GPU driver interface version 570.124.06 doesn't match with driver version 570.133.20. Please update with the matching NVIDIA driver package.
2025-06-02T06:40:36+00:00 hgx-07 nvidia-fabricmanager-start.sh[2214]: "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg" failed! Exit code: 1
2025-06-02T06:40:36+00:00 hgx-07 systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE
2025-06-02T06:40:36+00:00 hgx-07 systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'.
2025-06-02T06:40:36+00:00 hgx-07 systemd[1]: Failed to start nvidia-fabricmanager.service - NVIDIA fabric manager service.
2025-06-02T06:41:02+00:00 hgx-07 systemd[1]: Started sglang-qwen3.service - SGLang Qwen3-235B.
2025-06-02T06:41:19+00:00 hgx-07 python3[3120]: Traceback (most recent call last):
2025-06-02T06:41:19+00:00 hgx-07 python3[3120]:   File "/opt/sglang/lib/python3.12/site-packages/torch/cuda/__init__.py", line 372, in _lazy_init
2025-06-02T06:41:19+00:00 hgx-07 python3[3120]:     torch._C._cuda_init()
2025-06-02T06:41:19+00:00 hgx-07 python3[3120]: RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might have already set an error? Error 802: system not yet initialized
2025-06-02T06:41:20+00:00 hgx-07 systemd[1]: sglang-qwen3.service: Main process exited, code=exited, status=1/FAILURE
2025-06-02T06:41:20+00:00 hgx-07 systemd[1]: sglang-qwen3.service: Failed with result 'exit-code'.
"""
DPKG = """\
2025-06-01 06:25:01 startup archives unpack
2025-06-01 06:25:02 upgrade libnvidia-compute-570-server:amd64 570.124.06-0ubuntu0.24.04.1 570.133.20-0ubuntu0.24.04.1
2025-06-01 06:25:03 upgrade nvidia-driver-570-server:amd64 570.124.06-0ubuntu0.24.04.1 570.133.20-0ubuntu0.24.04.1
2025-06-01 06:25:05 upgrade nvidia-kernel-common-570-server:amd64 570.124.06-0ubuntu0.24.04.1 570.133.20-0ubuntu0.24.04.1
2025-06-01 06:25:40 status installed nvidia-driver-570-server:amd64 570.133.20-0ubuntu0.24.04.1
"""


def _run(tmp: Path, *args: str) -> str:
    r = CliRunner().invoke(main, ["--store", str(tmp / "store"), *args])
    assert r.exit_code == 0, r.output
    return r.output


def test_the_fabric_manager_left_behind_by_a_driver_upgrade(tmp_path: Path) -> None:
    (tmp_path / "journal.log").write_text(JOURNAL)
    (tmp_path / "dpkg.log").write_text(DPKG)
    _run(tmp_path, "ingest", str(tmp_path / "journal.log"), str(tmp_path / "dpkg.log"))
    assert _run(tmp_path, "incidents").splitlines() == [
        "2025-06-02-hgx-07-nvidia-fabricmanager\t2025-06-02 06:40:36 .. 06:41:20\thgx-07\tconfirmed\tNVIDIA fabric "
        "manager could not start: version 570.124.06, driver 570.133.20"]
    report = _run(tmp_path, "report", "--incident", "2025-06-02")
    root = report.split("**Root cause (confirmed: the logs show the cause directly).** ", 1)[1].split("\n", 1)[0]
    assert root.startswith("The NVIDIA fabric manager refused to start at 06:40:36: it is version 570.124.06 and the "
                           "loaded driver 570.133.20")
    assert "The driver's packages were upgraded at 2025-06-01 06:25:05 (dpkg: upgrade nvidia-kernel-common-570" in root
    assert "it stayed at 570.124.06" in root
    assert "CUDA failed to initialise with error 802 (`system not yet initialized`) at 06:41:19, 43 s later" in root
    # the server's exit is the CUDA error's, the CUDA error the fabric manager's: no other root
    assert "**Also, for `sglang-qwen3.service` (likely).**" in report
    assert "**Also, for `nvidia-fabricmanager.service`" not in report
    assert ("| `journal.log:6` |  | NVIDIA fabric manager 570.124.06 does not match the driver 570.133.20 | "
            "**root cause** |") in report


def test_the_fabric_managers_unit_failing_without_its_reason(tmp_path: Path) -> None:
    kept = [ln for ln in JOURNAL.splitlines() if "nv-fabricmanager[" not in ln]
    (tmp_path / "journal.log").write_text("".join(ln + "\n" for ln in kept))
    _run(tmp_path, "ingest", str(tmp_path / "journal.log"))
    out = _run(tmp_path, "incidents")
    assert out.startswith("2025-06-02-hgx-07-nvidia-fabricmanager\t")
    report = _run(tmp_path, "report", "--incident", "2025-06-02")
    assert "nvidia-fabricmanager.service failed at 06:40:36 (" in report
    assert ("journal.log:8`), and CUDA failed to initialise with error 802 (`system not yet initialized`) at 06:41:19, "
            "43 s later") in report
