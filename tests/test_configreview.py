"""Configuration review (flags, knowledge notes, memory arithmetic), the knowledge packs' validation, and the
environment fingerprint."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.configreview import (
    Hardware,
    KnowledgeError,
    arithmetic,
    enricher,
    flags_of,
    load_knowledge,
    normalize_sm,
    parse_command,
    parse_server_args,
    review_flags,
    tp_note,
)
from forensics.environment import fingerprint_records

KN = load_knowledge()
AR = ("/root/venv_sglang211/bin/python -m sglang.launch_server --model-path /root/models/Kimi-K2.6 --port 30001 "
      "--host 0.0.0.0 --tp-size 8 --mem-fraction-static 0.90 --context-length 32768 --max-running-requests 64 "
      "--disable-cuda-graph --attention-backend triton --trust-remote-code --grammar-backend none")


def test_parse_command() -> None:
    f = parse_command(AR)
    assert f["--tp-size"] == "8" and f["--mem-fraction-static"] == "0.90" and f["--disable-cuda-graph"] == "true"
    assert f["--trust-remote-code"] == "true" and f["--grammar-backend"] == "none"
    assert parse_command("python -m x --a=1 --b 'two words' --c") == {"--a": "1", "--b": "two words", "--c": "true"}
    assert parse_command("unbalanced 'quote --x 1") == {"--x": "1"}


def test_parse_server_args_both_forms() -> None:
    repr_form = ("[2025-05-25 20:19:41] server_args=ServerArgs(model_path='/m', tp_size=8, mem_fraction_static=0.9, "
                 "disable_cuda_graph=True, api_key=None, enable_dp_attention=False, json_model_override_args='{}')")
    f = parse_server_args(repr_form)
    assert f == {"--model-path": "/m", "--tp-size": "8", "--mem-fraction-static": "0.9", "--disable-cuda-graph": "true",
                 "--json-model-override-args": "{}"}
    dict_form = "server_args={'model_path': '/m', 'tp_size': 2, 'api_key': None}"
    assert parse_server_args(dict_form) == {"--model-path": "/m", "--tp-size": "2"}
    # fields.flags from the rule pack win; None and False are flags not given
    assert flags_of({"flags": {"--tp-size": "2", "--x": None, "--y": False, "--z": True}}, "") == \
        {"--tp-size": "2", "--z": "true"}


@pytest.mark.parametrize("line", [
    AR,
    "python -m sglang.launch_server --served-model-name a b --port 30000 --tp 2",   # a flag of several values
    "python -m x --offset -1 --scale=-2.5e-3 --debug",                                 # negative numbers are values
    "python -m x --chat-template '' --lora-paths",                                     # an empty value, a bare switch
    "[2025-05-25 20:19:41] server_args=ServerArgs(model_path='/m', tp_size=8, lora_paths=[], chat_template='', "
    "api_key=None, enable_dp_attention=False, disable_cuda_graph=True, json_model_override_args='{\"a\": 1}')",
    "server_args={'model_path': '/m', 'tp_size': 2, 'api_key': None, 'enable_metrics': True}",
])
def test_flags_parsed_from_the_message_are_those_the_rules_cast(line: str) -> None:
    """A launch configuration's flags are the same whether its rule cast them (`fields.flags`, `casts.cast_flags`)
    or the review parses them from the event (`flags_of` without them: a user pack's event, a command alone)."""
    from forensics.casts import cast_flags

    cast = flags_of({"flags": cast_flags(line.split("] ", 1)[-1])}, "")
    assert cast
    assert flags_of({}, line) == cast
    if "server_args=" not in line:
        assert flags_of({"command": line}, "") == cast


def _notes(command: str) -> dict[str, str]:
    return {f.name: f.note for f in review_flags(parse_command(command), KN)}


def test_review_notes() -> None:
    n = _notes(AR)
    assert n["--mem-fraction-static"].startswith("Aggressive: 0.90 of each GPU")
    assert "decode speed" in n["--disable-cuda-graph"]
    assert "common workaround" in n["--attention-backend"] and "--sampling-backend pytorch" in n["--attention-backend"]
    assert "Not set" in n["--sampling-backend"]                     # absent, and it matters here
    assert "no authentication" in n["--host"]
    spec = _notes(AR + " --speculative-algorithm EAGLE3 --speculative-draft-model-path /d")
    assert "more so with a speculative draft model" in spec["--mem-fraction-static"]
    calm = _notes("python -m sglang.launch_server --mem-fraction-static 0.80 --sampling-backend pytorch "
                  "--attention-backend triton")
    assert calm["--mem-fraction-static"] == ""
    assert "Sampling still" not in calm["--attention-backend"]
    assert "--sampling-backend" in calm and "avoids FlashInfer" in calm["--sampling-backend"]
    assert "--sampling-backend" not in _notes("python -m vllm.entrypoints.openai.api_server --port 8000")


def test_arithmetic_and_tp() -> None:
    flags = parse_command(AR)
    assert arithmetic(flags, 96, 8) == (
        "0.90 x 96 GB = 86.4 GB reserved per GPU (691.2 GB over 8 GPUs), 9.6 GB per GPU left for activations",)
    assert arithmetic(flags, None, 8) == ()
    spec = parse_command(AR + " --speculative-algorithm EAGLE3")
    assert arithmetic(spec, 96, 8)[0].endswith("left for activations and the draft model")
    assert "Matches the 8 GPUs seen" in tp_note(flags, Hardware(gpus_seen=8, gpus_from="8 TP ranks"))
    assert "but --tp-size is 8" in tp_note(flags, Hardware(gpus_seen=4, gpus_from="4 PCI devices"))


@pytest.mark.parametrize(("value", "sm"), [("compute_120a", "sm_120"), ("sm_120", "sm_120"), ("120a", "sm_120"),
                                          ("12.0", "sm_120"), ("SM90", "sm_90"), ("compute_90a", "sm_90"),
                                          ("8.6", "sm_86"), ("nonsense", None), (None, None)])
def test_normalize_sm(value: object, sm: str | None) -> None:
    assert normalize_sm(value) == sm


def test_enricher_derives_fields() -> None:
    enrich = enricher(KN)
    f = enrich("flashinfer_arch_unsupported", {"arch": "compute_120a"}, "")
    assert f["sm"] == "sm_120" and "RTX PRO 6000" in f["sm_gpus"] and f["min_cuda"] == "12.8"
    f = enrich("oom_kill", {"anon_rss_kb": 503316480, "constraint_name": "CONSTRAINT_NONE", "constraint": "global"}, "")
    assert f["anon_rss_gib"] == "480.0" and f["constraint_text"].startswith("global: the whole host")
    f = enrich("oom_kill", {"oom_memcg": "/system.slice/x.service", "cgroup": "/system.slice/x.service"}, "")
    assert f["constraint"] == "memcg" and "/system.slice/x.service" in f["constraint_text"]
    f = enrich("oom_kill", {}, "")
    assert "not shown in the ingested lines" in f["constraint_text"]
    # `Memory cgroup out of memory: Killed process ...` without the `oom-kill:constraint=` line: a cgroup limit,
    # but which cgroup the report does not say (the aside naming it is left out, not printed as `{cgroup}`)
    f = enrich("oom_kill", {"prefix": "Memory cgroup out of memory"}, "")
    assert f["constraint"] == "memcg" and f["constraint_text"].startswith("a memory cgroup limit: the cgroup")
    assert "{" not in f["constraint_text"]
    f = enrich("gpu_xid", {"xid": 79}, "")
    assert "fallen off the bus" in f["xid_meaning"]
    f = enrich("server_config", {"flags": {"--mem-fraction-static": "0.9"}}, "")
    assert f["mem_fraction_static"] == "0.9" and f["context_length"] == "(default)"


def test_knowledge_validation_collects_every_error(tmp_path: Path) -> None:
    (tmp_path / "k.yaml").write_text(
        "knowledge: bad\n"
        "sm_families:\n"
        "  sm_12: {architecture: X, gpus: Y}\n"
        "  sm_120: {architecture: X}\n"
        "gpus:\n"
        "  - {match: A, name: B, memroy_gb: 3}\n"
        "flags:\n"
        "  - flag: mem-fraction\n"
        "    notes:\n"
        "      - when: {abov: 0.8}\n"
        "        note: 'x {a.b}'\n"
        "oom_constraints: {galactic: x}\n")
    with pytest.raises(KnowledgeError) as ei:
        load_knowledge([tmp_path], builtin=False)
    text = str(ei.value)
    p = str(tmp_path / "k.yaml")
    assert f"{p}:3: sm_families: 'sm_12' must look like sm_120" not in text  # sm_12 is a valid pattern (2 digits)
    assert f"{p}:4: sm_families.sm_120 needs `architecture` and `gpus`" in text
    assert f"{p}:6: unknown key 'memroy_gb' in a gpu (did you mean 'memory_gb'?)" in text
    assert f"{p}:8: flag 'mem-fraction' must look like --some-flag" in text
    assert "unknown key 'abov'" in text and "did you mean 'above'" in text
    assert "placeholder {a.b} must be a plain name" in text
    assert "unknown key 'galactic' in oom_constraints" in text
    assert len(ei.value.errors) >= 6


def test_fingerprint_from_records() -> None:
    lines = [
        ("Linux version 6.8.0-60-generic (buildd@lcy02) (gcc 13.3.0) #63-Ubuntu SMP", "dmesg.log", 1),
        ("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release Build", "dmesg.log", 49),
        ("nvidia 0000:01:00.0: enabling device (0000 -> 0002)", "dmesg.log", 41),
        ("nvidia 0000:11:00.0: enabling device (0000 -> 0002)", "dmesg.log", 42),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition with CUDA capability sm_120 is not compatible", "s.log", 3),
        ("torch==2.7.1+cu128", "pip.txt", 1),
        ('  File "/root/venv/lib/python3.12/site-packages/flashinfer/jit/core.py", line 124', "s.log", 9),
        ("flashinfer-python 0.2.7.post1", "pip.txt", 2),
        ("sglang==0.4.9.post2", "pip.txt", 3),
        ("Cuda compilation tools, release 12.6, V12.6.85", "nvcc.txt", 4),
    ]
    df = pl.DataFrame({"message": [m for m, _, _ in lines], "path": [p for _, p, _ in lines],
                       "line": [n for _, _, n in lines]})
    fp = fingerprint_records(df, [], KN, "dflash-train")
    env = fp.as_dict()
    assert env["host"] == "dflash-train" and env["kernel"] == "6.8.0-60-generic" and env["driver"] == "575.57.08"
    assert env["gpu"] == "2 x NVIDIA RTX PRO 6000 Blackwell Server Edition (96 GB)"
    assert env["sm"] == "sm_120" and env["torch"] == "2.7.1+cu128" and env["cuda"] == "12.8 (PyTorch build)"
    assert env["flashinfer"] == "0.2.7.post1" and env["sglang"] == "0.4.9.post2" and env["python"] == "3.12"
    assert env["nvcc"] == "12.6"
    assert fp.hardware.memory_gb == 96 and fp.hardware.gpus_seen == 2
    assert dict(fp.sources)["driver"] == "dmesg.log:49"


SMI = """Sun May 25 20:30:02 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 575.57.08              Driver Version: 575.57.08      CUDA Version: 12.9     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|=========================================+========================+======================|
|   0  NVIDIA RTX PRO 6000 Blac...    On  |   00000000:18:00.0 Off |                  Off |
| 30%   34C    P8             21W /  600W |       0MiB /  97887MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+
|   1  NVIDIA RTX PRO 6000 Blac...    On  |   00000000:2A:00.0 Off |                  Off |
| 30%   33C    P8             19W /  600W |       0MiB /  97887MiB |      0%      Default |
+-----------------------------------------+------------------------+----------------------+"""


def test_fingerprint_from_an_nvidia_smi_paste() -> None:
    """nvidia-smi's table: the driver and CUDA from its header, the GPUs from their rows' bus ids, and the model
    from a name the table cut to its column (`NVIDIA RTX PRO 6000 Blac...`: one known GPU begins so). A cut name
    that several GPUs begin (`NVIDIA GeForce RTX 50...`) names none."""
    df = pl.DataFrame({"message": [SMI], "path": ["smi.txt"], "line": [1]})
    fp = fingerprint_records(df, [], KN, "h")
    env = fp.as_dict()
    assert env["gpu"] == "2 x NVIDIA RTX PRO 6000 Blackwell (96 GB)" and env["sm"] == "sm_120"
    assert env["driver"] == "575.57.08" and env["cuda"] == "12.9 (driver)"
    assert fp.hardware.gpus_seen == 2 and fp.hardware.memory_gb == 96
    assert KN.gpu("|   0  NVIDIA GeForce RTX 50...    On  |") is None
    assert KN.gpu("|   0  NVIDIA GeForce RTX 5090          On  |").name == "NVIDIA GeForce RTX 5090"


def test_fingerprint_infers_the_gpu_from_sm_and_free_memory() -> None:
    df = pl.DataFrame({"message": ["[2025-05-25 20:19:53 TP0] Load weight begin. avail mem=94.31 GB",
                                   "nvcc fatal   : Unsupported gpu architecture 'compute_120'"],
                       "path": ["s.log", "s.log"], "line": [45, 205]})

    class Ev:
        kind = "flashinfer_arch_unsupported"
        fields = {"sm": "sm_120"}
        path = "s.log"
        line = 162

    fp = fingerprint_records(df, [Ev()], KN, "h", ranks=["TP0", "TP7"])  # type: ignore[list-item]
    env = fp.as_dict()
    assert env["gpu"].startswith("8 x NVIDIA RTX PRO 6000 Blackwell (96 GB) (inferred")
    assert env["nvcc"] == "version not logged; it rejects compute_120, so older than CUDA 12.8"
    assert fp.hardware.memory_gb == 96


def _scan_by_line(records: pl.DataFrame, kn) -> tuple:  # noqa: ANN001
    """The reference: every line of every record, every pattern (the loop `environment._scan` replaces)."""
    from forensics.environment import _AVAIL, _NVCC_REJECTS, _PCI, _SMI_PCI, PATTERNS

    found: dict = {}
    pcis: dict = {}
    gpu_hits: list = []
    avail: list = []
    nvcc: dict = {}
    for message, path, line in records.select("message", "path", "line").iter_rows():
        where = f"{path}:{line}"
        for ln in (message or "").split("\n"):
            for key, rx, out in PATTERNS:
                m = rx.search(ln)
                if m:
                    found[key] = (out.format(m.group(1)), where)
            m = ((_PCI.search(ln) or _SMI_PCI.search(ln))
                 if ln.startswith("nvidia ") or "NVRM: " in ln or (ln.startswith("|") and "NVIDIA" in ln) else None)
            if m:
                pcis.setdefault(m.group(1).lower(), where)
            m = _AVAIL.search(ln) if "avail mem=" in ln else None
            if m:
                avail.append(float(m.group(1)))
            m = _NVCC_REJECTS.search(ln) if "Unsupported gpu architecture '" in ln else None
            if m:
                nvcc[m.group(1)] = where
            if ("NVIDIA" in ln or "RTX" in ln or "Tesla" in ln) and kn.gpu(ln) is not None:
                gpu_hits.append((ln, where))
    return found, pcis, gpu_hits, avail, nvcc


_PIECES = ["Linux version 6.8.0-60-generic", "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  575.57.08",
           "Driver Version: 570.1", "CUDA Version: 12.8", "Cuda compilation tools, release 12.6", "torch==2.7.1+cu128",
           "/usr/local/cuda-12.4/bin", "PyTorch version: 2.6.0", "FlashInfer 0.2.5", "TORCH 2.5.1",
           "~/.cache/flashinfer/0.2.7.post1/", "SGLang==0.4.9", "python3.12/site-packages/x", "capability sm_120",
           "PCIe-only GPUs", "nvidia 0000:01:00.0: probe", "NVRM: GPU at PCI:0000:41:00: GPU-1",
           "Load weight begin. avail mem=94.31 GB", "Unsupported gpu architecture 'compute_120'",
           "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 5090", "Tesla V100", "sglang 0.5.0 ünïcode torch 2.7.0",
           "İstanbul flashinfer 0.2.9", "plain", "", "\n", "\t",
           "sglang\x1f0.4.6", "torch-2.1.0", "flashinfer-python==0.2.3", "pytorch version: v2.4.0",
           "SGLang  Version  0.3.1", "torch-cu121", "/sglang/srt/managers/scheduler.py", "flashinfer-0.2",
           "torch\x0b2.2.2", "sglang=0.4.1",
           "|   0  NVIDIA RTX PRO 6000 Blac...    On  |   00000000:18:00.0 Off |                  Off |",
           "|   1  NVIDIA H100 80GB HBM3          On  |   00000001:2A:00.0 Off |                    0 |",
           "NVIDIA GeForce RTX 50... |"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from(_PIECES), max_size=4), st.sampled_from([" ", "\n", " | "]),
                          st.one_of(st.none(), st.sampled_from(["a.log", "b.log"])),
                          st.one_of(st.none(), st.integers(0, 99))), max_size=12))
def test_the_vectorised_scan_finds_what_the_line_loop_finds(rows: list) -> None:
    from forensics.environment import _scan

    df = pl.DataFrame({"message": [sep.join(parts) if parts else None for parts, sep, _, _ in rows],
                       "path": [p for _, _, p, _ in rows], "line": [n for _, _, _, n in rows]},
                      schema={"message": pl.String, "path": pl.String, "line": pl.Int64})
    assert _scan(df, KN) == _scan_by_line(df, KN)
