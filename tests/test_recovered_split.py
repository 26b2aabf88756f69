"""A server that failed, came back ready and served for minutes before failing otherwise: two incidents, not one
chain, though less than the clustering gap (15 min) apart. Each report names the other; the lines of one are not
the context of the other. The same failure again after a recovery stays one incident, said "twice"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.clustering import UP_S
from forensics.incidents import build_incidents
from forensics.store import Store

ARGS = ("server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tp_size=8, mem_fraction_static=0.8, "
        "port=30000)")
RESTART_ARGS = ARGS.replace("0.8", "0.9")    # restarted with other flags: a failure reads those in force before it


def _cuda_oom(at: str, gpu: int) -> list[str]:
    return [f"[2025-05-28 {at} TP{gpu}] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2374, in '
            "run_scheduler_process",
            "    scheduler.event_loop_overlap()",
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.29 GiB. GPU {gpu} has a total capacity of "
            "178.35 GiB of which 0.90 GiB is free. Process 108587 has 177.18 GiB memory in use.",
            "",
            f"[2025-05-28 {at}] Received sigquit from a child process. It usually means the child failed."]


def _nccl(at: str) -> list[str]:
    return [f"[rank5]:[E0528 {at}.907639473 ProcessGroupNCCL.cpp:632] [Rank 5] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=7324639, OpType=REDUCE_SCATTER, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
            "for 600062 milliseconds before timing out.",
            f"[2025-05-28 {at[:8]}] Received sigquit from a child process. It usually means the child failed."]


def _log(tmp: Path, second: list[str]) -> Path:
    lines = [f"[2025-05-28 12:20:00] {ARGS}", "[2025-05-28 12:20:05 TP0] Load weight begin. avail mem=77.89 GB",
             "[2025-05-28 12:20:30] The server is fired up and ready to roll!",
             "[2025-05-28 12:25:00 TP0] Decode batch. #running-req: 37, #token: 69708, token usage: 0.28, "
             "cuda graph: True, gen throughput (token/s): 1274.65, #queue-req: 13",
             *_cuda_oom("12:27:07", 5),
             f"[2025-05-28 12:28:18] {RESTART_ARGS}", "[2025-05-28 12:28:24 TP0] Load weight begin. avail mem=75.54 GB",
             "[2025-05-28 12:28:37] The server is fired up and ready to roll!",
             *second]
    p = tmp / "sglang.log"
    p.write_text("".join(x + "\n" for x in lines))
    return p


def _ingest(tmp: Path, second: list[str]) -> str:
    store = str(tmp / "store")
    r = CliRunner().invoke(main, ["--store", store, "ingest", "-q", str(_log(tmp, second))])
    assert r.exit_code == 0, r.output
    return store


def test_another_failure_after_the_server_recovered_is_another_incident(tmp_path: Path) -> None:
    store = _ingest(tmp_path, _nccl("12:33:45"))      # 5 min 8 s after the server was ready again
    incs = build_incidents(Store(store))
    assert [(i.id, i.headline) for i in incs] == [
        ("2025-05-28-sglang-log-cuda-oom", "CUDA out of memory (--mem-fraction-static 0.8, GPU 5)"),
        ("2025-05-28-sglang-log-nccl-timeout", "NCCL collective timed out on rank 5")]
    oom, nccl = incs
    # the CUDA OOM's lines are not the NCCL incident's context (nor a "cause" in its timeline)
    assert not [e for e in nccl.events if e.kind in ("cuda_oom", "scheduler_exception")], nccl.events
    assert {e.kind for e in nccl.events} >= {"nccl_timeout", "server_ready"}
    assert oom.followed_by is not None and oom.followed_by.incident == nccl.id
    assert nccl.follows is not None and nccl.follows.incident == oom.id
    assert nccl.follows.ready == "2025-05-28T12:28:37.000000Z" and nccl.follows.at == "2025-05-28T12:27:07.000000Z"
    out = tmp_path / "r.md"
    r = CliRunner().invoke(main, ["--store", store, "report", "--incident", nccl.id, "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert ("This began 6 min 38 s after incident `2025-05-28-sglang-log-cuda-oom` on the same host ended "
            "(12:27:07 UTC); the server was ready again at 12:28:37 UTC in between, so the two are told apart."
            ) in out.read_text()
    r = CliRunner().invoke(main, ["--store", store, "report", "--incident", oom.id, "--format", "json"])
    doc = json.loads(r.output)["incidents"][0]
    assert doc["followed_by"] == {"incident": nccl.id, "at": "2025-05-28T12:33:45.000000Z",
                                  "ready": "2025-05-28T12:28:37.000000Z"}
    assert doc["follows"] is None


@pytest.mark.parametrize("second, headline", [
    # failed again before it had served UP_S: one incident, the chain as before
    (_nccl("12:29:30"), "CUDA out of memory (--mem-fraction-static 0.8, GPU 5); then NCCL collective timed out on "
                        "rank 5"),
    # the same failure again after a recovery: one incident, twice
    (_cuda_oom("12:33:45", 6), "CUDA out of memory (--mem-fraction-static 0.8, GPU 5), twice"),
])
def test_one_incident(tmp_path: Path, second: list[str], headline: str) -> None:
    assert UP_S == 180.0
    incs = build_incidents(Store(_ingest(tmp_path, second)))
    assert [i.headline for i in incs] == [headline]
    assert incs[0].follows is None and incs[0].followed_by is None
    if "twice" in headline:   # the second OOM is read against the restart's flags, the first against the earlier
        first, again = [c for c in incs[0].conclusions if c.kind == "cuda_oom"]
        assert "(--mem-fraction-static 0.8)" in first.statement and "(--mem-fraction-static 0.9)" in again.statement


def test_an_sglang_logs_server_is_in_the_impact(tmp_path: Path) -> None:
    # no systemd unit names the server of a plain SGLang log: its own lines say when it started, was ready and went
    # down (`Received sigquit from a child process`: the launcher then kills the whole tree)
    store = _ingest(tmp_path, _nccl("12:33:45"))
    out = CliRunner().invoke(main, ["--store", store, "report", "--incident", "2025-05-28-sglang-log-cuda-oom"]).output
    # back when it was ready again (12:28:37), not when it started loading (12:28:24): the outage a user saw
    assert ("| `SGLang server (sglang.log)` | 12:27:07 UTC | SGLang: a child process failed (SIGQUIT to the launcher) "
            "| 12:28:37 UTC | 1 min 30 s |") in out, out
    assert ("- `SGLang server (sglang.log)`: started 12:20:05, ready 12:20:30 (25 s to load), down 12:27:07 after "
            "6 min 37 s up; started 12:28:24, ready 12:28:37 (13 s to load).") in out
    assert "1 service failed on `unknown host (sglang.log)`: `SGLang server (sglang.log)` at 12:27:07 UTC." in out
    doc = json.loads(CliRunner().invoke(main, ["--store", store, "report", "--incident", "2025-05-28-sglang-log-nccl",
                                               "--format", "json"]).output)["incidents"][0]
    assert [(x["unit"], x["down_at"], x["back_at"]) for x in doc["impact"]] == [
        ("SGLang server (sglang.log)", "2025-05-28T12:33:45.000000Z", None)]


def test_a_recurring_chain_is_named_once(tmp_path: Path) -> None:
    # a CUDA OOM on GPU 5, then (the server ready again 70 s before: not recovered) an NCCL timeout, and after a
    # recovery the same CUDA OOM on GPU 6: one incident, the OOM named once, twice
    second = [*_nccl("12:29:47"), "[2025-05-28 12:30:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-"
              "Instruct', tp_size=8, mem_fraction_static=0.8, port=30000)",
              "[2025-05-28 12:30:20] The server is fired up and ready to roll!", *_cuda_oom("12:36:00", 6)]
    incs = build_incidents(Store(_ingest(tmp_path, second)))
    assert [i.headline for i in incs] == [
        "CUDA out of memory (--mem-fraction-static 0.8, GPU 5), twice; then NCCL collective timed out on rank 5"]
    # a later chain of one unit and kind is named once, by its first headline, whatever its figures
    from types import SimpleNamespace as NS

    from forensics.incidents import _then

    def head(kind: str, headline: str) -> NS:
        return NS(conclusion=NS(unit="x.service", kind=kind), headline=headline)

    root = head("nccl_timeout", "x.service crashed: NCCL")
    assert _then(root, [head("cuda_oom", "CUDA OOM (GPU 2)"), head("cuda_oom", "CUDA OOM (GPU 4)"),
                        head("cuda_oom", "CUDA OOM (GPU 2)")]) == ["CUDA OOM (GPU 2) (3 times)"]
