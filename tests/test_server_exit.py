"""An inference server's unit that exits non-zero is an incident whatever the error before it (a Python exception
no rule names, or none at all); another unit exiting non-zero is not one by itself (units that fail routinely)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main

HEAD = "2025-05-25T20:19:40+00:00 dflash-train systemd[1]: Started sglang-k26.service - SGLang Kimi K2.6.\n"
TRACE = """\
2025-05-25T20:19:52+00:00 dflash-train python3[51877]: Traceback (most recent call last):
2025-05-25T20:19:52+00:00 dflash-train python3[51877]:   File "/root/venv/lib/python3.12/site-packages/sglang/srt/configs/model_config.py", line 112, in __init__
2025-05-25T20:19:52+00:00 dflash-train python3[51877]:     raise ValueError(f"Unsupported model type {self.hf_config.model_type}")
2025-05-25T20:19:52+00:00 dflash-train python3[51877]: ValueError: Unsupported model type kimi_k26
"""


def _exit(unit: str, t: str, status: str = "1/FAILURE") -> str:
    return (f"2025-05-25T{t}+00:00 dflash-train systemd[1]: {unit}: Main process exited, code=exited, status={status}\n"
            f"2025-05-25T{t}+00:00 dflash-train systemd[1]: {unit}: Failed with result 'exit-code'.\n")


def _incidents(tmp: Path, text: str) -> list[str]:
    (tmp / "journal.log").write_text(text)
    r = CliRunner().invoke(main, ["--store", str(tmp / "store"), "ingest", str(tmp / "journal.log")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["--store", str(tmp / "store"), "incidents"])
    return [ln.split("\t")[0] + " | " + ln.split("\t")[3] + " | " + ln.split("\t")[4] for ln in r.output.splitlines()
            if "\t" in ln]


def test_a_server_that_exits_after_an_exception_no_rule_names(tmp_path: Path) -> None:
    got = _incidents(tmp_path, HEAD + TRACE + _exit("sglang-k26.service", "20:19:53")
                     + _exit("fwupd-refresh.service", "20:20:01"))
    assert got == ["2025-05-25-dflash-train-sglang-k26 | likely | sglang-k26.service exited after ValueError: "
                   "Unsupported model type kimi_k26"]


def test_a_server_that_exits_with_nothing_before(tmp_path: Path) -> None:
    got = _incidents(tmp_path, HEAD + _exit("sglang-k26.service", "20:19:53"))
    assert got == ["2025-05-25-dflash-train-sglang-k26 | inconclusive | sglang-k26.service failed with result "
                   "'exit-code'"]


def test_other_units_exiting_are_no_incident_by_themselves(tmp_path: Path) -> None:
    assert _incidents(tmp_path, HEAD + TRACE + _exit("fwupd-refresh.service", "20:20:01")) == []


def test_a_traceback_minutes_before_is_not_tied(tmp_path: Path) -> None:
    # (another unit in the journal: its unit-less lines are not all taken to be one unit's, as a `journalctl -u`)
    late = TRACE.replace("20:19:52", "20:17:50")
    got = _incidents(tmp_path, HEAD + late + _exit("sglang-k26.service", "20:19:53")
                     + _exit("fwupd-refresh.service", "20:20:01"))
    assert got == ["2025-05-25-dflash-train-sglang-k26 | inconclusive | sglang-k26.service failed with result "
                   "'exit-code'"]
