"""A pasted terminal session: the answers printed under a shell command that names one unit (`failed` from
`systemctl is-active`, a grepped `ExecStart=` line) are that unit's."""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.prompts import command_unit
from forensics.store import Store
from helpers import ingest_text, records


@pytest.mark.parametrize("command, unit", [
    ('$ ssh -o ConnectTimeout=5 root@10.1.2.200 "systemctl is-active sglang-k26.service; grep ExecStart '
     '/etc/systemd/system/sglang-k26.service" 2>&1', "sglang-k26.service"),
    ('$ ssh root@h "systemctl is-active x.service; journalctl -u x.service --no-pager -n 5 2>/dev/null" 2>&1',
     "x.service"),
    ("root@gpu1:~# systemctl --no-pager status sglang 2>/dev/null", "sglang.service"),
    ("ops@gpu1:/tmp$ journalctl --unit=vllm.service -n 50", "vllm.service"),
    ("$ systemctl is-active a.service b.service", None),          # two units: neither
    ("$ systemctl is-active a.service; cat /etc/systemd/system/b.service", None),
    ("$ until curl -sf http://10.1.2.200:30001/v1/models; do sleep 10; done", None),
])
def test_the_unit_a_command_names(command: str, unit: str | None) -> None:
    assert command_unit(command) == unit


SESSION = """\
$ ssh -o ConnectTimeout=5 root@10.1.2.200 "systemctl is-active sglang-k26-eagle3.service" 2>&1
failed
$ ssh -o ConnectTimeout=5 root@10.1.2.200 "systemctl start sglang-k26.service && systemctl is-active sglang-k26.service"
active
$ date -u
Sun May 25 20:29:15 UTC 2025
$ ssh -o ConnectTimeout=5 root@10.1.2.200 "systemctl is-active sglang-k26.service; grep ExecStart /etc/systemd/system/sglang-k26.service" 2>&1
failed
ExecStart=/root/venv/bin/python -m sglang.launch_server --model-path /root/models/Kimi-K2.6 --port 30001 --tp-size 8
$ systemctl is-active a.service b.service
failed
active
"""


def test_a_terminal_sessions_answers_take_the_unit_of_their_command(tmp_path: Path) -> None:
    store, _ = ingest_text(tmp_path, "terminal-session.txt", SESSION)
    recs = records(store).sort("line")
    assert dict(zip(recs["line"], recs["unit"])) == {
        1: None, 2: "sglang-k26-eagle3.service", 3: None, 4: "sglang-k26.service", 5: None, 6: None, 7: None,
        8: "sglang-k26.service", 9: "sglang-k26.service", 10: None, 11: None, 12: None}
    # `failed`: the unit's failed state (no time); the grepped ExecStart= line: the unit's launch configuration
    assert [(e["line"], e["kind"], e["unit"]) for e in _events(store)] == [
        (2, "service_failed", "sglang-k26-eagle3.service"), (8, "service_failed", "sglang-k26.service"),
        (9, "server_config", "sglang-k26.service"), (11, "service_failed", None)]


def _events(store: Store) -> list[dict]:
    return store.events().sort("line").select("line", "kind", "unit").collect().to_dicts()


def test_the_fill_follows_the_lines_whatever_the_rows_order() -> None:
    import polars as pl

    from forensics.prompts import prompt_units
    rows = [(3, "systemctl-is-active", "failed"), (1, "text", "$ systemctl is-active a.service"),
            (4, "text", "$ systemctl is-active b.service"), (2, "systemctl-is-active", "active"),
            (5, "systemctl-is-active", "failed")]
    recs = pl.DataFrame({"line": [r[0] for r in rows], "format": [r[1] for r in rows],
                         "message": [r[2] for r in rows], "unit": pl.Series([None] * 5, dtype=pl.String)})
    out = prompt_units(recs)
    assert out["line"].to_list() == [3, 1, 4, 2, 5]          # the rows as they came
    assert out["unit"].to_list() == ["a.service", None, None, "a.service", "b.service"]
