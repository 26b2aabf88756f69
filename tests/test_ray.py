"""vLLM with the Ray executor: Ray's memory monitor (not the kernel) kills a tensor-parallel worker when the node's
memory passes its threshold, and the engine dies with it. The kill is the root cause, the engine's fatal error its
consequence; host memory, not the GPU's."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

NODE = "351e406b196f66bb45eaad02a3b8b4725babfa8cc12949432f7ad7d8"
E = "ERROR 05-25 20:16:41 [core.py:396] "
VLLM = f"""\
INFO 05-25 20:10:05 [api_server.py:1043] vLLM API server version 0.8.5
INFO 05-25 20:16:30 [loggers.py:111] Engine 000: Avg prompt throughput: 812.4 tokens/s, Avg generation throughput: 95.1 tokens/s, Running: 12 reqs, Waiting: 0 reqs
INFO 05-25 20:16:40 [loggers.py:111] Engine 000: Avg prompt throughput: 790.0 tokens/s, Avg generation throughput: 93.2 tokens/s, Running: 12 reqs, Waiting: 0 reqs
(raylet) [2025-05-25 20:16:40,117 E 135782 135782] (raylet) node_manager.cc:3069: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: {NODE}, IP: 10.0.0.7) over the last time period. To see more information about the Workers killed on this node, use `ray logs raylet.out -ip 10.0.0.7`
{E}EngineCore encountered a fatal error.
{E}Traceback (most recent call last):
{E}  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 387, in run_engine_core
{E}    engine_core.run_busy_loop()
{E}  File "/usr/local/lib/python3.12/dist-packages/ray/_private/worker.py", line 2771, in get
{E}    raise value
{E}ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
{E}\tclass_name: RayWorkerWrapper
{E}\tpid: 48291
{E}\tip: 10.0.0.7
{E}The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running low on memory.
{E}Memory on the node (IP: 10.0.0.7, ID: {NODE}) where the task (actor ID: 0dab4ab45f6c947201afac6d01000000, name=RayWorkerWrapper.__init__, pid=48291, memory used=60.15GB) was running was 120.50GB / 125.80GB (0.957886), which exceeds the memory usage threshold of 0.95. Ray killed this worker (ID: 79a553ea91fe46f95e8384ddf8a8f0a01e3418a975ecd0af983c7bb2) because it was the most recently scheduled task; to see more information about memory usage on this node, use `ray logs raylet.out -ip 10.0.0.7`.
"""


def _run(tmp_path: Path, *args: str, code: int = 0) -> str:
    store = ["--store", str(tmp_path / "store")]
    if not (tmp_path / "store").exists():
        (tmp_path / "vllm.log").write_text(VLLM)
        r = CliRunner().invoke(main, [*store, "ingest", "--year", "2025", str(tmp_path / "vllm.log")])
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, [*store, *args])
    assert r.exit_code == code, r.output
    return r.output


def test_a_vllm_worker_killed_by_rays_memory_monitor(tmp_path: Path) -> None:
    head = _run(tmp_path, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["confirmed", "Ray's memory monitor killed RayWorkerWrapper.__init__ (pid 48291, 60.15GB): node "
                        "memory 120.50GB / 125.80GB, over its threshold 0.95"]
    report = _run(tmp_path, "report", "--incident", "2025-05-25")
    assert ("Ray's memory monitor, not the kernel, killed worker pid 48291 (RayWorkerWrapper.\\_\\_init\\_\\_, using "
            "60.15GB) at 20:16:41") in report
    assert ("fails after it (ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.). "
            "Host RAM, not GPU memory") in report
    # the raylet's summary and the engine's fatal error are its consequences
    assert "| ≈20:16:40 | `vllm.log:3-4` |  | raylet: 1 worker(s) killed due to memory pressure (OOM) on node 10.0.0.7 | symptom |" in report
    assert "| vLLM EngineCore encountered a fatal error: ray.exceptions.ActorDiedError | symptom |" in report
    assert "**Also" not in report
    assert "ray logs raylet.out -ip 10.0.0.7" in report
