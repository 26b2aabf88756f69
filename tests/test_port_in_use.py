"""A server that cannot listen on its port because another process holds it (errno 98, EADDRINUSE): uvicorn's
`[Errno 98] error while attempting to bind on address` in SGLang's log, torch.distributed's TCPStore that cannot
listen on the rendezvous port, and the unit's exit that follows, told as that error's consequence."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main
from helpers import cli_incidents, cli_ingest

BIND = ("[2025-05-26 09:14:02] ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): "
        "address already in use")
JOURNAL = f"""\
2025-05-26T09:13:20+00:00 gpu-12 systemd[1]: Started sglang.service - SGLang server.
2025-05-26T09:14:01+00:00 gpu-12 python3[5120]: [2025-05-26 09:14:01] INFO:     Started server process [5120]
2025-05-26T09:14:02+00:00 gpu-12 python3[5120]: {BIND}
2025-05-26T09:14:03+00:00 gpu-12 systemd[1]: sglang.service: Main process exited, code=exited, status=1/FAILURE
2025-05-26T09:14:03+00:00 gpu-12 systemd[1]: sglang.service: Failed with result 'exit-code'.
"""
TORCHRUN = """\
[2025-06-03 08:02:11,120] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS environment variable to 1
Traceback (most recent call last):
  File "/opt/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py", line 55, in next_rendezvous
    self._store = TCPStore(  # type: ignore[call-arg]
RuntimeError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use
"""


def test_a_unit_that_exits_because_its_port_is_taken(tmp_path: Path) -> None:
    [inc] = cli_incidents(cli_ingest(tmp_path, {"journal.log": JOURNAL}))
    root = inc["root_cause"]
    # the unit's exit is bound to the error before it in the same unit; the port's story is told in that conclusion
    assert (root["rule"], root["confidence"], root["kind"]) == ("exit.after_error", "likely", "port_in_use")
    assert inc["headline"] == ("sglang.service exited after port 30000 already in use: the server could not listen "
                               "on its HTTP port")
    assert ("Port 30000 was already in use, so the server could not listen on its HTTP port: another process listens "
            "on the server's HTTP port: after a restart most often the server's own previous instance") in root["statement"]
    assert {(s["kind"], s["explained_by"]) for s in inc["symptoms"]} == {("service_exited", "exit.after_error"),
                                                                         ("service_failed", "exit.after_error")}
    busy = next(e for e in inc["events"] if e["kind"] == "port_in_use")
    assert (busy["unit"], busy["line"], busy["fields"]["port"], busy["fields"]["address"]) == (
        "sglang.service", 3, 30000, "0.0.0.0")


def test_a_server_log_alone_shows_the_cause_directly(tmp_path: Path) -> None:
    store = cli_ingest(tmp_path, {"sglang.log": BIND + "\n"})
    [inc] = cli_incidents(store)
    assert (inc["root_cause"]["rule"], inc["root_cause"]["confidence"]) == ("net.port_in_use", "confirmed")
    report = CliRunner().invoke(main, [*store, "report", "--incident", "2025-05-26"]).output
    assert report.startswith("# port 30000 already in use: the server could not listen on its HTTP port\n")
    assert "ss -ltnp 'sport = :30000'" in report


def test_torchrun_cannot_listen_on_its_rendezvous_port(tmp_path: Path) -> None:
    [inc] = cli_incidents(cli_ingest(tmp_path, {"train.log": TORCHRUN}))
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"]) == ("net.port_in_use", "confirmed")
    assert inc["headline"].startswith("port 29500 already in use: torch.distributed's rendezvous store")
    assert "another job on this host with the same default (torchrun's and SGLang's 29500" in root["statement"]
    # the traceback that carries the error is its consequence, not a second cause
    assert [(s["kind"], s["explained_by"]) for s in inc["symptoms"]] == [("python_traceback", "net.port_in_use")]


def test_a_bind_error_that_is_not_errno_98_is_not_a_busy_port(tmp_path: Path) -> None:
    line = ("[2025-05-26 09:14:02] ERROR:    [Errno 99] error while attempting to bind on address ('10.0.0.9', 30000): "
            "cannot assign requested address\n")
    store = cli_ingest(tmp_path, {"sglang.log": line})
    # no rule matches the line (errno 99 is another error): `events`, as grep, answers an empty list with exit 1
    r = CliRunner().invoke(main, [*store, "events", "--kind", "port_in_use", "--json"])
    assert (r.exit_code, json.loads(r.stdout)) == (1, [])
