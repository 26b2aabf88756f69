"""What an incident shows of the lines around it that nothing ties to it: a crash-looping unit of the host is not
blamed on an SGLang child's error, `Started x.service.` names its unit, and a kubelet's probe failures for other
pods are one timeline row that says whether they are the host's background or a burst."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main
from forensics.incidents import build_incidents
from forensics.pipeline import IngestOptions, ingest
from forensics.store import Store

T0 = datetime(2025, 5, 26, 8, 0, 0, tzinfo=timezone.utc)
CRASH = T0 + timedelta(hours=4)          # 12:00:00


def _line(t: datetime, ident: str, msg: str) -> str:
    return f"{t.strftime('%Y-%m-%dT%H:%M:%S')}+00:00 gpu-a07 {ident}: {msg}"


def _probe(t: datetime, i: int) -> str:
    return _line(t, "kubelet[3322]", f'I0526 {t:%H:%M:%S}.939429    3322 prober.go:107] "Probe failed" '
                 f'probeType="Readiness" pod="inference/router-{i % 7}abc-x{i % 5}" podUID="d45241ec-8c78" '
                 f'containerName="router" probeResult="failure" output="Get \\"http://10.3.98.96:8080/healthz\\": '
                 'context deadline exceeded"')


def _crash(unit: str, late_unit: str, exit_after: float = 1) -> list[tuple[datetime, str]]:
    c = CRASH
    end = c + timedelta(seconds=exit_after)
    py = "python3[45286]"
    return [
        (c, _line(c, py, "[rank0]:[E0526 12:00:00.852732124 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught "
                  "collective operation timeout: WorkNCCL(SeqNum=3185486, OpType=ALLREDUCE, NumelIn=33554432, "
                  "NumelOut=33554432, Timeout(ms)=600000) ran for 600045 milliseconds before timing out.")),
        (c, _line(c, py, "[2025-05-26 12:00:00] Received sigquit from a child process. It usually means the child "
                  "failed.")),
        (end, _line(end, "systemd[1]", f"{unit}: Main process exited, code=exited, status=1/FAILURE")),
        (end, _line(end, "systemd[1]", f"{unit}: Failed with result 'exit-code'.")),
        (c + timedelta(seconds=20), _line(c + timedelta(seconds=20), "systemd[1]", "Started phpsessionclean.service.")),
        (c + timedelta(seconds=39), _line(c + timedelta(seconds=39), "systemd[1]",
                                          f"{late_unit}: Main process exited, code=exited, status=1/FAILURE")),
        (c + timedelta(seconds=39), _line(c + timedelta(seconds=39), "systemd[1]",
                                          f"{late_unit}: Failed with result 'exit-code'.")),
    ]


def _journal(tmp: Path, *, unit: str = "sglang-qwen25-72b.service", background: bool = True) -> Store:
    lines = _crash(unit, "nfs-idmapd.service")
    if background:   # a probe every 25 s for 8 hours
        lines += [(T0 + timedelta(seconds=25 * i), _probe(T0 + timedelta(seconds=25 * i), i)) for i in range(1152)]
    else:            # a burst of 30 in the 10 minutes before the crash, one an hour otherwise
        lines += [(CRASH - timedelta(seconds=20 * i), _probe(CRASH - timedelta(seconds=20 * i), i)) for i in range(1, 31)]
        lines += [(T0 + timedelta(hours=h), _probe(T0 + timedelta(hours=h), h)) for h in range(8) if h != 4]
    lines.sort(key=lambda x: x[0])
    p = tmp / "journal.log"
    p.write_text("".join(text + "\n" for _, text in lines))
    store = Store(tmp / "store")
    ingest(store, [str(p)], IngestOptions())
    return store


def _only(store: Store):  # noqa: ANN202
    incs = [i for i in build_incidents(store) if i.start and i.start.startswith("2025-05-26T12")]
    assert len(incs) == 1, [i.id for i in incs]
    return incs[0]


def test_a_unit_exiting_39_s_after_an_sglang_childs_error_is_not_blamed_on_it(tmp_path: Path) -> None:
    inc = _only(_journal(tmp_path))
    assert inc.root_cause is not None and inc.root_cause.rule == "exit.sglang_child_error_host"
    assert inc.root_cause.unit == "sglang-qwen25-72b.service"
    assert "nfs-idmapd" not in inc.headline and "which the logs show runs SGLang" in inc.root_cause.statement
    assert not [c for c in inc.conclusions if c.unit == "nfs-idmapd.service" and c.kind == "nccl_timeout"]


def test_a_unit_not_named_for_sglang_is_tied_only_when_it_ends_within_seconds(tmp_path: Path) -> None:
    inc = _only(_journal(tmp_path, unit="inference.service"))
    assert inc.root_cause is not None and inc.root_cause.rule == "exit.sglang_child_error_near"
    assert inc.root_cause.confidence.value == "possible" and inc.root_cause.unit == "inference.service"
    assert "possibly crashed" in inc.headline and "nfs-idmapd" not in inc.headline


def test_started_unit_without_description_names_its_unit(tmp_path: Path) -> None:
    store = _journal(tmp_path)
    r = CliRunner().invoke(main, ["--store", str(store.path), "events", "--json", "--kind", "service_started"])
    assert r.exit_code == 0, r.output
    (ev,) = json.loads(r.output)
    assert ev["rule"] == "systemd.started_unit" and ev["unit"] == "phpsessionclean.service"
    assert ev["title"] == "Started phpsessionclean.service"
    # another unit's start is not context of this incident
    assert not [e for e in _only(store).events if e.unit == "phpsessionclean.service"]


def test_background_probe_failures_are_one_row_that_says_so(tmp_path: Path) -> None:
    store = _journal(tmp_path)
    inc = _only(store)
    (rep,) = inc.repeats
    probes = [e for e in inc.events if e.rule == "kubelet.probe_failed"]
    assert rep.rule == "kubelet.probe_failed" and rep.count == len(probes) >= 40
    assert rep.event_ids == tuple(e.id for e in probes)
    assert rep.ratio is not None and 0.5 <= rep.ratio < 2
    r = CliRunner().invoke(main, ["--store", str(store.path), "report", "--incident", inc.id])
    assert r.exit_code == 0, r.output
    rows = [x for x in r.output.splitlines() if "Readiness probe failed" in x and x.startswith("| ")]
    timeline = [x for x in rows if "kubelet.probe" in x]
    assert len(timeline) == 1, rows
    assert f"and {rep.count - 1} more kubelet.probe\\_failed lines like it until 12:" in timeline[0]
    assert "as often as in the 6 h around the window (the host's background)" in timeline[0]
    assert not [x for x in r.output.splitlines() if x.startswith("### Readiness probe")]   # not a key line either
    r = CliRunner().invoke(main, ["--store", str(store.path), "report", "--incident", inc.id, "--format", "json"])
    doc = json.loads(r.output)["incidents"][0]
    assert doc["repeats"][0]["count"] == rep.count and doc["repeats"][0]["around_seconds"] == 6 * 3600
    assert len([e for e in doc["events"] if e["rule"] == "kubelet.probe_failed"]) == rep.count   # all still there
    row = [t for t in doc["timeline"] if t["kind"] == "health_check_failed"]
    assert len(row) == 1 and row[0]["event_ids"] == list(rep.event_ids)


def test_a_burst_of_probe_failures_is_one_row_that_says_it_is_a_burst(tmp_path: Path) -> None:
    store = _journal(tmp_path, background=False)
    (rep,) = _only(store).repeats
    assert rep.count == 30 and rep.ratio is not None and rep.ratio > 10
    r = CliRunner().invoke(main, ["--store", str(store.path), "report", "--incident", _only(store).id])
    (row,) = [x for x in r.output.splitlines() if "kubelet.probe" in x and x.startswith("| ")]
    # the host's lines end at 15:00, so the hours around are those before the window and the 2 h 54 min after it
    assert f"{rep.ratio:.1f}x as often as in the 5 h 54 min around the window; no conclusion ties them" in row
    assert rep.ratio > 50


def test_a_unit_down_twice_is_named_once_in_the_summary_and_its_runs_listed_once(tmp_path: Path) -> None:
    c = CRASH
    msgs = [(0, "systemd[1]", "Started sglang.service - SGLang server."),
            (10, "kernel", "Out of memory: Killed process 41650 (python3) total-vm:500000000kB, anon-rss:440000000kB, "
                           "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:900000kB oom_score_adj:0"),
            (10, "systemd[1]", "sglang.service: A process of this unit has been killed by the OOM killer."),
            (10, "systemd[1]", "sglang.service: Main process exited, code=killed, status=9/KILL"),
            (10, "systemd[1]", "sglang.service: Failed with result 'oom-kill'."),
            (15, "systemd[1]", "Started sglang.service - SGLang server."),
            (70, "kernel", "Out of memory: Killed process 41700 (python3) total-vm:500000000kB, anon-rss:440000000kB, "
                           "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:900000kB oom_score_adj:0"),
            (70, "systemd[1]", "sglang.service: A process of this unit has been killed by the OOM killer."),
            (70, "systemd[1]", "sglang.service: Main process exited, code=killed, status=9/KILL"),
            (70, "systemd[1]", "sglang.service: Failed with result 'oom-kill'."),
            (80, "systemd[1]", "Started sglang.service - SGLang server.")]
    p = tmp_path / "journal.log"
    p.write_text("".join(_line(c + timedelta(seconds=dt), ident, m) + "\n" for dt, ident, m in msgs))
    store = Store(tmp_path / "store")
    ingest(store, [str(p)], IngestOptions())
    (inc,) = build_incidents(store)
    r = CliRunner().invoke(main, ["--store", str(store.path), "report", "--incident", inc.id])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert ("On 2025-05-26, 1 service failed on `gpu-a07`: `sglang.service` at 12:00:10 UTC and 12:01:10 UTC."
            in lines), [x for x in lines if x.startswith("On ")]
    runs = [x for x in lines if x.startswith("- `sglang.service`: started")]
    assert runs == ["- `sglang.service`: started 12:00:00, down 12:00:10; started 12:00:15, down 12:01:10; "
                    "started 12:01:20."], runs
    assert len([x for x in lines if x.startswith("| `sglang.service` |")]) == 2


def _two_causes(tmp_path: Path, nccl_at: str) -> list:
    from test_incidents import store_from_timeline
    tl = tmp_path / "two_causes.yaml"
    tl.write_text(
        "description: One SGLang log (no unit, no host) crashes on a CUDA OOM, restarts, then on an NCCL timeout.\n"
        "events:\n"
        "  - {at: '12:27:07', kind: cuda_oom, path: sglang.log, fields: {gpu: 5, tried_bytes: 6753853440,"
        " free_bytes: 966367641, total_bytes: 191503351808}}\n"
        "  - {at: '12:27:07', kind: child_failed, path: sglang.log}\n"
        "  - {at: '12:28:37', kind: server_ready, path: sglang.log}\n"
        f"  - {{at: '{nccl_at}', kind: nccl_timeout, path: sglang.log, fields: {{rank: 5, op: REDUCE_SCATTER,"
        " timeout_ms: 600000}}\n"
        f"  - {{at: '{nccl_at}', kind: child_failed, path: sglang.log}}\n")
    return build_incidents(store_from_timeline(tmp_path, tl))


def test_the_headline_names_a_second_cause_of_the_same_server(tmp_path: Path) -> None:
    # the NCCL timeout 2 min after the server was ready again: it had not recovered (clustering.UP_S), one incident
    (inc,) = _two_causes(tmp_path, "12:30:37")
    assert inc.headline.startswith("CUDA out of memory") and inc.headline.endswith(
        "; then NCCL collective timed out on rank 5"), inc.headline


def test_a_second_cause_after_the_server_recovered_is_a_second_incident(tmp_path: Path) -> None:
    # 5 min 8 s after it was ready again (the corpus's 12:27 CUDA OOM and 12:33 NCCL timeout): two incidents
    oom, nccl = _two_causes(tmp_path, "12:33:45")
    assert oom.headline.startswith("CUDA out of memory") and nccl.headline == "NCCL collective timed out on rank 5"
    assert oom.followed_by is not None and oom.followed_by.incident == nccl.id and nccl.follows.incident == oom.id


def test_a_unit_whose_unit_file_runs_sglang_is_tied_as_an_sglang_unit(tmp_path: Path) -> None:
    """The unit's name does not say SGLang and it ends 50 s after the child (a slow teardown): its unit file's
    ExecStart= shows it runs SGLang, so the SGLang lines are tied to it (likely), not left unexplained."""
    lines = sorted(_crash("inference.service", "nfs-idmapd.service", exit_after=50), key=lambda x: x[0])
    (tmp_path / "journal.log").write_text("".join(text + "\n" for _, text in lines))
    (tmp_path / "inference.service").write_text(
        "[Unit]\nDescription=LLM inference\n\n[Service]\n"
        "ExecStart=/opt/venv/bin/python -m sglang.launch_server --model-path /models/qwen --tp 8 --port 30000\n"
        "Restart=always\n\n[Install]\nWantedBy=multi-user.target\n")
    store = Store(tmp_path / "store")
    ingest(store, [str(tmp_path / "journal.log"), str(tmp_path / "inference.service")], IngestOptions())
    inc = _only(store)
    assert inc.root_cause is not None and inc.root_cause.rule == "exit.sglang_child_error_host", inc.root_cause
    assert inc.root_cause.unit == "inference.service" and inc.root_cause.confidence.value == "likely"
    assert "nfs-idmapd" not in inc.headline


def test_a_restarts_configuration_stands_in_when_none_was_logged_before_the_failure(tmp_path: Path) -> None:
    later = CRASH + timedelta(seconds=7)
    dump = _line(later, "python3[51877]", "[2025-05-26 12:00:07] server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B-"
                 "Instruct', tp_size=4, mem_fraction_static=0.9, port=30000, host='0.0.0.0', watchdog_timeout=300)")
    lines = sorted([*_crash("sglang-qwen25-72b.service", "nfs-idmapd.service"), (later, dump)], key=lambda x: x[0])
    (tmp_path / "journal.log").write_text("".join(text + "\n" for _, text in lines))
    store = Store(tmp_path / "store")
    ingest(store, [str(tmp_path / "journal.log")], IngestOptions())
    inc = _only(store)
    (cfg,) = inc.configs
    assert cfg.evidence.line == [t for _, t in lines].index(dump) + 1
    assert cfg.note.startswith("No launch configuration was logged before the failure; this one was logged at "
                               "12:00:07 UTC, 6 s after it, when the server started again")
    r = CliRunner().invoke(main, ["--store", str(store.path), "report", "--incident", inc.id])
    assert "No launch configuration was logged before the failure; this one was logged at 12:00:07 UTC" in r.output
    assert "| `--mem-fraction-static` | `0.9` |" in r.output
