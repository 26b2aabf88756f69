"""SGLang's CUDA graph capture failing at start-up (`Exception: Capture cuda graph failed: CUDA out of memory. ...`,
raised around the error the capture hit): the capture is the cause, told with its own knobs (--cuda-graph-max-bs,
--mem-fraction-static) and the launch arguments in force; the inner CUDA OOM, the traceback and the child's failure
are its parts."""

from __future__ import annotations

from pathlib import Path

from helpers import cli_incidents, cli_ingest, sglang_capture_failed

OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.06 GiB is "
       "free. Including non-PyTorch memory, this process has 78.04 GiB memory in use.")
LOG = sglang_capture_failed("model_path='/models/Qwen3-32B', tp_size=1, mem_fraction_static=0.92, "
                            "cuda_graph_max_bs=160, port=30000", f"torch.OutOfMemoryError: {OOM}", OOM)


def test_an_oom_while_capturing_cuda_graphs(tmp_path: Path) -> None:
    [inc] = cli_incidents(cli_ingest(tmp_path, {"sglang.log": LOG}))
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"], root["kind"]) == ("sglang.cuda_graph_capture", "confirmed",
                                                                "cuda_graph_capture_failed")
    assert inc["headline"] == "SGLang could not capture its CUDA graphs at start-up: CUDA out of memory"
    assert "up to --cuda-graph-max-bs (here 160)" in root["statement"]
    assert "--mem-fraction-static leaves (here 0.92)" in root["statement"]
    # the OOM's own figures are told too (its reading is folded in), and it is a part of the capture, not a cause
    assert "an allocation of 2.00 GiB failed (it found 1.06 GiB free of 79.11 GiB)" in root["statement"]
    assert {(s["kind"], s["explained_by"]) for s in inc["symptoms"]} >= {
        ("cuda_oom", "sglang.cuda_graph_capture"), ("child_failed", "sglang.cuda_graph_capture")}


def test_under_systemd_the_self_kill_is_told_with_it(tmp_path: Path) -> None:
    journal = "".join(f"2025-05-25T20:11:40+00:00 gpu1 python3[5120]: {line}\n" for line in LOG.splitlines() if line)
    journal += ("2025-05-25T20:11:41+00:00 gpu1 systemd[1]: sglang.service: Main process exited, code=killed, "
                "status=9/KILL\n")
    [inc] = cli_incidents(cli_ingest(tmp_path, {"journal.log": journal}))
    # SGLang's self-kill after the child's failure (status=9/KILL, no OOM kill) is told with the capture as its cause
    assert (inc["root_cause"]["rule"], inc["root_cause"]["kind"]) == ("sigkill.sglang_self_kill",
                                                                      "cuda_graph_capture_failed")
    assert inc["headline"] == ("sglang.service crashed: SGLang could not capture its CUDA graphs: CUDA out of memory "
                               "(SGLang then SIGKILLed itself)")
    assert "while capturing its CUDA graphs: CUDA out of memory" in inc["root_cause"]["statement"]
