"""vLLM refuses to start when one request of --max-model-len does not fit in the KV cache it sized (the commonest
first-deployment failure: a model whose own maximum length is the default): its three wordings, read against the
launch arguments it logged, and told in the conclusion of the unit's exit."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main
from helpers import cli_incidents, cli_ingest

CORE = "(EngineCore_DP0 pid=413) ERROR 10-08 09:13:55 [core.py:708] "
VLLM = "\n".join([
    "(APIServer pid=1) INFO 10-08 09:12:01 [api_server.py:1896] vLLM server version 0.11.0, serving model "
    "/models/Qwen3-32B",
    "(APIServer pid=1) INFO 10-08 09:12:01 [utils.py:233] non-default args: {'model_tag': '/models/Qwen3-32B', "
    "'host': '0.0.0.0', 'model': '/models/Qwen3-32B', 'gpu_memory_utilization': 0.85}",
    "(EngineCore_DP0 pid=413) INFO 10-08 09:13:54 [gpu_worker.py:298] Available KV cache memory: 4.41 GiB",
    CORE + "EngineCore failed to start.",
    CORE + "Traceback (most recent call last):",
    CORE + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py", line 686, in '
           "check_enough_kv_cache_memory",
    CORE + "    raise ValueError(",
    CORE + "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is "
           "needed, which is larger than the available KV cache memory (4.41 GiB). Based on the available memory, the "
           "estimated maximum model length is 36128. Try increasing `gpu_memory_utilization` or decreasing "
           "`max_model_len` when initializing the engine.",
    "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
]) + "\n"


YEAR = ("--year", "2025")   # vLLM's stamps print no year


def test_a_vllm_log_read_against_its_launch_arguments(tmp_path: Path) -> None:
    store = cli_ingest(tmp_path, {"vllm.log": VLLM}, *YEAR)
    [inc] = cli_incidents(store)
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"], root["kind"]) == ("memory.vllm_kv_sizing", "confirmed", "mem_sizing_failed")
    assert inc["headline"] == ("vLLM could not start: KV cache too small for one request of 131072 tokens: 16.00 GiB "
                               "needed, 4.41 GiB available")
    assert "within --gpu-memory-utilization of each GPU's memory (here 0.85; 0.9 when the flag is not given)" in root[
        "statement"]
    # the launch arguments do not set --max-model-len: that aside is left out, and the estimate vLLM made is told
    assert "(here " not in root["statement"].split("refuses to start")[1]
    assert "(At this utilisation a --max-model-len of 36128 would fit.)" in root["statement"]
    # the engine core's death and its traceback are the refusal's consequences
    assert {(s["kind"], s["explained_by"]) for s in inc["symptoms"]} == {
        ("scheduler_exception", "memory.vllm_kv_sizing"), ("python_traceback", "memory.vllm_kv_sizing")}
    report = CliRunner().invoke(main, [*store, "report", "--incident", "2025-10-08"]).output
    assert "Explained by: KV cache could not be sized at start (confirmed)." in report


def test_the_unit_exit_it_causes(tmp_path: Path) -> None:
    journal = ["2025-10-08T09:11:58+00:00 gpu-7 systemd[1]: Started vllm.service - vLLM server."]
    journal += [f"2025-10-08T09:13:55+00:00 gpu-7 vllm[2200]: {line}" for line in VLLM.splitlines()]
    journal += ["2025-10-08T09:13:57+00:00 gpu-7 systemd[1]: vllm.service: Main process exited, code=exited, "
                "status=1/FAILURE"]
    [inc] = cli_incidents(cli_ingest(tmp_path, {"journal.log": "\n".join(journal) + "\n"}, *YEAR))
    assert inc["headline"] == ("vllm.service exited after KV cache too small for one request of 131072 tokens: "
                               "16.00 GiB needed, 4.41 GiB available")
    assert (inc["root_cause"]["rule"], inc["root_cause"]["kind"]) == ("exit.after_error", "mem_sizing_failed")
    assert "vLLM stopped at start-up at 09:13:55" in inc["root_cause"]["statement"]


def test_the_v0_engine_and_the_no_memory_wordings(tmp_path: Path) -> None:
    text = ("2025-10-08 09:13:55,118 ValueError: The model's max seq len (32768) is larger than the maximum number of "
            "tokens that can be stored in KV cache (20336). Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine.\n")
    [inc] = cli_incidents(cli_ingest(tmp_path, {"v0.log": text}, *YEAR))
    assert inc["root_cause"]["rule"] == "memory.vllm_kv_sizing"
    assert inc["headline"] == "vLLM could not start: KV cache too small for --max-model-len 32768: it holds 20336 tokens"
    # no launch arguments in the log: the flag's aside is left out, the rest stands
    assert "(here" not in inc["root_cause"]["statement"]
    text = ("2025-10-08 09:13:55,118 ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine.\n")
    [inc] = cli_incidents(cli_ingest(_sub(tmp_path), {"none.log": text}, *YEAR))
    assert inc["headline"] == "vLLM could not start: no GPU memory left for the KV cache"


def _sub(tmp: Path) -> Path:
    d = tmp / "second"
    d.mkdir()
    return d
