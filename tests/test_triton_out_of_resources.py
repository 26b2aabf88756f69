"""A Triton kernel whose block configuration needs more shared memory than the GPU allows a block (`OutOfResources:
out of resource: shared memory, Required: 147456, Hardware limit: 101376. ...`): the kernel, tuned for a larger GPU,
is the cause, told with the GPU class the limit belongs to; inside SGLang's CUDA graph capture it is not read as a
matter of memory (no --cuda-graph-max-bs or --mem-fraction-static advice)."""

from __future__ import annotations

from pathlib import Path

from helpers import cli_incidents, cli_ingest, sglang_capture_failed

OOR = ("out of resource: shared memory, Required: 147456, Hardware limit: 101376. Reducing block sizes or `num_stages` "
       "may help.")
CAPTURE = sglang_capture_failed(
    "model_path='/models/Qwen3-30B-A3B', tp_size=1, mem_fraction_static=0.85, cuda_graph_max_bs=48, port=30000",
    f"triton.runtime.errors.OutOfResources: {OOR}", OOR, times=("09:40:01", "09:41:02", "09:41:12", "09:41:13"),
    frames=['  File "/opt/sglang/python/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py", line 1020, in '
            'invoke_fused_moe_kernel',
            "    fused_moe_kernel[grid](",
            '  File "/usr/local/lib/python3.12/dist-packages/triton/compiler/compiler.py", line 483, in _init_handles',
            '    raise OutOfResources(self.metadata.shared, max_shared, "shared memory")'])

VLLM = "".join(f"2025-05-25T09:41:12+00:00 ws1 vllm[5120]: ERROR 05-25 09:41:12 [core.py:586] {line}\n" for line in [
    "EngineCore failed to start.",
    "Traceback (most recent call last):",
    '  File "/opt/vllm/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 577, in run_engine_core',
    "    engine_core = EngineCoreProc(*args, **kwargs)",
    '  File "/opt/vllm/lib/python3.12/site-packages/triton/compiler/compiler.py", line 483, in _init_handles',
    '    raise OutOfResources(self.metadata.shared, max_shared, "shared memory")',
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 81920, Hardware limit: 65536. "
    "Reducing block sizes or `num_stages` may help.",
]) + """\
2025-05-25T09:41:14+00:00 ws1 systemd[1]: vllm.service: Main process exited, code=exited, status=1/FAILURE
2025-05-25T09:41:14+00:00 ws1 systemd[1]: vllm.service: Failed with result 'exit-code'.
"""


def test_in_sglangs_cuda_graph_capture_the_kernel_is_the_cause(tmp_path: Path) -> None:
    [inc] = cli_incidents(cli_ingest(tmp_path, {"sglang.log": CAPTURE}))
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"], root["kind"]) == ("triton.out_of_resources", "confirmed",
                                                                "triton_out_of_resources")
    assert inc["headline"] == ("A Triton kernel too large for the GPU: 144.0 KiB of shared memory a block needed, "
                               "99.0 KiB allowed")
    assert "this GPU allows 101376 (99.0 KiB), the limit of an sm_86, sm_89 or sm_120 GPU (RTX 30xx" in root["statement"]
    # the capture is a part of it, and its memory advice (which cannot help) is not told
    assert ("cuda_graph_capture_failed", "triton.out_of_resources") in {
        (s["kind"], s["explained_by"]) for s in inc["symptoms"]}
    assert "--cuda-graph-max-bs" not in root["statement"] and "--mem-fraction-static" not in root["statement"]
    assert "a smaller batch or memory fraction does not" in root["statement"]


def test_a_units_exit_after_it(tmp_path: Path) -> None:
    [inc] = cli_incidents(cli_ingest(tmp_path, {"journal.log": VLLM}))
    root = inc["root_cause"]
    assert (root["rule"], root["kind"]) == ("exit.after_error", "triton_out_of_resources")
    assert inc["headline"] == ("vllm.service exited after a Triton kernel too large for the GPU: 80.0 KiB of shared "
                               "memory a block needed, 64.0 KiB allowed")
    assert "the limit of a Turing GPU (sm_75: T4, RTX 20xx, Quadro RTX)" in root["statement"]
