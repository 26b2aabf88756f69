"""A plain vLLM log names no unit: its own lines say when its server started, was ready and went down (the engine
core's fatal error, after which the API server shuts itself down), as for an SGLang log."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "formats" / "vllm.log"


def _store(tmp: Path, text: str) -> str:
    p = tmp / "vllm.log"
    p.write_text(text)
    store = str(tmp / "store")
    r = CliRunner().invoke(main, ["--store", store, "ingest", "-q", "--year", "2025", str(p)])
    assert r.exit_code == 0, r.output
    return store


def test_a_vllm_logs_server_is_in_the_impact(tmp_path: Path) -> None:
    store = _store(tmp_path, SAMPLE.read_text())
    out = CliRunner().invoke(main, ["--store", store, "report", "--incident", "2025-05-25"]).output
    assert ("| `vLLM server (vllm.log)` | 20:16:40 UTC | vLLM EngineCore encountered a fatal error: "
            "torch.OutOfMemoryError | not within the logs |") in out, out
    assert ("- `vLLM server (vllm.log)`: started 20:10:05, ready 20:11:52 (1 min 47 s to load), down 20:16:40 after "
            "4 min 48 s up.") in out
    assert "1 service failed on `unknown host (vllm.log)`: `vLLM server (vllm.log)` at 20:16:40 UTC." in out
    doc = json.loads(CliRunner().invoke(main, ["--store", store, "report", "--incident", "2025-05-25", "--format",
                                               "json"]).output)["incidents"][0]
    assert [(x["unit"], x["down_at"]) for x in doc["impact"]] == [("vLLM server (vllm.log)", "2025-05-25T20:16:40.000000Z")]


def test_a_workers_exception_alone_is_not_the_server_down(tmp_path: Path) -> None:
    # the worker's line without the engine core's fatal error (the log cut there): the server is not said down
    text = "".join(x for x in SAMPLE.read_text().splitlines(keepends=True)
                   if "[core.py:396]" not in x and "async_llm.py" not in x)
    store = _store(tmp_path, text)
    out = CliRunner().invoke(main, ["--store", store, "report", "--incident", "2025-05-25"]).output
    assert "vLLM server (vllm.log)" not in out and "No service went down in the logs of this incident." in out, out
