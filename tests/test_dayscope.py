"""A day's incidents found from a window around the day are those of the whole store: the window widens while
a cluster that reaches the day comes near its edges, or reaches back when one of the day's incidents holds an
untimed event."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from test_incidents import store_from_timeline

import forensics.dayscope as dayscope
import forensics.incidents as incidents
from forensics.correlation_packs import load_correlations
from forensics.dayscope import Reach, Span, Window, day_of
from forensics.incidents import IncidentNotFound, build_incidents, find_incidents, incident_json, select_incidents


def _js(incs: list) -> list[str]:
    return [json.dumps(incident_json(i), sort_keys=True) for i in incs]


def _every(start: str, end: str, minutes: int, unit: str, pid0: int) -> list[str]:
    t, stop = datetime.fromisoformat(start), datetime.fromisoformat(end)
    out = []
    while t <= stop:
        out.append(f"  - {{at: '{t:%Y-%m-%dT%H:%M:%S}', kind: segfault, unit: {unit}, "
                   f"fields: {{pid: {pid0 + len(out)}, process: python3}}}}")
        t += timedelta(minutes=minutes)
    return out


def _timeline(tmp: Path) -> Path:
    lines = ["host: gpu1", "events:"]
    # a chain across the first midnight: one incident, of the 25th
    lines += _every("2025-05-25T20:00:00", "2025-05-26T03:00:00", 10, "a.service", 1000)
    # a chain from late on the 26th until six hours into the 27th: further than the first window reaches
    lines += _every("2025-05-26T23:30:00", "2025-05-27T06:00:00", 10, "b.service", 2000)
    # z.service dies on the 25th and the 26th; an untimed line about it joins the first (the 25th's)
    lines += ["  - {at: '2025-05-25T10:00:00', kind: segfault, unit: z.service, fields: {pid: 7, process: python3}}",
              "  - {at: '2025-05-26T10:00:00', kind: segfault, unit: z.service, fields: {pid: 8, process: python3}}",
              "  - {at: null, kind: segfault, unit: z.service, path: status.txt, ts_source: none,"
              " fields: {pid: 9, process: python3}}"]
    # two incidents of the same host and unit on the 26th (the second is `-2`), and one on another host
    lines += ["  - {at: '2025-05-26T08:00:00', kind: segfault, unit: x.service, fields: {pid: 11, process: python3}}",
              "  - {at: '2025-05-26T12:00:00', kind: segfault, unit: x.service, fields: {pid: 12, process: python3}}",
              "  - {at: '2025-05-26T12:00:00', kind: segfault, host: gpu2, unit: x.service,"
              " fields: {pid: 13, process: python3}}"]
    p = tmp / "days.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


DAYS = ["2025-05-24", "2025-05-25", "2025-05-26", "2025-05-27", "2025-05-28"]


def test_a_days_incidents_from_its_window_are_the_stores(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    store = store_from_timeline(tmp_path, _timeline(tmp_path))
    every = build_incidents(store)
    assert {i.id for i in every} >= {"2025-05-25-gpu1-a", "2025-05-26-gpu1-b", "2025-05-25-gpu1-z",
                                     "2025-05-26-gpu1-z", "2025-05-26-gpu1-x", "2025-05-26-gpu1-x-2",
                                     "2025-05-26-gpu2-x"}
    windows: list[Window | None] = []
    skeletons = incidents._Builder.skeletons

    def spy(self, window=None):  # noqa: ANN001, ANN202
        windows.append(window)
        return skeletons(self, window)

    monkeypatch.setattr(incidents._Builder, "skeletons", spy)
    for day in DAYS:
        want = [i for i in every if (i.start or i.id)[:10] == day]
        if want:
            assert _js(find_incidents(store, [day])) == _js(want), day
        for inc in want:
            assert _js(find_incidents(store, [inc.id])) == _js([inc])
    # the 26th needed wider windows: the chain into the 27th, and the untimed z.service line (whose home, the
    # 25th's incident, lies before the first window)
    windows.clear()
    find_incidents(store, ["2025-05-26"], full=False)
    assert len(windows) == 2 and all(w is not None for w in windows)   # the second reaches back to the 25th
    pads = [w.day_start - w.lo for w in windows if w is not None]
    assert pads == sorted(pads) and pads[-1] > pads[0]
    untimed = [i for i in every if any(e.ts is None for e in i.events)]
    assert [i.id for i in untimed] == ["2025-05-25-gpu1-z"]


def test_without_the_edge_checks_a_window_would_cut_incidents(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The checks are what makes the window safe: holding every window as good gives other incidents."""
    store = store_from_timeline(tmp_path, _timeline(tmp_path))
    want = _js(select_incidents(build_incidents(store), "2025-05-26"))
    monkeypatch.setattr(Window, "holds", lambda self, spans, firsts=None: True)
    assert _js(find_incidents(store, ["2025-05-26"])) != want


def test_the_window_can_be_turned_off(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    store = store_from_timeline(tmp_path, _timeline(tmp_path))
    on = _js(find_incidents(store, ["2025-05-26"]))
    monkeypatch.setattr(dayscope, "ENABLED", False)
    assert _js(find_incidents(store, ["2025-05-26"])) == on


def test_what_names_a_day() -> None:
    assert day_of(["2025-05-26"]) == "2025-05-26"
    assert day_of(["2025-05-26-gpu1-x-2"]) == "2025-05-26"
    assert day_of(["2025-05-26-gpu1", "2025-05-26"]) == "2025-05-26"
    assert day_of(["2025-05-26", "2025-05-27"]) is None          # two days: the whole store
    assert day_of(["2025-05-2"]) is None                         # a prefix of several days
    assert day_of(["undated-dmesg-log-x"]) is None
    assert day_of(["2025-02-30"]) is None                        # not a date
    assert day_of([]) is None


def test_the_reach_of_the_built_in_correlations() -> None:
    r = Reach.of(load_correlations())
    # the launch configurations are bound up to 30 days from a CUDA OOM
    assert "server_config" in r.always
    assert r.seconds == 15 * 60
    assert "service_killed" not in r.always and "segfault" not in r.always
    # steps that may bind untimed events (every window holds those) bind timed ones within their window: a
    # DataLoader reading's traceback (1 min), an unanchored OOM kill's (2 min)
    assert "python_traceback" not in r.always and "oom_kill" not in r.always


def _dataloader_days(tmp: Path) -> Path:
    """DataLoader workers killed on three days, their tracebacks timed (one past midnight) and untimed."""
    tb = ("kind: python_traceback, severity: error,"
          " fields: {exception: RuntimeError, message: 'DataLoader worker (pid %d) is killed'}")
    killed = "kind: dataloader_worker_killed, severity: error, fields: {pid: %d, signal: KILL, signal_text: Killed}"
    lines = ["host: gpu3", "events:",
             "  - {at: '2025-05-25T09:31:12', kind: oom_kill, path: dmesg.log, severity: critical,"
             " fields: {pid: 51207, process: w}}",
             "  - {at: '2025-05-25T09:31:15', path: train.log, %s}" % (killed % 51207),
             "  - {at: '2025-05-25T09:31:15', path: train.log, %s}" % (tb % 51207),
             "  - {at: '2025-05-26T23:59:50', path: train.log, %s}" % (killed % 61000),
             "  - {at: '2025-05-27T00:00:20', path: train.log, %s}" % (tb % 61000),
             "  - {at: null, path: stderr.txt, ts_source: none, %s}" % (tb % 70000),
             "  - {at: '2025-05-28T12:00:00', path: train.log, %s}" % (tb % 80000)]
    p = tmp / "dataloader-days.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_a_days_dataloader_incidents_from_its_window_are_the_stores(tmp_path: Path) -> None:
    """Tracebacks are read within a day's window (and every untimed one), not all of them for any day: the
    incidents are the same, the one whose traceback lies past midnight too."""
    store = store_from_timeline(tmp_path, _dataloader_days(tmp_path))
    every = build_incidents(store)
    days = sorted({(i.start or i.id)[:10] for i in every})
    assert days == ["2025-05-25", "2025-05-26", "2025-05-28"]
    late = [i for i in every if (i.start or "")[:10] == "2025-05-26"]
    assert len(late) == 1 and {e.kind for e in late[0].events} == {"dataloader_worker_killed", "python_traceback"}
    for day in DAYS:
        assert _js(find_incidents(store, [day]) if day in days else []) == _js(
            [i for i in every if (i.start or i.id)[:10] == day]), day


def test_window_holds() -> None:
    w = Window.around("2025-05-26", 7200.0, 3600.0)
    d0 = w.day_start

    def sp(first: float, last: float, untimed: bool = False, date: str = "2025-05-26", host: str = "h") -> Span:
        return Span(first, last, untimed, date, host)

    assert w.holds([sp(d0 + 100, d0 + 200)])
    assert not w.holds([sp(d0 + 100, d0 + 200, True)])                       # an untimed event in the day's
    assert w.reach_back([sp(d0 + 100, d0 + 200, True)]) == -1e18 - 3600.0     # ... of a host with no first known
    assert w.holds([sp(d0 + 100, d0 + 200, True)], {"h": d0 - 3000})          # ... whose first cluster is inside
    assert not w.holds([sp(d0 + 100, d0 + 200, True)], {"h": d0 - 7000})      # ... too near the edge
    assert w.reach_back([sp(d0 + 100, d0 + 200, True)], {"h": d0 - 7000}) == d0 - 7000 - 3600
    assert w.holds([sp(d0 - 86400, d0 - 86000, True, "2025-05-25")])          # ... in another day's: harmless
    assert not w.holds([sp(d0 + 80000, w.hi - 100)])                          # reaches the far edge
    assert w.holds([sp(d0 + 86400 + 10, w.hi - 100, date="2025-05-27")])      # ... starting the next day
    assert not w.holds([sp(w.lo + 10, d0 - 100, date="2025-05-25")])          # from the near edge to the day
    assert w.holds([sp(w.lo + 10, w.lo + 100, date="2025-05-25")])
    assert w.wider().lo == d0 - 7200.0 * dayscope.GROWTH
    assert w.wider(d0 - 86400 * 3).lo == d0 - 86400 * 3                       # back to what an untimed event needs


@pytest.mark.parametrize("spec", ["2025-05-25", "2025-05-25-h"])
def test_a_spec_naming_no_incident_of_the_day_names_the_stores(tmp_path: Path, spec: str) -> None:
    """Nothing found in a day's window: the error names every incident of the store, as before."""
    store = store_from_timeline(tmp_path, "seed_full.yaml")
    every = build_incidents(store)
    day = "2025-05-20" + spec[10:]
    with pytest.raises(IncidentNotFound) as got:
        find_incidents(store, [day])
    with pytest.raises(IncidentNotFound) as want:
        select_incidents(every, day)
    assert str(got.value) == str(want.value)
