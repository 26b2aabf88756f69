"""`--host` and `--unit` of `timeline` and `events`: a name or a glob, and a unit named as `journalctl -u` and
`systemctl` name it (without `.service`)."""

from __future__ import annotations

import json
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
    assert r.exit_code == (0 if r.stdout else 1), r.output  # an empty answer is exit 1, as `events` has it
    assert r.stdout or "no records matched" in r.stderr
    return r.stdout.splitlines()


def _rows(lines: list[str]) -> list[dict]:
    return [json.loads(line) for line in lines]


def test_the_timeline_takes_a_unit_without_its_suffix_and_globs(store: Path) -> None:
    exact = _timeline(store, "--unit", "sglang-k26.service")
    assert exact
    assert _timeline(store, "--unit", "sglang-k26") == exact
    both = _timeline(store, "--unit", "sglang-k26*")
    assert set(exact) < set(both) and any("sglang-k26-eagle3.service" in line for line in both)
    # a host keeps the lines that name it and those the report takes to be its: SGLang's own log names none,
    # and the store holds one host
    assert any(json.loads(line)["host"] is None for line in exact)
    assert _timeline(store, "--host", "dflash-*", "--unit", "sglang-k26") == exact
    assert _timeline(store, "--host", "other-*", "--unit", "sglang-k26") == []


def test_a_units_own_output_is_in_its_timeline(store: Path) -> None:
    """`--unit sglang-k26` shows what `journalctl -u sglang-k26` shows: the systemd lines naming the unit, and
    the lines that name none where the report takes them to be its own: the python3 lines of the journal whose
    systemd lines name only it, and SGLang's log named after it. Not another unit's, nor the kernel's."""
    rows = _rows(_timeline(store, "--unit", "sglang-k26"))
    named = [r for r in rows if r["unit"] is not None]
    assert named and {r["unit"] for r in named} == {"sglang-k26.service"}
    assert {Path(r["path"]).name for r in rows if r["unit"] is None} == {"journal-k26.log", "sglang-k26.log"}
    # the root cause, in both: nvcc's refusal of compute_120
    assert {Path(r["path"]).name for r in rows if "Unsupported gpu architecture 'compute_120'" in r["message"]} == \
        {"journal-k26.log", "sglang-k26.log"}
    assert [r["ident"] for r in rows if Path(r["path"]).name == "journal-k26.log" and r["unit"] is None] and \
        all(r["ident"] == "python3" for r in rows if Path(r["path"]).name == "journal-k26.log" and r["unit"] is None)
    assert not any(r["format"].startswith("dmesg") or r["ident"] == "kernel" for r in rows)
    # the other unit's output is its own
    eagle = _rows(_timeline(store, "--unit", "sglang-k26-eagle3"))
    assert eagle and not {json.dumps(r) for r in eagle} & {json.dumps(r) for r in rows}
    assert not any(Path(r["path"]).name in ("journal-k26.log", "sglang-k26.log") for r in eagle)
    # a unit nothing names: nothing
    assert _timeline(store, "--unit", "nothing") == []


def test_events_take_a_unit_without_its_suffix(store: Path) -> None:
    def events(*args: str) -> str:
        r = CliRunner().invoke(main, ["--store", str(store), "events", "--json", *args])
        assert r.exit_code == 0, r.output
        return r.stdout

    assert events("--unit", "sglang-k26") == events("--unit", "sglang-k26.service")
    assert '"unit": "sglang-k26.service"' in events("--unit", "sglang-k26") or \
        '"unit":"sglang-k26.service"' in events("--unit", "sglang-k26")
    got = json.loads(events("--unit", "sglang-k26"))
    # its root cause and its readiness, from lines that name no unit, as the report counts them
    arch = [e for e in got if e["kind"] == "flashinfer_arch_unsupported"]
    assert {Path(e["source"]).name for e in arch} == {"journal-k26.log", "sglang-k26.log"}
    assert all(e["unit"] is None for e in arch) and all(e["fields"]["arch"] == "sm_120" for e in arch)
    assert any(e["kind"] == "server_ready" for e in got)
    # not the other unit's, nor a kernel event's
    assert not any(e["unit"] == "sglang-k26-eagle3.service" for e in got)
    assert not any(e["kind"] == "oom_kill" for e in got)
    eagle = json.loads(events("--unit", "sglang-k26-eagle3"))
    assert any(e["kind"] == "service_killed" for e in eagle) and not any(e["kind"] == "flashinfer_arch_unsupported"
                                                                         for e in eagle)


def test_the_events_listing_shows_a_unit_taken_with_a_mark(store: Path) -> None:
    r = CliRunner().invoke(main, ["--store", str(store), "events", "--kind", "flashinfer_arch_unsupported",
                                  "--kind", "service_killed"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    arch = [x for x in lines if "flashinfer_arch_unsupported" in x]
    assert len(arch) == 2 and all(" sglang-k26.service~  " in x for x in arch)
    killed = [x for x in lines if "service_killed" in x and "journal-k26.log" in x]
    assert killed and all(" sglang-k26.service  " in x for x in killed)   # named by its line: no mark
    assert "unit~: 2 of their lines name no unit" in r.stderr


def test_a_line_without_a_host_is_the_only_hosts(store: Path) -> None:
    """The store holds one host: every line that names none (SGLang's log, the unit files, the pasted status) is
    its, for `--host` as for the report; the events listing marks the host so taken with `~`."""
    every = _rows(_timeline(store))
    mine = _rows(_timeline(store, "--host", "dflash-train"))
    assert mine == every and any(r["host"] is None for r in mine)
    assert _timeline(store, "--host", "gpu-*") == []
    r = CliRunner().invoke(main, ["--store", str(store), "events", "--host", "dflash-train",
                                  "--kind", "flashinfer_arch_unsupported"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and sum(" dflash-train~ sglang-k26.service~  " in x for x in lines) == 1
    assert sum(" dflash-train sglang-k26.service~  " in x for x in lines) == 1
    assert "host~: 1 of their lines name no host" in r.stderr


def test_a_file_naming_one_host_lends_it_to_its_lines_that_name_none(tmp_path: Path) -> None:
    """Two hosts: a file that names one host on some lines and none on others (a pasted `systemctl status`) has
    those lines counted as that host's; a file naming no host at all is no known host's."""
    a = tmp_path / "status-a.txt"
    a.write_text("\u00d7 x.service - X\n     Active: failed (Result: signal) since Sun 2025-05-25 20:17:19 UTC; 1min ago\n"
                 "\nMay 25 20:17:19 gpu-a systemd[1]: x.service: Main process exited, code=killed, status=9/KILL\n")
    b = tmp_path / "b.log"
    b.write_text("2025-05-25T20:00:00+00:00 gpu-b sshd[1]: hello\n")
    where = tmp_path / "st"
    assert CliRunner().invoke(main, ["--store", str(where), "ingest", "-q", str(a), str(b)]).exit_code == 0

    def tl(*args: str) -> list[dict]:
        r = CliRunner().invoke(main, ["--store", str(where), "timeline", "--format", "jsonl", *args])
        assert r.exit_code == 0, r.output
        return _rows(r.stdout.splitlines())

    of_a = tl("--host", "gpu-a")
    assert {Path(r["path"]).name for r in of_a} == {"status-a.txt"}
    assert any(r["host"] is None for r in of_a) and len(of_a) == len([r for r in tl() if "status-a" in r["path"]])
    assert {Path(r["path"]).name for r in tl("--host", "gpu-b")} == {"b.log"}


def test_a_host_glob_of_only_stars_is_every_line() -> None:
    """Every line was written on some host, named or not: `--host '*'` keeps the lines that name none (a store of
    SGLang logs alone held no line for it before), while `gpu-*` does not guess; not every line was written by a
    unit, so `--unit '*'` keeps only the lines of one."""
    df = pl.DataFrame({"host": ["gpu-a07", None], "unit": ["x.service", None]})
    for glob in ("*", "**"):
        assert df.filter(name_filter("host", [glob], host=True)).height == 2
    assert df.filter(name_filter("host", ["gpu-*"], host=True)).get_column("host").to_list() == ["gpu-a07"]
    assert df.filter(name_filter("host", ["*"])).height == 1  # a column that is no host's: null is no match
    assert df.filter(name_filter("unit", ["*"], unit=True)).get_column("unit").to_list() == ["x.service"]


def test_the_timeline_and_events_of_a_store_naming_no_host_answer_a_star(tmp_path: Path) -> None:
    log = INCIDENT / "sglang-k26.log"
    where = tmp_path / "st"
    assert CliRunner().invoke(main, ["--store", str(where), "ingest", "-q", str(log)]).exit_code == 0
    every = CliRunner().invoke(main, ["--store", str(where), "timeline", "--format", "jsonl"])
    star = CliRunner().invoke(main, ["--store", str(where), "timeline", "--format", "jsonl", "--host", "*"])
    assert every.exit_code == star.exit_code == 0 and star.stdout == every.stdout
    assert all(r["host"] is None for r in _rows(star.stdout.splitlines()))
    none = CliRunner().invoke(main, ["--store", str(where), "timeline", "--host", "gpu-*"])
    assert none.exit_code == 1 and none.stderr == "no records matched\n"
    events = CliRunner().invoke(main, ["--store", str(where), "events", "--json"])
    star = CliRunner().invoke(main, ["--store", str(where), "events", "--json", "--host", "*"])
    assert events.exit_code == star.exit_code == 0 and star.stdout == events.stdout != "[]\n"
