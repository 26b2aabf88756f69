"""A unit whose program systemd cannot even start (`Failed at step EXEC spawning /path: No such file or directory`,
status 203/EXEC): the cause, with the exit, the unit's failure, its restarts and the start limit its consequences."""

from __future__ import annotations

from pathlib import Path

from helpers import cli_incidents, cli_ingest

PY = "/opt/sglang/venv/bin/python3"


def _loop(attempts: int) -> str:
    lines, t = [], 1
    for i in range(attempts):
        ts = f"2025-09-03T08:00:{t:02d}+00:00 gpu-2"
        lines += [f"{ts} systemd[1]: Started sglang.service - SGLang server.",
                  f"{ts} (python3)[{9120 + i}]: sglang.service: Failed to locate executable {PY}: No such file or "
                  "directory",
                  f"{ts} (python3)[{9120 + i}]: sglang.service: Failed at step EXEC spawning {PY}: No such file or "
                  "directory",
                  f"{ts} systemd[1]: sglang.service: Main process exited, code=exited, status=203/EXEC",
                  f"{ts} systemd[1]: sglang.service: Failed with result 'exit-code'."]
        t += 5
        ts = f"2025-09-03T08:00:{t:02d}+00:00 gpu-2"
        lines.append(f"{ts} systemd[1]: sglang.service: Scheduled restart job, restart counter is at {i + 1}."
                     if i < attempts - 1 else f"{ts} systemd[1]: sglang.service: Start request repeated too quickly.")
    return "\n".join(lines) + "\n"


def test_a_removed_virtualenv_and_the_restart_loop_it_makes(tmp_path: Path) -> None:
    [inc] = cli_incidents(cli_ingest(tmp_path, {"journal.log": _loop(5)}))
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"], root["kind"]) == ("systemd.spawn_failed", "confirmed", "exec_failed")
    assert inc["headline"] == f"sglang.service could not start: step EXEC failed for {PY} (No such file or directory)"
    assert "its path does not exist (a virtualenv moved or rebuilt" in root["statement"]
    assert "(4 more attempts in the logs)" in root["statement"]
    # every exit, failure, restart and the start limit are its consequences: nothing is left unexplained
    assert {s["kind"] for s in inc["symptoms"]} == {"exec_failed", "service_exited", "service_failed",
                                                    "restart_scheduled", "start_limit_hit"}
    assert all(s["explained_by"] == "systemd.spawn_failed" for s in inc["symptoms"])


def test_a_missing_user(tmp_path: Path) -> None:
    journal = ("2025-09-03T08:00:01+00:00 gpu-2 systemd[4410]: vllm.service: Failed at step USER spawning "
               "/usr/local/bin/vllm: No such process\n"
               "2025-09-03T08:00:01+00:00 gpu-2 systemd[1]: vllm.service: Main process exited, code=exited, "
               "status=217/USER\n")
    [inc] = cli_incidents(cli_ingest(tmp_path, {"journal.log": journal}))
    assert inc["root_cause"]["rule"] == "systemd.spawn_failed"
    assert "the account User= names does not exist on this host" in inc["root_cause"]["statement"]
