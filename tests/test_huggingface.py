"""A server that cannot fetch its model from the Hugging Face Hub (a gated repo without a token, a mistyped id, no
egress or the offline mode with an empty cache, the Hub's rate limit): the fetch's failure, read from the traceback's
last lines, is the root cause of the server's exit, with what it means and what to check."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

_J = "2025-05-26T09:00:{s:02d}+00:00 gpu-12 {who}: {msg}"
GATED = [
    ("systemd[1]", 0, "Started sglang.service - SGLang Llama 3.1 8B."),
    ("python3[7000]", 3, "[2025-05-26 09:00:03] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', "
                         "tp_size=1, port=30000)"),
    ("python3[7000]", 4, "Traceback (most recent call last):"),
    ("python3[7000]", 4, '  File "/opt/sglang/lib/python3.12/site-packages/transformers/utils/hub.py", line 479, in '
                         "cached_files"),
    ("python3[7000]", 4, "    raise OSError("),
    ("python3[7000]", 4, "OSError: You are trying to access a gated repo."),
    ("python3[7000]", 4, "Make sure to have access to it at https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct."),
    ("python3[7000]", 4, "401 Client Error. (Request ID: Root=1-683429a4-3b2b1f5e2c1d4e5f6a7b8c9d;1c2d3e4f)"),
    ("python3[7000]", 4, ""),
    ("python3[7000]", 4, "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/resolve/"
                         "main/config.json."),
    ("python3[7000]", 4, "Access to model meta-llama/Llama-3.1-8B-Instruct is restricted. You must have access to it "
                         "and be authenticated to access it. Please log in."),
    ("systemd[1]", 5, "sglang.service: Main process exited, code=exited, status=1/FAILURE"),
    ("systemd[1]", 5, "sglang.service: Failed with result 'exit-code'."),
]

OFFLINE = """\
[2025-05-26 09:10:02] server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B-Instruct', tp_size=4, port=30000)
Traceback (most recent call last):
  File "/opt/sglang/lib/python3.12/site-packages/huggingface_hub/file_download.py", line 1484, in _raise_on_head_call_error
    raise LocalEntryNotFoundError(
huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder for the specified revision on the local disk and outgoing traffic has been disabled. To enable repo look-ups and downloads online, pass 'local_files_only=False' as input.
"""


def _run(tmp: Path, name: str, text: str) -> tuple[list[str], str]:
    (tmp / name).write_text(text)
    store = ["--store", str(tmp / "store")]
    r = CliRunner().invoke(main, [*store, "ingest", str(tmp / name)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, [*store, "incidents"])
    heads = [ln.split("\t")[3] + " | " + ln.split("\t")[4] for ln in r.output.splitlines() if "\t" in ln]
    return heads, CliRunner().invoke(main, [*store, "report", "--incident", "2025-05-26"]).output


def test_a_gated_model_without_a_token_ends_the_server(tmp_path: Path) -> None:
    text = "\n".join(_J.format(s=s, who=who, msg=msg) for who, s, msg in GATED) + "\n"
    heads, report = _run(tmp_path, "journal.log", text)
    assert heads == ["likely | sglang.service exited after model could not be fetched from the Hugging Face Hub "
                     "(meta-llama/Llama-3.1-8B-Instruct): gated repo, no token (401)"]
    summary = report.split("## Impact")[0]
    assert ("It could not fetch its model (meta-llama/Llama-3.1-8B-Instruct) from the Hugging Face Hub: gated repo, no "
            "token (401), that is, the repo is gated (its licence must be accepted on the Hub) and the request carried "
            "no token: `HF_TOKEN` is not set in the server's environment") in summary
    # the traceback that carries it is its consequence, not a cause of its own
    key = report.split("### OSError: You are trying to access a gated repo.", 1)[1].split("###", 1)[0]
    assert "Explained by:" in key
    assert 'systemctl show sglang.service -p Environment | tr " " "\\n" | grep -E "^HF_|TRANSFORMERS_OFFLINE"' in report


def test_the_offline_mode_with_the_model_not_in_the_cache(tmp_path: Path) -> None:
    heads, report = _run(tmp_path, "sglang.log", OFFLINE)
    assert heads == ["confirmed | model could not be fetched from the Hugging Face Hub: offline mode, the model not in "
                     "the cache"]
    assert "the Hub is switched off (`HF_HUB_OFFLINE=1` or `TRANSFORMERS_OFFLINE=1`)" in report
