"""A server in a crash loop: systemd restarts it, each start dies the same way before it is ready, and systemd
gives up (`Start request repeated too quickly`). The report tells one outage, from the first death to the end of
the logs (a restart that dies before it is ready does not bring the server back), the repeated cause once with
the times it recurred, and that systemd stopped restarting it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

OOM = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: " \
      "mem_fraction_static=0.95"


def _loop(starts: int = 5, ready_on_last: bool = False) -> str:
    t, pid, out = datetime(2025, 5, 28, 9, 0, 0), 4000, []

    def j(at: datetime, who: str, msg: str) -> None:
        out.append(f"{at:%Y-%m-%dT%H:%M:%S}+00:00 gpu-5 {who}: {msg}")

    for i in range(starts):
        j(t, "systemd[1]", "Started sglang-q.service - SGLang Qwen.")
        j(t + timedelta(seconds=2), f"python3[{pid}]", f"[2025-05-28 {t + timedelta(seconds=2):%H:%M:%S}] "
          "server_args=ServerArgs(model_path='/models/Qwen3-235B', tp_size=8, port=30000, mem_fraction_static=0.95)")
        e = t + timedelta(seconds=40)
        if ready_on_last and i == starts - 1:
            j(e, f"python3[{pid}]", f"[2025-05-28 {e:%H:%M:%S}] The server is fired up and ready to roll!")
            break
        for ln in ["Traceback (most recent call last):",
                   '  File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/model_executor/model_runner.py", '
                   "line 1183, in init_memory_pool", "    raise RuntimeError(", OOM]:
            j(e, f"python3[{pid}]", ln)
        j(e + timedelta(seconds=1), "systemd[1]",
          "sglang-q.service: Main process exited, code=exited, status=1/FAILURE")
        j(e + timedelta(seconds=1), "systemd[1]", "sglang-q.service: Failed with result 'exit-code'.")
        t = e + timedelta(seconds=11)
        if i < starts - 1 or ready_on_last:
            j(t, "systemd[1]", f"sglang-q.service: Scheduled restart job, restart counter is at {i + 1}.")
            j(t, "systemd[1]", "Stopped sglang-q.service - SGLang Qwen.")
        pid += 37
    if not ready_on_last:
        j(t, "systemd[1]", "sglang-q.service: Start request repeated too quickly.")
        j(t, "systemd[1]", "sglang-q.service: Failed with result 'start-limit-hit'.")
        j(t, "systemd[1]", "Failed to start sglang-q.service - SGLang Qwen.")
    return "\n".join(out) + "\n"


def _report(tmp: Path, text: str, fmt: str = "md") -> str:
    (tmp / "journal.log").write_text(text)
    store = ["--store", str(tmp / "store")]
    assert CliRunner().invoke(main, [*store, "ingest", str(tmp / "journal.log")]).exit_code == 0
    r = CliRunner().invoke(main, [*store, "report", "--incident", "2025-05-28", "--format", fmt])
    assert r.exit_code == 0, r.output
    return r.output


def test_a_crash_loop_is_one_outage_and_one_cause(tmp_path: Path) -> None:
    out = _report(tmp_path, _loop())
    summary = out.split("## Summary", 1)[1].split("## Impact", 1)[0]
    assert "`sglang-q.service` at 09:00:41 UTC, and on each of its 4 restarts." in summary
    assert "The same happened 4 more times: at 09:01:31, 09:02:22, 09:03:13 and 09:04:04." in summary
    assert "**Also" not in summary
    impact = out.split("## Impact", 1)[1].split("## Timeline", 1)[0]
    assert ("| `sglang-q.service` | 09:00:41 UTC | sglang-q.service: Main process exited with status 1 (FAILURE) | "
            "not within the logs | at least 3 min 34 s (until the logs end); restarted 4 times, down again before it "
            "was ready |") in impact
    assert impact.count("| `sglang-q.service` |") == 1
    assert ("then systemd stopped restarting it at 09:04:15 (start request repeated too quickly): it stays down until "
            "systemctl reset-failed sglang-q.service and a start.") in impact
    # the analysis keeps each death's evidence
    assert out.count("### Also: sglang-q.service") == 4


def test_a_loop_that_ends_ready_is_back_when_ready(tmp_path: Path) -> None:
    doc = json.loads(_report(tmp_path, _loop(3, ready_on_last=True), "json"))["incidents"][0]
    assert [(x["down_at"], x["back_at"], x["failed_restarts"]) for x in doc["impact"]] == [
        ("2025-05-28T09:00:41.000000Z", "2025-05-28T09:02:22.000000Z", 1)]


def test_a_server_back_after_a_long_load_is_back(tmp_path: Path) -> None:
    # the restart loads for 11 min 40 s, past the incident's context: the impact still sees it ready again
    lines = []
    for ln in _loop(2, ready_on_last=True).splitlines():
        if "ready to roll" in ln:
            ln = ln.replace("T09:01:31", "T09:12:31").replace(" 09:01:31]", " 09:12:31]")
        lines.append(ln)
    doc = json.loads(_report(tmp_path, "\n".join(lines) + "\n", "json"))["incidents"][0]
    assert [(x["down_at"], x["back_at"], x["failed_restarts"]) for x in doc["impact"]] == [
        ("2025-05-28T09:00:41.000000Z", "2025-05-28T09:12:31.000000Z", 0)]
