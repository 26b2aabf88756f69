"""`--host` and `--unit` of `timeline` and `events`: a name or a glob, and a unit named as `journalctl -u` and
`systemctl` name it (without `.service`)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.query import name_filter

INCIDENT = Path(__file__).resolve().parent.parent / "samples" / "incident"

UNITS = pl.DataFrame({"unit": ["sglang-k26.service", "sglang-k26-eagle3.service", "sglang-k26.socket",
                               "sglang-k26", "ssh.service", None]})


@pytest.mark.parametrize("values, unit, expected", [
    (["sglang-k26.service"], True, ["sglang-k26.service"]),
    (["sglang-k26"], True, ["sglang-k26.service", "sglang-k26"]),      # as journalctl -u reads it
    (["sglang-k26"], False, ["sglang-k26"]),                           # a host is only itself
    (["sglang-k26.socket"], True, ["sglang-k26.socket"]),              # a type given is kept
    (["sglang-k26*"], True, ["sglang-k26.service", "sglang-k26-eagle3.service", "sglang-k26.socket", "sglang-k26"]),
    (["ssh", "*eagle?.service"], True, ["sglang-k26-eagle3.service", "ssh.service"]),
    (["a.b"], True, []),                                                # dots in a name are not a regex's
    (["nothing"], True, []),
])
def test_name_filter(values: list[str], unit: bool, expected: list[str]) -> None:
    got = UNITS.filter(name_filter("unit", values, unit=unit)).get_column("unit").to_list()
    assert sorted(got) == sorted(expected)


def test_a_dot_is_literal_in_a_glob() -> None:
    df = pl.DataFrame({"host": ["gpu-a07", "gpu-a07x", "gpuXa07"]})
    assert df.filter(name_filter("host", ["gpu-a0?"])).get_column("host").to_list() == ["gpu-a07"]
    assert df.filter(name_filter("host", ["gpu.a07"])).height == 0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("names") / "store"
    assert CliRunner().invoke(main, ["--store", str(where), "ingest", "-q", str(INCIDENT)]).exit_code == 0
    return where


def _timeline(store: Path, *args: str) -> list[str]:
    r = CliRunner().invoke(main, ["--store", str(store), "timeline", "--format", "jsonl", "--since", "2025-05-25",
                                  "--until", "2025-05-26", *args])
    assert r.exit_code == 0, r.output
    return r.stdout.splitlines()


def test_the_timeline_takes_a_unit_without_its_suffix_and_globs(store: Path) -> None:
    exact = _timeline(store, "--unit", "sglang-k26.service")
    assert exact and all('"unit":"sglang-k26.service"' in line for line in exact)
    assert _timeline(store, "--unit", "sglang-k26") == exact
    both = _timeline(store, "--unit", "sglang-k26*")
    assert set(exact) < set(both) and any("sglang-k26-eagle3.service" in line for line in both)
    assert _timeline(store, "--host", "dflash-*", "--unit", "sglang-k26") == exact
    assert _timeline(store, "--host", "other-*", "--unit", "sglang-k26") == []


def test_events_take_a_unit_without_its_suffix(store: Path) -> None:
    def events(*args: str) -> str:
        r = CliRunner().invoke(main, ["--store", str(store), "events", "--json", *args])
        assert r.exit_code == 0, r.output
        return r.stdout

    assert events("--unit", "sglang-k26") == events("--unit", "sglang-k26.service")
    assert '"unit": "sglang-k26.service"' in events("--unit", "sglang-k26") or \
        '"unit":"sglang-k26.service"' in events("--unit", "sglang-k26")
