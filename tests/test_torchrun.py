"""A torchrun (torch.distributed.elastic) job whose worker fails: the agent's `failed (exitcode: N) local_rank: R
(pid: P) of binary: ...` line in each version's wording, PyTorch's glog-like logger prefix, and what ended the
worker (the kernel OOM killer naming its pid, a segfault, its own error before), with the launcher's ChildFailedError
and its unit's exit as consequences."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main
from forensics.parse import parse_text
from helpers import cli_ingest

_J = "2025-06-02T14:41:{s:02d}+00:00 gpu-node-07 {who}: {msg}"
TRAIN = [
    ("systemd[1]", 0, "Started train-llama.service - Llama fine-tuning (8 GPUs)."),
    ("torchrun[48200]", 52, "[2025-06-02 14:41:52,870] torch.distributed.elastic.multiprocessing.api: [WARNING] "
                            "Sending process 48211 closing signal SIGTERM"),
    ("torchrun[48200]", 53, "[2025-06-02 14:41:53,402] torch.distributed.elastic.multiprocessing.api: [ERROR] failed "
                            "(exitcode: -9) local_rank: 3 (pid: 48214) of binary: /opt/venv/bin/python3"),
    ("torchrun[48200]", 53, "Traceback (most recent call last):"),
    ("torchrun[48200]", 53, '  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/launcher/api.py", '
                            "line 268, in launch_agent"),
    ("torchrun[48200]", 53, "    raise ChildFailedError("),
    ("torchrun[48200]", 53, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "),
    ("torchrun[48200]", 53, "============================================================"),
    ("torchrun[48200]", 53, "train.py FAILED"),
    ("systemd[1]", 54, "train-llama.service: Main process exited, code=exited, status=1/FAILURE"),
    ("systemd[1]", 54, "train-llama.service: Failed with result 'exit-code'."),
]
DMESG = """\
2025-06-02T14:41:49,101200+00:00 pt_main_thread invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0
2025-06-02T14:41:49,388540+00:00 Out of memory: Killed process 48214 (pt_main_thread) total-vm:251658240kB, anon-rss:125829120kB, file-rss:65536kB, shmem-rss:0kB, UID:1000 pgtables:260000kB oom_score_adj:0
"""


def test_a_worker_killed_by_the_kernel_oom_killer(tmp_path: Path) -> None:
    journal = "\n".join(_J.format(s=s, who=who, msg=msg) for who, s, msg in TRAIN) + "\n"
    store = cli_ingest(tmp_path, {"journal.log": journal, "dmesg.log": DMESG})
    r = CliRunner().invoke(main, [*store, "incidents", "--json"])
    [inc] = json.loads(r.output)
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"], root["kind"]) == ("torchrun.worker_oom", "confirmed", "oom_kill")
    assert inc["headline"].startswith("torchrun worker (local rank 3, pid 48214) killed by the kernel OOM killer")
    assert "The kernel OOM killer killed pid 48214 (pt_main_thread) at 14:41:49" in root["statement"]
    # the worker's failure, the launcher's ChildFailedError and its unit's exit are all the OOM kill's consequences
    explained = {s["kind"] for s in inc["symptoms"] if s["explained_by"]}
    assert {"worker_failed", "python_traceback", "service_exited"} <= explained
    failed = next(e for e in inc["events"] if e["kind"] == "worker_failed")
    assert failed["fields"] == {"exitcode": -9, "signal": "KILL", "local_rank": 3, "pid": 48214,
                                "entrypoint": "/opt/venv/bin/python3", "meaning": failed["fields"]["meaning"],
                                "signal_name": "SIGKILL"}
    assert failed["fields"]["meaning"].startswith("SIGKILL, which cannot be caught or handled")


def test_a_plain_torchrun_log_alone_suspects_an_oom_kill_and_names_the_job(tmp_path: Path) -> None:
    text = ("[2025-06-02 14:41:53,402] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) "
            "local_rank: 3 (pid: 48214) of binary: /opt/venv/bin/python3\n")
    store = cli_ingest(tmp_path, {"train.log": text})
    report = CliRunner().invoke(main, [*store, "report", "--incident", "2025-06-02"]).output
    assert report.startswith("# torchrun worker (local rank 3, pid 48214) killed by SIGKILL: OOM kill suspected, not "
                             "confirmed")
    assert "possible" in report.split("## Impact")[0]
    assert "| `torchrun job (train.log)` | 14:41:53.402 UTC |" in report
    assert 'dmesg -T | grep -i -E "killed process|oom-kill|invoked oom-killer"' in report


def test_a_worker_that_failed_after_its_own_cuda_oom(tmp_path: Path) -> None:
    """A worker's CUDA out-of-memory error (exit code 1) is the cause; the agent's report is told in its conclusion."""
    lines = [
        ("python3[48214]", 50, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
                               "total capacity of 79.19 GiB of which 100.00 MiB is free. Including non-PyTorch memory, "
                               "this process has 79.08 GiB memory in use."),
        ("torchrun[48200]", 53, "[2025-06-02 14:41:53,402] torch.distributed.elastic.multiprocessing.api: [ERROR] "
                                "failed (exitcode: 1) local_rank: 3 (pid: 48214) of binary: /opt/venv/bin/python3"),
    ]
    journal = "\n".join(_J.format(s=s, who=who, msg=msg) for who, s, msg in lines) + "\n"
    store = cli_ingest(tmp_path, {"journal.log": journal})
    [inc] = json.loads(CliRunner().invoke(main, [*store, "incidents", "--json"]).output)
    assert inc["root_cause"]["kind"] == "cuda_oom"
    failed = next(s for s in inc["symptoms"] if s["kind"] == "worker_failed")
    assert failed["explained_by"]
    assert "It ended torchrun's worker of local rank 3 (pid 48214, exit code 1)" in json.dumps(inc)


def test_pytorch_python_loggers_glog_prefix_is_read_as_glog() -> None:
    """torch._logging prints `E1223 05:18:02.971000 PID path/to/api.py:882] msg`: glog's prefix with the module's
    path. The traceback and ChildFailedError's summary after it belong to its record."""
    text = ("W0602 14:41:52.870000 48200 site-packages/torch/distributed/elastic/multiprocessing/api.py:897] Sending "
            "process 48211 closing signal SIGTERM\n"
            "E0602 14:41:53.402000 48200 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] failed "
            "(exitcode: -11) local_rank: 0 (pid: 48214) of binary: /opt/venv/bin/python3\n"
            "Traceback (most recent call last):\n"
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
            "Root Cause (first observed failure):\n")
    recs = parse_text(text, year=2025).sort("line")
    assert recs["format"].to_list() == ["glog", "glog"]
    assert recs["ident"].to_list() == ["api.py:897", "api.py:869"]
    assert recs["pid"].to_list() == [48200, 48200]
    assert recs["line_end"].to_list() == [1, 5]
    assert recs["ts"][1].isoformat() == "2025-06-02T14:41:53.402000+00:00"
