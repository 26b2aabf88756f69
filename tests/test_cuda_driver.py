"""A CUDA that cannot start because of the driver, in PyTorch's own words for cudaErrorInsufficientDriver (35):
`The NVIDIA driver on your system is too old (found version 12080)` (a torch built for a newer CUDA than the
driver supports, after a `pip install` pulled one) and `Found no NVIDIA driver on your system`."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main
from helpers import cli_incidents, cli_ingest

TOO_OLD = ("RuntimeError: The NVIDIA driver on your system is too old (found version 12080). Please update your GPU "
           "driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx "
           "Alternatively, go to: https://pytorch.org to install a PyTorch version that has been compiled with your "
           "version of the CUDA driver.")
_J = "2025-07-14T10:02:{s:02d}+00:00 gpu-3 {who}: {msg}"
JOURNAL = [
    ("systemd[1]", 11, "Started vllm.service - vLLM OpenAI server."),
    ("vllm[7711]", 19, "INFO 07-14 10:02:19 [__init__.py:244] Automatically detected platform cuda."),
    ("vllm[7711]", 24, "Traceback (most recent call last):"),
    ("vllm[7711]", 24, '  File "/opt/vllm/lib/python3.12/site-packages/torch/cuda/__init__.py", line 372, in _lazy_init'),
    ("vllm[7711]", 24, "    torch._C._cuda_init()"),
    ("vllm[7711]", 24, TOO_OLD),
    ("systemd[1]", 25, "vllm.service: Main process exited, code=exited, status=1/FAILURE"),
    ("systemd[1]", 25, "vllm.service: Failed with result 'exit-code'."),
]


def test_a_server_whose_torch_needs_a_newer_driver(tmp_path: Path) -> None:
    store = cli_ingest(tmp_path, {"journal.log": "\n".join(_J.format(s=s, who=w, msg=m) for w, s, m in JOURNAL) + "\n"})
    [inc] = cli_incidents(store)
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"], root["kind"]) == ("exit.after_error", "likely", "cuda_init_failed")
    assert inc["headline"] == ("vllm.service exited after CUDA could not initialise: the NVIDIA driver is too old (it "
                               "supports CUDA 12.8 at most)")
    assert "failed with error 35 (CUDA driver version is insufficient for CUDA runtime version)" in root["statement"]
    assert {s["kind"] for s in inc["symptoms"] if s["explained_by"]} == {"python_traceback", "service_exited",
                                                                         "service_failed"}
    [event] = [e for e in inc["events"] if e["kind"] == "cuda_init_failed"]
    assert (event["rule"], event["fields"]["found"], event["fields"]["driver_cuda"]) == ("cuda.driver_too_old", 12080,
                                                                                         "12.8")
    report = CliRunner().invoke(main, [*store, "report", "--incident", "2025-07-14"]).output
    assert "the driver supports CUDA 12.8 at most, and this PyTorch was built for a newer CUDA" in report
    assert 'python -c "import torch; print(torch.__version__, torch.version.cuda)"' in report


def test_no_driver_at_all(tmp_path: Path) -> None:
    line = ("/opt/venv/lib/python3.10/site-packages/torch/cuda/__init__.py:138: UserWarning: CUDA initialization: "
            "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver "
            "from http://www.nvidia.com/Download/index.aspx (Triggered internally at  /pytorch/c10/cuda/"
            "CUDAFunctions.cpp:100.)\n")
    [inc] = cli_incidents(cli_ingest(tmp_path, {"server.log": "2025-07-14 10:02:24,118 " + line}))
    assert (inc["root_cause"]["rule"], inc["root_cause"]["confidence"]) == ("cuda.init_failed", "likely")
    assert inc["headline"] == "CUDA could not initialise: error 35 (no NVIDIA driver found)"
    assert "its kernel module is not loaded" in inc["root_cause"]["statement"]
