"""`forensics report`: options, outputs and exit codes (incidents come from a stub correlate)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from fixtures.incident_fixture import seed_incident

from forensics import cli_report, sourcefile
from forensics.store import Store


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # noqa: ANN201
    inc = seed_incident()

    def resolve_incidents(store, spec: str):  # noqa: ANN001, ANN202
        return [inc] if inc.id.startswith(spec) or spec == inc.id[:10] else []

    stub = types.ModuleType("forensics.correlate")
    stub.resolve_incidents = resolve_incidents  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "forensics.correlate", stub)

    Store(tmp_path / "store").init()   # a store, empty: the incidents come from the stub

    @click.group()
    @click.pass_context
    def main(ctx: click.Context) -> None:
        ctx.obj = {"store": str(tmp_path / "store")}

    cli_report.register(main)
    runner = CliRunner()

    def invoke(*args: str) -> click.testing.Result:
        return runner.invoke(main, ["report", *args], catch_exceptions=False)

    return invoke


def test_markdown_to_stdout(run) -> None:  # noqa: ANN001
    r = run("--incident", "2025-05-25")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("# sglang-k26-eagle3.service killed by the kernel OOM killer")
    assert "Generated at" not in r.output


def test_html_and_json_to_files(run, tmp_path: Path) -> None:  # noqa: ANN001
    out = tmp_path / "r.html"
    assert run("--incident", "2025-05-25-dflash", "--format", "html", "-o", str(out)).exit_code == 0
    assert out.read_text().startswith("<!doctype html>")
    js = tmp_path / "r.json"
    assert run("--incident", "2025-05-25", "--format", "json", "-o", str(js), "--tz", "Asia/Tokyo").exit_code == 0
    doc = json.loads(js.read_text())
    assert doc["schema_version"] == 1 and doc["timezone"] == "Asia/Tokyo"
    assert doc["incidents"][0]["timeline"][0]["ts_local"].endswith("+09:00")


def test_no_match_exits_1_and_says_what_exists(run) -> None:  # noqa: ANN001
    r = run("--incident", "2024-01-01")
    assert r.exit_code == 1
    assert "no incident matches '2024-01-01'" in r.output and "forensics incidents" in r.output


@pytest.mark.parametrize("args", [("--tz", "Mars/Olympus"), ("--max-chars", "-5"), ("--format", "pdf"),
                                  ("--generated-at", "yesterday"), ("--template", "/nonexistent/dir")])
def test_bad_usage_exits_2(run, args: tuple[str, str]) -> None:  # noqa: ANN001
    r = run("--incident", "2025-05-25", *args)
    assert r.exit_code == 2, r.output


def test_generated_at(run) -> None:  # noqa: ANN001
    r = run("--incident", "2025-05-25", "--generated-at", "2025-05-26T11:00:00+02:00")
    assert "Generated at 2025-05-26T09:00:00Z." in r.output
    assert "Generated at 20" in run("--incident", "2025-05-25", "--generated-at", "now").output


def test_redact_map_is_saved_and_reused(run, tmp_path: Path) -> None:  # noqa: ANN001
    m = tmp_path / "map.json"
    r1 = run("--incident", "2025-05-25", "--redact-map", str(m))
    assert r1.exit_code == 0 and "dflash-train" not in r1.output and "host-1" in r1.output
    assert json.loads(m.read_text())["map"]["host"] == {"dflash-train": "host-1"}
    assert run("--incident", "2025-05-25", "--redact-map", str(m)).output == r1.output
    m.write_text("garbage")
    assert run("--incident", "2025-05-25", "--redact-map", str(m)).exit_code == 2


def test_broken_or_unsafe_user_template_exits_2(run, tmp_path: Path) -> None:  # noqa: ANN001
    d = tmp_path / "tpl"
    d.mkdir()
    (d / "report.md.j2").write_text("{{ report.__class__.__init__.__globals__ }}")
    r = run("--incident", "2025-05-25", "--template", str(d))
    assert r.exit_code == 2 and "template error" in r.output
    (d / "report.md.j2").write_text("{% for x in %}")
    assert run("--incident", "2025-05-25", "--template", str(d)).exit_code == 2
    (d / "report.md.j2").write_text("Custom: {{ report.title }}\n")
    r = run("--incident", "2025-05-25", "--template", str(d))
    assert r.exit_code == 0 and r.output.startswith("Custom: sglang-k26-eagle3.service")


def test_read_source_file_checks_the_hash(tmp_path: Path) -> None:
    import gzip
    import hashlib
    from dataclasses import replace

    src = seed_incident().sources[0]
    p = tmp_path / "j.log"
    p.write_text("one\ntwo\r\nthree\n")
    good = replace(src, path=str(p), sha256=hashlib.sha256(p.read_bytes()).hexdigest())
    assert list(sourcefile.read_source_file(good) or [])[:3] == ["one", "two", "three"]
    assert sourcefile.read_source_file(replace(good, sha256="0" * 64)) is None
    assert sourcefile.read_source_file(replace(good, path=str(tmp_path / "gone.log"))) is None
    gz = tmp_path / "j.log.gz"
    gz.write_bytes(gzip.compress(b"a\nb\n"))
    assert list(sourcefile.read_source_file(replace(good, path=str(gz),
                                                     sha256=hashlib.sha256(gz.read_bytes()).hexdigest())) or [])[:2] \
        == ["a", "b"]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(min_value=1, max_value=16))
def test_file_lines_are_the_lines_of_the_decoded_file(raw: bytes, chunk: int) -> None:
    """The lazy line index a report reads cited lines from gives the lines of the whole decoded file, whatever
    the chunk size (lines longer than a chunk, CRLF, invalid UTF-8, no final newline)."""
    from forensics.sourcefile import FileLines

    want = [line.rstrip("\r") for line in raw.decode("utf-8", errors="replace").split("\n")]
    lines = FileLines(raw, chunk)
    assert len(lines) == len(want) and [lines[i] for i in range(len(want))] == want
