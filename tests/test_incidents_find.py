"""Asking for incidents reads only what they need, and gives what building every incident gives: the same ids
and incidents by id, prefix or date, the same errors, and the same incidents whether correlations fire at every
anchor or only where they can matter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_incidents import store_from_timeline

import forensics.incidents as incidents
from forensics.incidents import IncidentNotFound, build_incidents, find_incidents, incident_json, select_incidents


def _js(incs: list) -> list[str]:
    return [json.dumps(incident_json(i), sort_keys=True) for i in incs]


# chained correlations (unique steps, xids), folds, untimed kernel lines, configs, several incidents
FIXTURES = ["seed_full.yaml", "seed_journal_only.yaml", "ready_crash_unit.yaml", "xid_several_gpus.yaml",
            "xid_fallen_off_bus.yaml", "sigkill_kernel_oom_unanchored.yaml", "cuda_oom_config.yaml",
            "systemd_cgroup_cleanup_exit.yaml", "nccl_timeout.yaml", "exit_sglang_child_error.yaml"]


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_incidents_are_the_same_every_way(tmp_path: Path, name: str, monkeypatch) -> None:  # noqa: ANN001
    store = store_from_timeline(tmp_path, name)
    local = build_incidents(store)
    monkeypatch.setattr(incidents, "LOCAL_MATCHING", False)
    every = build_incidents(store)
    monkeypatch.undo()
    assert _js(local) == _js(every)
    for inc in local:
        assert _js(find_incidents(store, [inc.id])) == _js([inc])
        day = (inc.start or inc.id)[:10]
        assert [i.id for i in find_incidents(store, [day], full=False)] == [i.id for i in select_incidents(local, day)]


def test_two_hosts_one_asked_for(tmp_path: Path) -> None:
    tl = tmp_path / "two.yaml"
    tl.write_text("host: gpu1\nevents:\n"
                  "  - {at: '08:00:00', kind: segfault, unit: x.service, fields: {pid: 1, process: python3}}\n"
                  "  - {at: '08:00:00', kind: segfault, host: gpu2, unit: x.service, fields: {pid: 2, process: py}}\n"
                  "  - {at: '09:00:00', kind: segfault, unit: x.service, fields: {pid: 3, process: python3}}\n")
    store = store_from_timeline(tmp_path, tl)
    every = build_incidents(store)
    assert [i.id for i in every] == ["2025-05-25-gpu1-x", "2025-05-25-gpu2-x", "2025-05-25-gpu1-x-2"]
    for inc in every:
        assert _js(find_incidents(store, [inc.id])) == _js([inc])
    with pytest.raises(IncidentNotFound) as got:
        find_incidents(store, ["2025-05-25-gpu1-"])
    with pytest.raises(IncidentNotFound) as want:
        select_incidents(every, "2025-05-25-gpu1-")
    assert str(got.value) == str(want.value)
    with pytest.raises(IncidentNotFound) as got:
        find_incidents(store, ["2025-05-25-gpu3-x"])
    with pytest.raises(IncidentNotFound) as want:
        select_incidents(every, "2025-05-25-gpu3-x")
    assert str(got.value) == str(want.value) and "the store has: 2025-05-25-gpu1-x" in str(got.value)
    # a spec and a date, one after the other, as `forensics incidents SPEC --date D`
    assert [i.id for i in find_incidents(store, ["2025-05-25-gpu2", "2025-05-25"], full=False)] == ["2025-05-25-gpu2-x"]


@pytest.mark.parametrize("spec", ["2025-13-45", "2025-02-30", " 2025-00-10 "])
def test_a_date_off_the_calendar_is_named_as_such(tmp_path: Path, spec: str, monkeypatch) -> None:  # noqa: ANN001
    store = store_from_timeline(tmp_path, "seed_full.yaml")
    every = build_incidents(store)
    built: list[int] = []
    monkeypatch.setattr(incidents, "_Builder", lambda *a, **k: built.append(1))
    for ask in (lambda: find_incidents(store, [spec]), lambda: select_incidents(every, spec)):
        with pytest.raises(IncidentNotFound, match=r"is not a date of the calendar: give .* YYYY-MM-DD"):
            ask()
    assert built == []                         # refused before the store is read
    assert select_incidents(every, "2025-05-25")  # a real day still selects


SEED_TAIL = """failed
May 25 20:17:19 dflash-train systemd[1]: sglang-k26-eagle3.service: Main process exited, code=killed, status=9/KILL
May 25 20:17:19 dflash-train systemd[1]: sglang-k26-eagle3.service: Failed to kill control group /system.slice/sglang-k26-eagle3.service, ignoring: Invalid argument
"""


def test_a_day_of_another_year_says_the_year_was_inferred_and_how_to_give_it(tmp_path: Path) -> None:
    # the seed's `systemctl is-active; journalctl -n 5` output saved on 2026-12-06: the year comes from that
    import os
    from datetime import datetime, timezone

    from click.testing import CliRunner

    from forensics.cli import main
    p = tmp_path / "out.txt"
    p.write_text(SEED_TAIL)
    saved = datetime(2026, 12, 6, 7, 46, tzinfo=timezone.utc).timestamp()
    os.utime(p, (saved, saved))
    store = str(tmp_path / "s")
    assert CliRunner().invoke(main, ["--store", store, "ingest", "-q", str(p)]).exit_code == 0
    r = CliRunner().invoke(main, ["--store", store, "report", "--incident", "2025-05-25"])
    assert r.exit_code == 1
    assert ("no incident starts on 2025-05-25; the store has: 2026-05-25-dflash-train-sglang-k26-eagle3 "
            "(2026-05-25 20:17)") in r.output
    assert ("2026-05-25 is the same day of another year, and the logs printed no year: it was inferred" in r.output
            and "If the logs are of 2025, read them again with `forensics ingest --year 2025 --force PATH...`"
            in r.output)
    # what it says works
    assert CliRunner().invoke(main, ["--store", store, "ingest", "-q", "--year", "2025", "--force", str(p)]
                              ).exit_code == 0
    assert CliRunner().invoke(main, ["--store", store, "report", "--incident", "2025-05-25"]).exit_code == 0
    # a year printed in the log: no such hint
    q = tmp_path / "iso.txt"
    q.write_text("2026-05-25T20:17:19+00:00 dflash-train systemd[1]: sglang-k26-eagle3.service: Main process "
                 "exited, code=killed, status=9/KILL\n")
    store2 = str(tmp_path / "s2")
    assert CliRunner().invoke(main, ["--store", store2, "ingest", "-q", str(q)]).exit_code == 0
    r = CliRunner().invoke(main, ["--store", store2, "report", "--incident", "2025-05-25"])
    assert r.exit_code == 1 and "no incident starts on 2025-05-25" in r.output and "another year" not in r.output
