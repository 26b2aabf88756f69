"""A server that dies writing to a full disk: the incident names the full filesystem (`No space left on device`,
errno 28), not only the exception's type, and the actions say how to find what fills it."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

JOURNAL = """\
2025-05-27T08:00:00+00:00 gpu-3 systemd[1]: Started sglang-llama.service - SGLang Llama.
2025-05-27T08:00:02+00:00 gpu-3 python3[9100]: [2025-05-27 08:00:02] server_args=ServerArgs(model_path='meta-llama/Llama-3.3-70B-Instruct', tp_size=4, port=30000)
2025-05-27T08:00:09+00:00 gpu-3 python3[9100]: [2025-05-27 08:00:09 TP0] Load weight begin. avail mem=78.71 GB
2025-05-27T08:03:41+00:00 gpu-3 python3[9100]: [2025-05-27 08:03:41 TP0] Scheduler hit an exception: Traceback (most recent call last):
2025-05-27T08:03:41+00:00 gpu-3 python3[9100]:   File "/opt/sglang/lib/python3.12/site-packages/huggingface_hub/file_download.py", line 1734, in _download_to_tmp_and_move
2025-05-27T08:03:41+00:00 gpu-3 python3[9100]:     http_get(
2025-05-27T08:03:41+00:00 gpu-3 python3[9100]:   File "/opt/sglang/lib/python3.12/site-packages/huggingface_hub/file_download.py", line 476, in http_get
2025-05-27T08:03:41+00:00 gpu-3 python3[9100]:     temp_file.write(chunk)
2025-05-27T08:03:41+00:00 gpu-3 python3[9100]: OSError: [Errno 28] No space left on device
2025-05-27T08:03:41+00:00 gpu-3 python3[9100]: [2025-05-27 08:03:41] Received sigquit from a child process. It usually means the child failed.
2025-05-27T08:03:42+00:00 gpu-3 systemd[1]: sglang-llama.service: Main process exited, code=killed, status=9/KILL
2025-05-27T08:03:42+00:00 gpu-3 systemd[1]: sglang-llama.service: Failed with result 'signal'.
"""


def test_a_model_download_on_a_full_disk(tmp_path: Path) -> None:
    (tmp_path / "journal.log").write_text(JOURNAL)
    store = ["--store", str(tmp_path / "store")]
    assert CliRunner().invoke(main, [*store, "ingest", str(tmp_path / "journal.log")]).exit_code == 0
    out = CliRunner().invoke(main, [*store, "incidents"]).output
    assert out.split("\t")[3:] == ["confirmed", "sglang-llama.service crashed: no space left on device (SGLang then "
                                   "SIGKILLed itself)\n"]
    report = CliRunner().invoke(main, [*store, "report", "--incident", "2025-05-27"]).output
    assert "A write failed at 08:03:41 because its filesystem was full (`No space left on device`, ENOSPC;" in report
    actions = report.split("## Recommended actions", 1)[1]
    assert actions.index("`df -h; df -i`") < actions.index("journalctl -b -u sglang-llama.service")
    # the scheduler's own line names the exception and its message
    assert "SGLang Scheduler crashed: OSError: \\[Errno 28\\] No space left on device" in report  # (Markdown escapes [ ])
