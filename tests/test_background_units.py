"""A unit that fails routinely on a host (a `fwupd-refresh.service` failing every 15 minutes all day) and happens to
fail inside an incident's window is not part of the incident: it is left out of its headline, units, impact and
timeline, and named apart with its evidence and how often it failed before. A unit that failed only in the window,
or only from the incident on, stays in the incident."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main
from forensics.incidents import build_incidents
from forensics.pipeline import IngestOptions, ingest
from forensics.store import Store

CRASH = datetime(2025, 5, 26, 12, 0, 0, tzinfo=timezone.utc)
OTHER = "fwupd-refresh.service"


def _line(t: datetime, ident: str, msg: str) -> str:
    return f"{t.strftime('%Y-%m-%dT%H:%M:%S')}+00:00 gpu-a07 {ident}: {msg}"


def _oom(pid: int, unit: str | None) -> list[tuple[str, str]]:
    out = [("kernel", f"Out of memory: Killed process {pid} (python3) total-vm:500000000kB, anon-rss:440000000kB, "
                      "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:900000kB oom_score_adj:0")]
    if unit:
        out += [("systemd[1]", f"{unit}: A process of this unit has been killed by the OOM killer."),
                ("systemd[1]", f"{unit}: Main process exited, code=killed, status=9/KILL"),
                ("systemd[1]", f"{unit}: Failed with result 'oom-kill'.")]
    return out


def _fail(unit: str, status: str = "203/EXEC") -> list[tuple[str, str]]:
    return [("systemd[1]", f"{unit}: Main process exited, code=exited, status={status}"),
            ("systemd[1]", f"{unit}: Failed with result 'exit-code'.")]


def _store(tmp: Path, other_fails: list[float]) -> Store:
    """An OOM kill of a session's python at 12:00:00 and of sglang.service at 12:01:00, and `OTHER` failing at each
    of `other_fails` (seconds from 12:00:00)."""
    msgs: list[tuple[float, str, str]] = [(-600, "systemd[1]", "Started sglang.service - SGLang server.")]
    msgs += [(0, i, m) for i, m in _oom(41650, None)]
    msgs += [(60, i, m) for i, m in _oom(41700, "sglang.service")]
    msgs += [(65, "systemd[1]", "Started sglang.service - SGLang server.")]
    msgs += [(dt, i, m) for dt in other_fails for i, m in _fail(OTHER)]
    msgs.sort(key=lambda x: x[0])
    p = tmp / "journal.log"
    p.write_text("".join(_line(CRASH + timedelta(seconds=dt), i, m) + "\n" for dt, i, m in msgs))
    store = Store(tmp / "store")
    ingest(store, [str(p)], IngestOptions())
    return store


def _only(store: Store):  # noqa: ANN202
    incs = [i for i in build_incidents(store) if i.start and i.start.startswith("2025-05-26T12:00")]
    assert len(incs) == 1, [(i.id, i.headline) for i in incs]
    return incs[0]


EVERY_15_MIN = [-900.0 * k for k in range(1, 17)] + [900.0 * k for k in range(1, 9)]   # 08:00 .. 14:00


def test_a_unit_failing_every_15_minutes_is_not_part_of_the_incident(tmp_path: Path) -> None:
    store = _store(tmp_path, sorted(EVERY_15_MIN + [30.0]))
    inc = _only(store)
    assert OTHER not in inc.headline and OTHER not in inc.units
    assert inc.headline == ("kernel OOM killer killed pid 41650 (python3) on gpu-a07; "
                            "then sglang.service killed by the OOM killer (systemd records it)")
    assert not [c for c in inc.conclusions if c.unit == OTHER]
    assert not [e for e in inc.events if e.unit == OTHER]
    (bg,) = inc.background
    assert bg.unit == OTHER and bg.before == 12   # 09:00 .. 11:45, every 15 minutes
    assert bg.first_before == "2025-05-26T09:00:00.000000Z" and bg.last_before == "2025-05-26T11:45:00.000000Z"
    assert [(ev.line, ev.ts) for ev in bg.evidence][:1] and all(ev.ts == "2025-05-26T12:00:30.000000Z"
                                                                for ev in bg.evidence)
    assert bg.headlines == (f"{OTHER} failed with result 'exit-code'",)

    r = CliRunner().invoke(main, ["--store", str(store.path), "report", "--incident", inc.id, "--max-chars", "0"])
    assert r.exit_code == 0, r.output
    md = r.output
    line = next(x for x in md.splitlines() if x.startswith("**Not counted"))
    lines = [n for n, text in enumerate((tmp_path / "journal.log").read_text().splitlines(), 1)
             if "12:00:30" in text]
    assert line == (
        f"**Not counted: `{OTHER}`.** It failed in the window at 12:00:30 UTC ({OTHER} failed with result "
        f"'exit-code'; `journal.log:{lines[0]}-{lines[-1]}`), as it had failed 12 times in the 3 h before the "
        "incident began (the first at 09:00:00 UTC, the last at 11:45:00 UTC): it fails routinely on `gpu-a07`, and "
        f"nothing in the logs ties this failure to the incident. Its failures: `forensics events --host gpu-a07 "
        f"--unit {OTHER} --kind service_failed --since 2025-05-26T09:00:00Z --until 2025-05-26T12:01:00Z`.")
    assert "1 service failed on `gpu-a07`: `sglang.service` at 12:01:00 UTC." in md
    impact = md.split("## Impact", 1)[1].split("## Timeline", 1)[0]
    timeline = md.split("## Timeline", 1)[1].split("\n## ", 1)[0]
    assert OTHER not in impact and OTHER not in timeline
    appendix = md.split("## Appendix", 1)[1]
    assert f"\n> {lines[0]}  2025-05-26T12:00:30+00:00 gpu-a07 systemd[1]: {OTHER}: Main" in appendix  # cited there

    # the command the report gives lists them, and JSON carries the same
    ev = CliRunner().invoke(main, ["--store", str(store.path), "events", "--host", "gpu-a07", "--unit", OTHER,
                                   "--kind", "service_failed", "--since", "2025-05-26T09:00:00Z",
                                   "--until", "2025-05-26T12:01:00Z", "--json"])
    assert ev.exit_code == 0, ev.output
    assert len(json.loads(ev.stdout)) == 13
    doc = json.loads(CliRunner().invoke(main, ["--store", str(store.path), "report", "--incident", inc.id,
                                               "--format", "json"]).stdout)
    (b,) = doc["incidents"][0]["background"]
    assert b["unit"] == OTHER and b["before"] == 12 and b["before_seconds"] == 10800.0


def test_a_unit_that_failed_only_in_the_window_stays_in_the_incident(tmp_path: Path) -> None:
    inc = _only(_store(tmp_path, [30.0]))
    assert not inc.background
    assert OTHER in inc.units and f"then {OTHER} failed" in inc.headline
    assert [c.confidence.value for c in inc.conclusions if c.unit == OTHER] == ["inconclusive"]


def test_a_unit_failing_again_and_again_only_from_the_incident_on_stays_in_it(tmp_path: Path) -> None:
    # a crash loop that begins with the incident may be its consequence: only failures before it make a routine
    inc = _only(_store(tmp_path, [30.0] + [900.0 * k for k in range(1, 9)]))
    assert not inc.background and OTHER in inc.units


def test_four_failures_before_are_not_yet_a_routine(tmp_path: Path) -> None:
    inc = _only(_store(tmp_path, [-3000.0, -2400.0, -1800.0, -1200.0, 30.0]))
    assert not inc.background and OTHER in inc.units
    (tmp_path / "five").mkdir()
    inc = _only(_store(tmp_path / "five", [-3600.0, -3000.0, -2400.0, -1800.0, -1200.0, 30.0]))
    assert [b.before for b in inc.background] == [5] and OTHER not in inc.units


def test_the_headline_names_a_recurring_chain_once(tmp_path: Path) -> None:
    msgs = [(0, i, m) for i, m in _oom(41650, None)]
    msgs += [(60, i, m) for i, m in _oom(41700, "sglang.service")] + [(65, "systemd[1]", "Started sglang.service.")]
    msgs += [(120, i, m) for i, m in _oom(41800, "sglang.service")]
    p = tmp_path / "journal.log"
    p.write_text("".join(_line(CRASH + timedelta(seconds=dt), i, m) + "\n" for dt, i, m in msgs))
    store = Store(tmp_path / "store")
    ingest(store, [str(p)], IngestOptions())
    assert _only(store).headline == ("kernel OOM killer killed pid 41650 (python3) on gpu-a07; then sglang.service "
                                     "killed by the OOM killer (systemd records it) (twice)")


def test_a_request_traceback_nothing_binds_is_context_and_no_key_line(tmp_path: Path) -> None:
    # uvicorn's line is a journal entry of its own, so the traceback's rule is python.traceback and its origin tells
    t = CRASH - timedelta(minutes=13)
    ident = "sglang-qwen3[32402]"
    tb = ["[2025-05-26 11:47:00] ERROR:    Exception in ASGI application", "Traceback (most recent call last):",
          '  File "/usr/lib/python3.10/json/decoder.py", line 355, in raw_decode',
          '    raise JSONDecodeError("Expecting value", s, err.value) from None',
          "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)"]
    lines = [_line(t, ident, x) for x in tb]
    lines += [_line(CRASH + timedelta(seconds=dt), i, m) for dt, (i, m) in
              [(0, x) for x in _oom(32402, "sglang-qwen3.service")]]
    p = tmp_path / "journal.log"
    p.write_text("".join(x + "\n" for x in lines))
    store = Store(tmp_path / "store")
    ingest(store, [str(p)], IngestOptions())
    inc = _only(store)
    (tb_ev,) = [e for e in inc.events if e.kind == "python_traceback"]
    assert tb_ev.rule == "python.traceback" and tb_ev.role == "context"
    md = CliRunner().invoke(main, ["--store", str(store.path), "report", "--incident", inc.id]).output
    row = next(x for x in md.splitlines() if "JSONDecodeError" in x and x.startswith("| "))
    assert row.endswith("| context |")
    key = md.split("## What the key lines reveal", 1)[1].split("\n## ", 1)[0]
    assert "JSONDecodeError" not in key and "OOM killer" in key


def test_a_routine_units_many_failures_in_the_window_are_listed_five_at_most(tmp_path: Path) -> None:
    store = _store(tmp_path, sorted(EVERY_15_MIN + [5.0, 15.0, 25.0, 35.0, 45.0, 55.0, 70.0]))
    inc = _only(store)
    assert OTHER not in inc.units and [b.unit for b in inc.background] == [OTHER]
    md = CliRunner().invoke(main, ["--store", str(store.path), "report", "--incident", inc.id]).output
    assert (f"**Not counted: `{OTHER}`.** It failed in the window at 12:00:05 UTC, 12:00:15 UTC, 12:00:25 UTC, "
            "12:00:35 UTC and 3 more times (") in md, md
