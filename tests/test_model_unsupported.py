"""A model the installed release cannot load: transformers that does not know the checkpoint's model type, vLLM or
SGLang that does not implement its architecture. The server stops at start; the exit is told as its consequence."""

from __future__ import annotations

from pathlib import Path

from helpers import cli_incidents, cli_ingest

_J = "2025-09-02T16:40:{s:02d}+00:00 gpu-4 {who}: {msg}"
JOURNAL = [
    ("systemd[1]", 1, "Started sglang.service - SGLang server."),
    ("python3[8801]", 12, "[2025-09-02 16:40:12] server_args=ServerArgs(model_path='/models/Qwen3.5-32B', port=30000)"),
    ("python3[8801]", 12, "Traceback (most recent call last):"),
    ("python3[8801]", 12, '  File "/opt/sglang/lib/python3.11/site-packages/transformers/models/auto/'
                          'configuration_auto.py", line 1151, in from_pretrained'),
    ("python3[8801]", 12, "    raise ValueError("),
    ("python3[8801]", 12, "ValueError: The checkpoint you are trying to load has model type `qwen3_5` but Transformers "
                          "does not recognize this architecture. This could be because of an issue with the checkpoint, "
                          "or because your version of Transformers is out of date."),
    ("systemd[1]", 13, "sglang.service: Main process exited, code=exited, status=1/FAILURE"),
    ("systemd[1]", 13, "sglang.service: Failed with result 'exit-code'."),
]


def test_a_model_newer_than_the_installed_transformers(tmp_path: Path) -> None:
    journal = "\n".join(_J.format(s=s, who=w, msg=m) for w, s, m in JOURNAL) + "\n"
    [inc] = cli_incidents(cli_ingest(tmp_path, {"journal.log": journal}))
    root = inc["root_cause"]
    assert (root["rule"], root["kind"]) == ("exit.after_error", "model_unsupported")
    assert inc["headline"] == "sglang.service exited after transformers does not know the model type qwen3_5"
    assert "It could not load its model: transformers does not know the model type qwen3_5, that is, the installed " \
           "transformers predates the model" in root["statement"]
    assert {s["kind"] for s in inc["symptoms"] if s["explained_by"]} == {"python_traceback", "service_exited",
                                                                         "service_failed"}


def test_an_architecture_vllm_does_not_implement(tmp_path: Path) -> None:
    log = ("(APIServer pid=1) INFO 10-08 09:12:01 [api_server.py:1896] vLLM server version 0.6.3, serving model "
           "/models/dbrx\n(APIServer pid=1) ERROR 10-08 09:12:03 [engine.py:160] ValueError: Model architectures "
           "['DbrxForCausalLM'] are not supported for now. Supported architectures: ['AquilaModel', "
           "'LlamaForCausalLM']\n")
    [inc] = cli_incidents(cli_ingest(tmp_path, {"vllm.log": log}, "--year", "2025"))
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"]) == ("model.unsupported", "confirmed")
    assert inc["headline"] == "model not supported: the server release does not implement DbrxForCausalLM"
    assert "the installed server release does not implement the architecture its config.json names" in root["statement"]


def test_an_architecture_that_failed_to_be_inspected_is_another_error(tmp_path: Path) -> None:
    log = ("2025-10-08 09:12:03,118 ValueError: Model architectures ['Qwen3ForCausalLM'] failed to be inspected. "
           "Please check the logs for more details.\n")
    incidents = cli_incidents(cli_ingest(tmp_path, {"vllm.log": log}))
    assert all(i["root_cause"] is None or i["root_cause"]["kind"] != "model_unsupported" for i in incidents)
