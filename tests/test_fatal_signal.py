"""Python's faulthandler report of a fatal signal (`Fatal Python error: Segmentation fault`, each thread's stack, the
crashing one as "Current thread"): a crash in native code that no traceback shows is the cause of the server's end,
told with the innermost frame of the crashing thread where the dump is one record."""

from __future__ import annotations

from pathlib import Path

from helpers import cli_incidents, cli_ingest

DUMP = [
    "Fatal Python error: Segmentation fault",
    "",
    "Thread 0x00007f3a4dfff640 (most recent call first):",
    '  File "/usr/lib/python3.10/threading.py", line 324 in wait',
    "",
    "Current thread 0x00007f3b9a7fc640 (most recent call first):",
    '  File "/opt/sglang/python/sglang/srt/layers/attention/flashinfer_backend.py", line 412 in forward_decode',
    '  File "/opt/sglang/python/sglang/srt/model_executor/model_runner.py", line 1520 in forward',
    "",
    "Extension modules: numpy.core._multiarray_umath, torch._C, zmq.backend.cython.context (total: 96)",
]
SGLANG = ("[2025-05-25 20:16:58 TP0] Decode batch. #running-req: 12, #token: 20480, token usage: 0.10, cuda graph: True, "
          "gen throughput (token/s): 812.30, #queue-req: 0\n" + "\n".join(DUMP) + "\n"
          "[2025-05-25 20:17:01] Received sigquit from a child process. It usually means the child failed.\n")
JOURNAL = "".join(f"2025-05-25T20:16:58+00:00 gpu1 python3[5120]: {line}\n" for line in DUMP if line) + """\
2025-05-25T20:16:59+00:00 gpu1 python3[5120]: [2025-05-25 20:16:59] Received sigquit from a child process. It usually means the child failed.
2025-05-25T20:17:01+00:00 gpu1 systemd[1]: sglang.service: Main process exited, code=killed, status=9/KILL
2025-05-25T20:17:01+00:00 gpu1 systemd[1]: sglang.service: Failed with result 'signal'.
"""


def test_sglangs_child_crashed_in_native_code(tmp_path: Path) -> None:
    [inc] = cli_incidents(cli_ingest(tmp_path, {"sglang.log": SGLANG}))
    root = inc["root_cause"]
    assert (root["rule"], root["kind"]) == ("crash.child_error", "fatal_signal")
    assert inc["headline"] == ("SGLang crashed: Segmentation fault in native code (called from forward_decode, "
                               "/opt/sglang/python/sglang/srt/layers/attention/flashinfer_backend.py:412)")


def test_under_systemd_the_self_kill_is_told_with_it(tmp_path: Path) -> None:
    [inc] = cli_incidents(cli_ingest(tmp_path, {"journal.log": JOURNAL}))
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"], root["kind"]) == ("sigkill.sglang_self_kill", "confirmed", "fatal_signal")
    assert inc["headline"] == ("sglang.service crashed: Segmentation fault in native code (SGLang then SIGKILLed "
                               "itself)")
