"""A GPU older than a feature the server was asked for needs: vLLM's bfloat16 check, its quantization method's
minimum capability, FlashAttention 2 on a pre-Ampere GPU. The check names the capability it needs; the conclusion
says the GPU is not at fault and what to change (not the build, as for a GPU newer than the wheels)."""

from __future__ import annotations

from pathlib import Path

from helpers import cli_incidents, cli_ingest

_J = "2025-08-11T11:20:{s:02d}+00:00 gpu-v100 {who}: {msg}"
CORE = "ERROR 08-11 11:20:04 [core.py:396] "
JOURNAL = [
    ("systemd[1]", 0, "Started vllm.service - vLLM server."),
    ("vllm[3101]", 2, "INFO 08-11 11:20:02 [api_server.py:1043] vLLM API server version 0.8.5"),
    ("vllm[3101]", 4, CORE + "EngineCore failed to start."),
    ("vllm[3101]", 4, CORE + "Traceback (most recent call last):"),
    ("vllm[3101]", 4, CORE + '  File "/usr/local/lib/python3.12/dist-packages/vllm/platforms/cuda.py", line 412, in '
                             "check_if_supports_dtype"),
    ("vllm[3101]", 4, CORE + "    raise ValueError("),
    ("vllm[3101]", 4, CORE + "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
                             "Your Tesla V100-SXM2-16GB GPU has compute capability 7.0. You can use float16 instead by "
                             "explicitly setting the `dtype` flag in CLI, for example: --dtype=half."),
    ("systemd[1]", 5, "vllm.service: Main process exited, code=exited, status=1/FAILURE"),
]


def _incidents(tmp: Path, name: str, text: str) -> list[dict]:
    return cli_incidents(cli_ingest(tmp, {name: text}))


def test_vllm_asked_for_bfloat16_on_a_v100(tmp_path: Path) -> None:
    [inc] = _incidents(tmp_path, "journal.log", "\n".join(_J.format(s=s, who=w, msg=m) for w, s, m in JOURNAL) + "\n")
    root = inc["root_cause"]
    assert (root["rule"], root["kind"]) == ("exit.after_error", "cuda_arch_unsupported")
    assert inc["headline"] == ("vllm.service exited after Tesla V100-SXM2-16GB (sm_70) cannot run bfloat16: it needs "
                               "sm_80 or newer")
    assert "(The GPU is sm_70, Volta: V100.)" in root["statement"]
    assert "the GPU is older than what bfloat16, the model's dtype needs" in root["statement"]
    assert "Run the model in float16 (`--dtype half`" in root["statement"]
    # not the reading of a GPU newer than the build (cuda.arch_unsupported: "Install wheels built for the GPU's SM")
    assert "Install wheels" not in root["statement"]


def test_a_quantization_method_the_gpu_is_too_old_for_in_an_untimed_line(tmp_path: Path) -> None:
    [inc] = _incidents(tmp_path, "q.log", "ValueError: The quantization method awq is not supported for the current "
                                          "GPU. Minimum capability: 75. Current capability: 70.\n")
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"]) == ("cuda.gpu_too_old", "confirmed")
    assert inc["headline"] == "the awq quantization needs sm_75 or newer; this GPU is sm_70"
    # the line has no stamp: said so, not mistaken for a kernel line's unanchored seconds
    assert "at an unknown time (its line carries no time stamp)" in root["statement"]


def test_flash_attention_on_a_t4(tmp_path: Path) -> None:
    [inc] = _incidents(tmp_path, "app.log", "2025-08-11 11:20:04,551 RuntimeError: FlashAttention only supports Ampere "
                                            "GPUs or newer.\n")
    assert inc["root_cause"]["rule"] == "cuda.gpu_too_old"
    assert inc["headline"] == "FlashAttention 2 needs an Ampere (sm_80) or newer GPU"
    assert '`attn_implementation="sdpa"`' in inc["root_cause"]["statement"]


def test_an_unanchored_kernel_line_keeps_its_own_wording(tmp_path: Path) -> None:
    dmesg = ("[ 5021.118000] Out of memory: Killed process 48213 (python3) total-vm:251658240kB, anon-rss:125829120kB, "
             "file-rss:65536kB, shmem-rss:0kB, UID:1000 pgtables:260000kB oom_score_adj:0\n")
    [inc] = _incidents(tmp_path, "dmesg.log", dmesg)
    assert "an unknown time (its kernel seconds are not anchored to the wall clock)" in inc["root_cause"]["statement"]
