"""Incidents: the seed samples end to end, the journal-only seed, grouping, ids, lookup, JSON and the CLI."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from forensics.eventview import KERNEL_KINDS, SYSTEMD_KINDS
from forensics.timeline_fixtures import load_timeline
from forensics.incidents import IncidentNotFound, build_incidents, incident_json, select_incidents
from forensics.model import Confidence
from forensics.schema import EVENT_SCHEMA, RECORD_SCHEMA
from forensics.store import SourceEntry, Store, write_parquet

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "incident"
TIMELINES = Path(__file__).parent / "fixtures" / "timelines"
SEED_ID = "2025-05-25-dflash-train-sglang-k26-eagle3"
EAGLE = "sglang-k26-eagle3.service"
AR = "sglang-k26.service"

SEED_JOURNAL = """failed
May 25 20:17:19 dflash-train systemd[1]: sglang-k26-eagle3.service: Main process exited, code=killed, status=9/KILL
May 25 20:17:19 dflash-train systemd[1]: sglang-k26-eagle3.service: Failed to kill control group /system.slice/sglang-k26-eagle3.service, ignoring: Invalid argument
May 25 20:17:19 dflash-train systemd[1]: sglang-k26-eagle3.service: Failed to kill control group /system.slice/sglang-k26-eagle3.service, ignoring: Invalid argument
May 25 20:17:19 dflash-train systemd[1]: sglang...
"""


def _ingest(store: Path, *paths: str, **opts: object) -> Store:
    from forensics.pipeline import IngestOptions, ingest

    s = Store(store)
    ingest(s, list(paths), IngestOptions(**opts))  # type: ignore[arg-type]
    return s


@pytest.fixture(scope="module")
def seed_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return _ingest(tmp_path_factory.mktemp("seed") / "store", str(SAMPLES))


@pytest.fixture(scope="module")
def seed(seed_store: Store) -> dict:
    incs = build_incidents(seed_store)
    assert [i.id for i in incs] == [SEED_ID], [i.id for i in incs]
    return incident_json(incs[0])


# ---------------------------------------------------------------------------------------- the seed samples


def test_seed_incident_shape(seed: dict) -> None:
    for key in ("id", "start", "end", "hosts", "units", "headline", "root_cause", "symptoms", "gaps"):
        assert key in seed
    assert seed["hosts"] == ["dflash-train"]
    assert seed["units"] == [EAGLE, AR]
    assert seed["start"].startswith("2025-05-25T20:17:1") and seed["end"].startswith("2025-05-25T20:29:4")
    for key in ("kind", "confidence", "statement", "evidence"):
        assert key in seed["root_cause"]
    assert all(set(e) >= {"path", "line"} for e in seed["root_cause"]["evidence"])


def test_seed_eagle3_sigkill_is_the_kernel_oom_kill_confirmed(seed: dict) -> None:
    rc = seed["root_cause"]
    assert (rc["kind"], rc["confidence"], rc["unit"]) == ("oom_kill", "confirmed", EAGLE)
    assert "pid 48213" in rc["statement"] and "global" in rc["statement"] and "GiB" in rc["statement"]
    dmesg = (SAMPLES / "dmesg.log").read_text().splitlines()
    kill_line = next(i for i, ln in enumerate(dmesg, 1) if "Killed process 48213" in ln)
    # the deciding line is cited: the kernel's kill line, inside the cited OOM report's line range
    assert any(Path(e["path"]).name == "dmesg.log" and e["line"] <= kill_line <= e["line_end"]
               for e in rc["evidence"])
    assert any(Path(e["path"]).name == "journal-eagle3.log" for e in rc["evidence"])


def test_seed_k26_crash_after_ready_is_flashinfer_on_sm120(seed: dict) -> None:
    ar = [c for c in seed["conclusions"] if c["unit"] == AR]
    assert len(ar) == 1
    c = ar[0]
    assert c["kind"] == "flashinfer_arch_unsupported" and c["confidence"] == "confirmed"
    assert "sm_120" in c["statement"] and "RTX PRO 6000" in c["statement"]
    assert "not OOM-killed" in c["statement"]               # SGLang's own SIGKILL, not an OOM
    assert "ready at 20:29:11" in c["statement"]            # the crash came after the readiness check
    kinds = {s["kind"] for s in seed["symptoms"] if s["unit"] == AR}
    assert {"child_failed", "service_killed"} <= kinds


def test_seed_cgroup_lines_are_folded_as_context(seed: dict) -> None:
    cg = [e for e in seed["events"] if e["kind"] == "cgroup_kill_failed"]
    assert cg and all(e["role"] == "context" for e in cg)
    symptom_ids = {s["id"] for s in seed["symptoms"]}
    assert all(e["id"] in symptom_ids for e in cg)
    assert all(c["cause_event"] not in {e["id"] for e in cg} for c in seed["conclusions"])
    assert "not the cause of this failure" in seed["root_cause"]["statement"]


def test_seed_flags_of_both_units_are_reviewed(seed: dict) -> None:
    by_unit = {c["unit"]: c for c in seed["configs"]}
    assert set(by_unit) >= {EAGLE, AR}
    for unit, cfg in by_unit.items():
        flags = {f["name"]: f for f in cfg["flags"]}
        assert flags["--mem-fraction-static"]["value"] in ("0.90", "0.9")
        assert "Aggressive" in flags["--mem-fraction-static"]["note"]
        assert any("0.90 x 96 GB = 86.4 GB reserved per GPU" in a for a in cfg["arithmetic"]), cfg["arithmetic"]
    assert "draft model" in {f["name"]: f for f in by_unit[EAGLE]["flags"]}["--mem-fraction-static"]["note"]
    assert "decode speed" in {f["name"]: f for f in by_unit[AR]["flags"]}["--disable-cuda-graph"]["note"]
    assert "workaround" in {f["name"]: f for f in by_unit[AR]["flags"]}["--attention-backend"]["note"]


def test_seed_environment_and_gaps(seed: dict) -> None:
    env = seed["environment"]
    assert env["sm"] == "sm_120" and env["kernel"] == "6.8.0-60-generic" and env["driver"] == "575.57.08"
    assert "RTX PRO 6000" in env["gpu"] and env["gpu"].startswith("8 x")
    whats = " | ".join(g["what"] for g in seed["gaps"])
    assert "journald dropped" in whats                       # Suppressed 28412 messages
    assert "kernel log of dflash-train around 20:29" in whats  # dmesg ends before the second crash


def test_seed_is_deterministic(seed_store: Store, tmp_path: Path) -> None:
    a = json.dumps([incident_json(i) for i in build_incidents(seed_store)], sort_keys=True)
    b = json.dumps([incident_json(i) for i in build_incidents(seed_store)], sort_keys=True)
    assert a == b
    # another store, sources ingested in the reverse order: the same incidents (paths are the same text)
    other = tmp_path / "samples" / "incident"
    shutil.copytree(SAMPLES, other)
    s2 = _ingest(tmp_path / "store2", *sorted((str(p) for p in other.iterdir()), reverse=True))
    c = [incident_json(i) for i in build_incidents(s2)]
    assert [i["id"] for i in c] == [SEED_ID]
    assert [x["rule"] for x in c[0]["conclusions"]] == [x["rule"] for x in json.loads(a)[0]["conclusions"]]


# ---------------------------------------------------------------------------------------- the first seed alone


def test_journal_only_seed_suspects_oom_and_confirms_nothing(tmp_path: Path) -> None:
    (tmp_path / "journal.txt").write_text(SEED_JOURNAL)
    store = _ingest(tmp_path / "store", str(tmp_path / "journal.txt"), year=2025)
    incs = build_incidents(store)
    assert [i.id for i in incs] == [SEED_ID]
    inc = incs[0]
    assert all(c.confidence is not Confidence.CONFIRMED for c in inc.conclusions)
    rc = inc.root_cause
    assert rc is not None and rc.kind == "oom_kill" and rc.confidence is Confidence.POSSIBLE
    assert rc.cause_event is None
    assert "suspected, not confirmed" in rc.statement
    assert "Not ingested: the kernel log" in rc.statement
    assert 'journalctl -k --since "2025-05-25 20:15" --until "2025-05-25 20:18"' in rc.next_steps
    assert any("dmesg -T" in s for s in rc.next_steps)
    assert any("SGLang" in a for a in rc.alternatives) and any("kill -9" in a for a in rc.alternatives)
    assert any("kernel log" in g.what for g in inc.gaps)
    roles = {e.kind: e.role for e in inc.events}
    assert roles["cgroup_kill_failed"] == "context"


# ---------------------------------------------------------------------------------------- stores from timelines


def store_from_timeline(tmp: Path, name: str | Path) -> Store:
    """A store holding a fixture timeline's events (and one record per event), without parsing or rules."""
    store = Store(tmp / "store")
    store.init()
    add_timeline(store, name)
    return store


def add_timeline(store: Store, name: str | Path) -> None:
    """Commit a fixture timeline's events (and one record per event) to a store, a source per path."""
    fx = load_timeline(name if isinstance(name, Path) else TIMELINES / name)
    ev = fx.events
    for path in sorted(set(ev["path"].to_list())):
        part = ev.filter(pl.col("path") == path)
        sid = hashlib.sha256(f"{name}:{path}".encode()).hexdigest()[:16]
        part = part.with_columns(pl.lit(sid).alias("source_id"))
        ident = pl.when(pl.col("kind").is_in(list(KERNEL_KINDS))).then(pl.lit("kernel")) \
            .when(pl.col("kind").is_in(list(SYSTEMD_KINDS))).then(pl.lit("systemd")).otherwise(pl.lit("python3"))
        recs = part.with_columns(ident.alias("ident"), pl.col("ts").cast(pl.String).alias("ts_text"))
        staging = store.staging()
        write_parquet(recs, staging / "r.parquet", RECORD_SCHEMA)
        write_parquet(part, staging / "e.parquet", EVENT_SCHEMA)
        ts = [t for t in part["ts"].to_list() if t is not None]
        entry = SourceEntry(source_id=sid, path=path, sha256=sid * 4, size=1, format="fixture", formats=["fixture"],
                            confidence=1.0, host=part["host"][0], records=part.height, lines=part.height, unparsed=0,
                            invalid_utf8=0, first_ts=min(ts).isoformat() if ts else None,
                            last_ts=max(ts).isoformat() if ts else None, time_anchor="fixture times",
                            ts_sources={}, events=part.height, tool_version="test", fingerprint=sid)
        store.commit(entry, staging / "r.parquet", staging / "e.parquet")


def test_incident_from_timeline_store(tmp_path: Path) -> None:
    store = store_from_timeline(tmp_path, "seed_full.yaml")
    incs = build_incidents(store)
    assert [i.id for i in incs] == [SEED_ID]
    inc = incs[0]
    assert inc.root_cause is not None and inc.root_cause.rule == "sigkill.kernel_oom"
    assert [c.unit for c in inc.conclusions] == [EAGLE, AR]


def test_gap_window_splits_and_merges(tmp_path: Path) -> None:
    store = store_from_timeline(tmp_path, "seed_full.yaml")
    # the fallback unit was started 2.5 min after the first death and died 10 min later: one incident even with a
    # gap (6 min) shorter than the 12.5 minutes between the two deaths
    assert len(build_incidents(store, gap_minutes=6)) == 1
    assert len(build_incidents(store, gap_minutes=4)) == 2     # died more than twice the gap after starting
    # with a gap shorter than the OOM-to-start delay the chain is not linked
    assert len(build_incidents(store, gap_minutes=1)) == 2


def test_fallback_root_cause_when_nothing_correlates(tmp_path: Path) -> None:
    store = store_from_timeline(tmp_path, "nccl_error_only.yaml")
    incs = build_incidents(store)
    assert len(incs) == 1
    rc = incs[0].root_cause
    assert rc is not None and rc.confidence is Confidence.INCONCLUSIVE and rc.rule == "incident.first_event"
    assert incs[0].id == "2025-05-25-gpu1-nccl-error"


def test_no_events_no_incidents(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    store.init()
    assert build_incidents(store) == []


# ---------------------------------------------------------------------------------------- asking for incidents


def _fake(ids_starts: list[tuple[str, str]]):  # noqa: ANN202
    from forensics.model import Incident

    return [Incident(id=i, start=s, end=s, hosts=("h",), units=(), headline="", root_cause=None, conclusions=(),
                     events=(), symptoms=(), configs=(), environment={}, gaps=(), sources=()) for i, s in ids_starts]


def test_select_by_id_prefix_and_date() -> None:
    incs = _fake([("2025-05-25-h-a", "2025-05-25T01:00:00.000000Z"), ("2025-05-25-h-b", "2025-05-25T02:00:00.000000Z"),
                  ("2025-05-26-h-a", "2025-05-26T01:00:00.000000Z"), ("2025-05-26-h-a-2", "2025-05-26T03:00:00.000000Z")])
    assert [i.id for i in select_incidents(incs, "2025-05-25-h-b")] == ["2025-05-25-h-b"]
    assert [i.id for i in select_incidents(incs, "2025-05-25-h-b".rstrip("b") + "b")] == ["2025-05-25-h-b"]
    assert [i.id for i in select_incidents(incs, "2025-05-25")] == ["2025-05-25-h-a", "2025-05-25-h-b"]
    assert [i.id for i in select_incidents(incs, "2025-05-26-h-a")] == ["2025-05-26-h-a"]  # a full id wins
    with pytest.raises(IncidentNotFound, match="matches 2 incidents"):
        select_incidents(incs, "2025-05-25-h-")
    with pytest.raises(IncidentNotFound, match="no incident starts on 2025-06-01; the store has: 2025-05-25-h-a"):
        select_incidents(incs, "2025-06-01")
    with pytest.raises(IncidentNotFound, match="no incident 'zzz'"):
        select_incidents(incs, "zzz")
    with pytest.raises(LookupError, match="no incidents"):
        select_incidents([], "x")


def test_duplicate_ids_get_a_suffix_in_time_order(tmp_path: Path) -> None:
    tl = tmp_path / "two.yaml"
    tl.write_text("host: gpu1\nevents:\n"
                  "  - {at: '08:00:00', kind: segfault, unit: x.service, fields: {pid: 1, process: python3}}\n"
                  "  - {at: '09:00:00', kind: segfault, unit: x.service, fields: {pid: 2, process: python3}}\n")
    store = store_from_timeline(tmp_path, tl)
    ids = [i.id for i in build_incidents(store)]
    assert ids == ["2025-05-25-gpu1-x", "2025-05-25-gpu1-x-2"]
    assert [i.id for i in build_incidents(store, gap_minutes=90)] == ["2025-05-25-gpu1-x"]


# ---------------------------------------------------------------------------------------- the CLI


def test_cli_incidents_json_and_selection(tmp_path: Path) -> None:
    from forensics.cli import main

    store_from_timeline(tmp_path, "seed_full.yaml")
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "store"), "incidents", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [d["id"] for d in data] == [SEED_ID]
    assert data[0]["root_cause"]["evidence"][0].keys() >= {"path", "line"}
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "store"), "incidents", "--date", "2025-05-25"])
    assert r.exit_code == 0 and r.stdout.startswith(SEED_ID)
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "store"), "incidents", "2025-05-25-dflash"])
    assert r.exit_code == 0 and r.stdout.startswith(SEED_ID)
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "store"), "incidents", "--date", "2025-06-01"])
    assert r.exit_code == 1 and "the store has: " + SEED_ID in r.stderr
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "store"), "incidents", "--date", "May 25"])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "nowhere"), "incidents"])
    assert r.exit_code == 2 and "no store" in r.stderr


@pytest.mark.parametrize("port", ["30001", None])
def test_next_steps_name_the_port_the_units_configuration_gives(tmp_path: Path, port: str | None) -> None:
    """`{port}` in a rule's next steps is the unit's `--port` (sglang-k26.service runs on 30001 in the seed), and
    SGLang's default, 30000, when no configuration of the unit sets one."""
    logs = tmp_path / "logs"
    shutil.copytree(SAMPLES, logs)
    if port is None:  # every launch configuration of the seed without its port
        for p in logs.iterdir():
            text = p.read_text()
            p.write_text(text.replace(" --port 30001", "").replace(" port=30001,", "").replace("'port': 30001, ", ""))
    store = _ingest(tmp_path / "store", *sorted(str(p) for p in logs.iterdir()))
    (inc,) = build_incidents(store)
    ready = [e for e in inc.events if e.kind == "server_ready" and e.unit == "sglang-k26.service"]
    assert ready, [(e.kind, e.unit) for e in inc.events]
    want = f"localhost:{port or '30000'}/health_generate"
    assert all(any(want in s for s in e.next_steps) for e in ready), [e.next_steps for e in ready]
    if port is None:
        assert all(f.name != "--port" for c in inc.configs for f in c.flags)


def test_a_file_naming_one_host_gives_it_to_its_lines_that_name_none(tmp_path: Path) -> None:
    """A `systemctl status` paste from gpu-node-1 (its journal lines name the host, its `Main PID: ... signal=KILL`
    line names none), in a store that also holds another host: the untimed kill is gpu-node-1's (it was an undated
    `unknown host` incident of its own), and the report says so among its assumptions."""
    paste = ROOT / "samples" / "formats" / "systemctl-status.log"
    other = tmp_path / "other.log"
    other.write_text("May 25 20:10:00 gpu-node-9 app[7]: hello\nMay 25 20:11:00 gpu-node-9 app[7]: bye\n")
    store = _ingest(tmp_path / "s", str(paste), str(other), year=2025)
    incs = [incident_json(i) for i in build_incidents(store)]
    assert not [i["id"] for i in incs if "unknown" in i["id"]]
    mine = [i for i in incs if any(e["path"].endswith("systemctl-status.log") and e["line"] == 9 for e in i["events"])]
    assert [i["hosts"] for i in mine] == [["gpu-node-1"]]
    assert any("names gpu-node-1 on its other records" in g["why"] for g in mine[0]["gaps"])


def test_systemctl_show_explains_a_sigkill_and_one_death_seen_twice_is_one_conclusion(tmp_path: Path) -> None:
    """`systemctl show` alone: its ExecStart= `code=killed ; status=9/KILL` (at its stop_time) is explained by its
    `Result=oom-kill`, confirmed. With the `systemctl status` paste of the same death (journal lines on the same
    host), the two `service_killed` events are explained by one conclusion, not one per copy of the death."""
    show = ROOT / "samples" / "formats" / "systemctl-show.log"
    alone = [incident_json(i) for i in build_incidents(_ingest(tmp_path / "a", str(show)))]
    assert len(alone) == 1
    rc = alone[0]["root_cause"]
    assert rc["rule"] == "sigkill.result_oom_kill" and rc["confidence"] == "confirmed"
    kinds = {(e["kind"], e["line"]) for e in alone[0]["events"]}
    assert {("service_killed", 40), ("service_failed", 25)} <= kinds
    assert not any(e["line"] == 41 and e["kind"] == "service_killed" for e in alone[0]["events"])  # ExecStartEx=

    paste = ROOT / "samples" / "formats" / "systemctl-status.log"
    both = [incident_json(i) for i in build_incidents(_ingest(tmp_path / "b", str(show), str(paste), year=2025))]
    assert len(both) == 1 and both[0]["hosts"] == ["gpu-node-1"]
    concl = both[0]["conclusions"]
    assert len(concl) == 1, [c["rule"] for c in concl]
    killed = {e["id"]: e for e in both[0]["events"] if e["kind"] == "service_killed" and e["ts"]}
    assert len(killed) == 2 and set(killed) <= set(concl[0]["explains"])


def test_lines_cut_to_the_terminal_width_are_counted_and_named_among_the_gaps(tmp_path: Path) -> None:
    """A `systemctl status --no-pager` copied off a 100-column terminal: a journal line too long for it keeps its
    head and last words around a `…` (so no rule reads the OOM line), the `Process:` line is cut at the end. The
    source's note counts the lines of that one width and names the first (a line holding `…` of its own, of
    another length, is not counted); the incident's gaps say what is missing and how to copy it whole."""
    mark = "\u2026"

    def journal(s: str) -> str:   # systemd's ellipsize_mem(..., 90) of a 100-column line
        return s[:89] + mark + s[-10:]

    text = "\n".join([
        "\u00d7 sglang.service - SGLang inference server",
        "     Active: failed (Result: oom-kill) since Sun 2025-05-25 20:17:19 UTC; 3min 41s ago",
        ("    Process: 48213 ExecStart=/opt/sglang/venv/bin/python3 -m sglang.launch_server --model-path "
         "/models/Qwen3-32B --tp-size 2")[:99] + mark,
        "   Main PID: 48213 (code=killed, signal=KILL)",
        "",
        "May 25 20:17:18 gpu-node-1 python3[48291]: [2025-05-25 20:17:18] Waiting for the scheduler " + mark
        + " (3 tries)",
        journal("May 25 20:17:19 gpu-node-1 systemd[1]: sglang.service: A process of this unit has been killed by the "
                "OOM killer."),
        "May 25 20:17:19 gpu-node-1 systemd[1]: sglang.service: Main process exited, code=killed, status=9/KILL",
    ]) + "\n"
    assert [len(x) for x in text.split("\n") if mark in x] == [100, 102, 100]
    (tmp_path / "status.txt").write_text(text)
    store = _ingest(tmp_path / "s", str(tmp_path / "status.txt"), year=2025)
    notes = store.sources()[0].notes
    assert any(n.startswith("line 3: 2 line(s) cut to the terminal's width") for n in notes), notes
    (inc,) = build_incidents(store)
    gaps = [g for g in inc.gaps if "cut to the terminal's width" in g.what]
    assert [g.what for g in gaps] == [f"The ends of 2 line(s) of {tmp_path / 'status.txt'} cut to the terminal's "
                                      "width (the first at line 3)"]
    assert "systemctl status sglang.service -l --no-pager > status.txt" in gaps[0].commands
