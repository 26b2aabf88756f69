"""Correlation reads the events of a step-only kind (no correlation's anchor: a kubelet's probe failures and
back-offs) only near an anchor that may bind them, and the incidents are the same as when it reads them all."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from test_kubernetes import LOADING, SGLANG, UID

import forensics.incidents as incidents
from forensics.cli import main
from forensics.correlation_packs import Join, load_correlations
from forensics.correlate_store import EventSource
from forensics.dayscope import Reach
from forensics.clustering import CONTEXT_KINDS
from forensics.incidents import ARCH_KINDS, find_incidents, incident_json
from forensics.nearanchor import StepOnly
from forensics.store import Store


def _builtin() -> StepOnly:
    corrs = load_correlations()
    return StepOnly.of(corrs, Reach.of(corrs, ARCH_KINDS | {"server_config"}).always | ARCH_KINDS | CONTEXT_KINDS
                       | {"cuda_oom"})


def test_the_step_only_kinds_of_the_built_in_correlations() -> None:
    so = _builtin()
    anchors = {k for c in load_correlations() for k in c.step(c.anchor).kinds}
    # the kubelet's probe failures and back-offs are bound only by the firings of the correlations anchored at a
    # kill, a death, a driver or hook failure, within their windows
    assert {"health_check_failed", "crash_loop_backoff"} <= set(so.kinds)
    kinds, seconds = so.kinds["health_check_failed"]
    assert "probe_kill" in kinds and seconds >= 900.0
    assert not set(so.kinds) & anchors                     # an anchor is read wherever it is
    assert not set(so.kinds) & (CONTEXT_KINDS | ARCH_KINDS)  # clustering and the configuration review read them
    assert "package_changed" not in so.kinds               # a driver upgrade binds it for days: read at any time


def test_a_kind_a_step_binds_across_hosts_is_read_whole() -> None:
    by_id = {c.id: c for c in load_correlations()}
    local = by_id["k8s.probe_kill_refused"]
    # the NVIDIA hook's correlation as if it joined on the pod alone: a back-off of any host could be bound
    hook = by_id["nvidia.container_cli"]
    fleet = replace(hook, join=Join(same=("pod",)), steps=tuple(replace(s, join=None) for s in hook.steps))
    so = StepOnly.of([local, fleet], {"server_start"})
    assert set(so.kinds) == {"health_check_failed", "container_stop", "container_died"}
    assert so.kinds["health_check_failed"] == (frozenset({"probe_kill"}), 900.0 + local.slack + 1.0)
    assert "crash_loop_backoff" in StepOnly.of([local], {"server_start"}).kinds


def test_a_kind_an_untimed_step_binds_is_read_near_its_anchors() -> None:
    """`untimed: true` lets a step bind events with no time too (always read); the timed ones it binds within its
    window, like any step: a step-only kind all the same, as the day windows have it."""
    c = {c.id: c for c in load_correlations()}["k8s.probe_kill_refused"]
    untimed = replace(c, steps=tuple(replace(s, untimed=True) if s.name != c.anchor else s for s in c.steps))
    assert StepOnly.of([untimed], {"server_start"}).kinds == StepOnly.of([c], {"server_start"}).kinds
    assert "health_check_failed" in StepOnly.of([untimed], {"server_start"}).kinds


def test_only_the_events_near_an_anchor_of_their_host_are_read() -> None:
    so = StepOnly({"health_check_failed": (frozenset({"probe_kill"}), 60.0)})
    s = 1_000_000
    rows = [  # _seq, kind, host, t_us, significant, archish
        (0, "probe_kill", "a", 1000 * s, True, False),
        (1, "health_check_failed", "a", 950 * s, False, False),    # 50 s before the kill: read
        (2, "health_check_failed", "a", 1061 * s, False, False),   # 61 s after: left out
        (3, "health_check_failed", "b", 1000 * s, False, False),   # another host's: left out
        (4, "health_check_failed", "a", None, False, False),       # untimed: read
        (5, "health_check_failed", None, 1000 * s, False, False),  # no host: read
        (6, "health_check_failed", "a", 5000 * s, True, False),    # significant: read
        (7, "crash_loop_backoff", "a", 9000 * s, False, False),    # not step-only: read
        (8, "health_check_failed", "b", 9000 * s, False, True),    # may name an architecture: read
    ]
    narrow = pl.DataFrame(rows, schema={"_seq": pl.UInt32, "kind": pl.String, "host": pl.String, "t_us": pl.Int64,
                                        "significant": pl.Boolean, "archish": pl.Boolean}, orient="row")
    assert so.select(narrow).get_column("_seq").to_list() == [0, 1, 4, 5, 6, 7, 8]
    assert so.select(narrow.filter(pl.col("kind") != "probe_kill")).get_column("_seq").to_list() == [4, 5, 6, 7, 8]


def _noise(day_hms: list[str], host: str, pod: str) -> list[str]:
    """Readiness probe failures of another pod (no kill follows them)."""
    return [f'May 25 {hms} {host} kubelet[4052]: I0525 {hms}.100000    4052 prober.go:107] "Probe failed" '
            f'probeType="Readiness" pod="default/{pod}" podUID="{UID}" containerName="web" probeResult="failure" '
            f'output="Get \\"http://10.244.0.9:8080/healthz\\": context deadline exceeded"' for hms in day_hms]


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    far = [f"{h:02d}:{m:02d}:05" for h in (3, 9, 15) for m in range(0, 60, 5)]
    near = ["20:11:00", "20:14:00"]
    lines = sorted([*LOADING, *_noise(far + near, "gpu-node-3", "web-1")], key=lambda x: x[7:15])
    other = _noise(far + near, "gpu-node-4", "web-2")
    (tmp_path / "journal.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "journal-4.log").write_text("\n".join(other) + "\n")
    (tmp_path / "sglang-llama-0.log").write_text(SGLANG)
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "store"), "ingest", "--year", "2025",
                                  *(str(tmp_path / n) for n in ("journal.log", "journal-4.log", "sglang-llama-0.log"))])
    assert r.exit_code == 0, r.output
    return Store(tmp_path / "store")


def _incidents(store: Store, spec: list[str], near: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], int]:
    monkeypatch.setattr(incidents, "NEAR_ANCHORS", near)
    prepared = []
    real = EventSource._prepare

    def spy(self, rows):  # noqa: ANN001, ANN202
        prepared.append(rows.len())
        return real(self, rows)

    monkeypatch.setattr(EventSource, "_prepare", spy)
    incs = find_incidents(store, spec)
    return [json.dumps(incident_json(i), sort_keys=True) for i in incs], sum(prepared)


@pytest.mark.parametrize("spec", [["2025-05-25"], []])
def test_the_incidents_are_those_of_reading_every_event(store: Store, spec: list[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    got, read = _incidents(store, spec, True, monkeypatch)
    want, read_all = _incidents(store, spec, False, monkeypatch)
    assert got == want
    assert any("killed by the kubelet" in x for x in got)
    # the 72 readiness failures of the two pods far from the kill, and the 2 of the other host near it, are not
    # prepared
    assert read_all - read == 72 + 2, (read_all, read)
