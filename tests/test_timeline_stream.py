"""A timeline printed a window at a time is the text of printing it whole, in every streamed format."""

from __future__ import annotations

import io
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import forensics.query as query
from forensics.cli import main
from forensics.export import write_rows
from forensics.query import timeline_frame, timeline_stream, timeline_windows
from forensics.store import Store

UTC = timezone.utc


def _log(tmp: Path) -> Path:
    """Two hosts' journals over three hours, lines on window edges, an odd row (a control character), a line
    that is not ASCII, the same second in both files, a multi-line record."""
    lines_a, lines_b = [], []
    t = datetime(2025, 5, 25, 20, 0, 0)
    for i in range(180):
        at = t + timedelta(minutes=i)
        lines_a.append(f"{at:%b %d %H:%M:%S} gpu1 app[{i + 10}]: step {i} value={i * 7}")
        if i % 3 == 0 and i >= 120:      # the long host name only in the last hour: the widths are the whole span's
            lines_b.append(f"{at:%b %d %H:%M:%S} gpu2-with-a-much-longer-name kubelet[99]: probe {i}")
    lines_a.append("May 25 21:30:00 gpu1 app[5]: odd \x07 bell")
    lines_a.append("May 25 21:45:00 gpu1 app[6]: grüße, 温度 \"quoted\", a,b")  # not ASCII; CSV's own characters
    a, b = tmp / "a.log", tmp / "b.log"
    a.write_text("\n".join(lines_a) + "\n")
    b.write_text("\n".join(lines_b) + "\n")
    return tmp


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    d = _log(tmp_path)
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "st"), "ingest", "--year", "2025",
                                  str(d / "a.log"), str(d / "b.log")])
    assert r.exit_code == 0, r.output
    return Store(tmp_path / "st")


@pytest.mark.parametrize("window", [timedelta(minutes=7), timedelta(minutes=60), timedelta(hours=5)])
@pytest.mark.parametrize("fmt", ["table", "jsonl", "json", "csv", "timesketch"])
def test_streamed_timeline_is_the_whole_ones_text(store: Store, monkeypatch, window: timedelta,  # noqa: ANN001
                                                  fmt: str) -> None:
    monkeypatch.setattr(query, "WINDOW", window)
    since, until = datetime(2025, 5, 25, 20, 10, tzinfo=UTC), datetime(2025, 5, 25, 22, 40, tzinfo=UTC)
    whole = io.StringIO()
    write_rows(timeline_frame(store, since, until), fmt, whole, "records")
    r = CliRunner().invoke(main, ["--store", str(store.path), "timeline", "--since", "2025-05-25 20:10",
                                  "--until", "2025-05-25 22:40", "--format", fmt])
    assert r.exit_code == 0, r.output
    assert r.output == whole.getvalue()
    assert "\\x07" in r.output or fmt != "table"
    # with a filter, and with nothing in the span
    for extra in (["--host", "gpu2-with-a-much-longer-name"], ["--grep", "step 1[0-9]$"]):
        whole = io.StringIO()
        host = extra[1] if extra[0] == "--host" else None
        pattern = extra[1] if extra[0] == "--grep" else None
        n = write_rows(timeline_frame(store, since, until, host=host, pattern=pattern), fmt, whole, "records").rows
        r = CliRunner().invoke(main, ["--store", str(store.path), "timeline", "--since", "2025-05-25 20:10",
                                      "--until", "2025-05-25 22:40", "--format", fmt, *extra])
        assert r.exit_code == (0 if n else 1) and r.stdout == whole.getvalue()
    assert n == 0  # the last filter keeps nothing: exit 1, said on stderr, and the format's empty text on stdout
    assert r.stderr == "no records matched\n"
    empty = io.StringIO()
    write_rows(timeline_frame(store, datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 2, tzinfo=UTC)), fmt, empty,
               "records")
    r = CliRunner().invoke(main, ["--store", str(store.path), "timeline", "--since", "2024-01-01",
                                  "--until", "2024-01-02", "--format", fmt])
    assert r.exit_code == 1 and r.stdout == empty.getvalue() and r.stderr == "no records matched\n"


def test_the_windows_cover_the_span_once(monkeypatch) -> None:  # noqa: ANN001
    a, b = datetime(2025, 5, 25, 20, 10, tzinfo=UTC), datetime(2025, 5, 25, 23, 0, tzinfo=UTC)
    w = timeline_windows(a, b)
    assert w[0][0] == a and w[-1][1] == b and all(x[1] == y[0] for x, y in zip(w, w[1:]))
    assert [y - x for x, y in w[:-1]] == [query.WINDOW] * (len(w) - 1)
    long = timeline_windows(a, a + timedelta(days=30))
    assert len(long) == query.MAX_WINDOWS
    assert timeline_windows(b, a) == []


def test_the_stream_counts_and_measures_what_it_prints(store: Store) -> None:
    since, until = datetime(2025, 5, 25, 20, 0, tzinfo=UTC), datetime(2025, 5, 25, 23, 0, tzinfo=UTC)
    tl = timeline_stream(store, since, until)
    frames = list(tl.frames)
    whole = timeline_frame(store, since, until)
    rows, longest_host, _ = tl.widths()
    assert rows == whole.height == sum(f.height for f in frames) and len(frames) == 3
    assert "gpu2-with-a-much-longer-name" not in frames[0]["host"].to_list()
    assert longest_host == len("gpu2-with-a-much-longer-name")
    assert [m for f in frames for m in f["message"].to_list()] == whole["message"].to_list()


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
@pytest.mark.parametrize("fmt", ["table", "jsonl", "json", "csv"])
def test_streamed_bytes_reach_any_text_stream(store: Store, encoding: str, fmt: str) -> None:
    """The streamed writers put UTF-8 bytes straight into a UTF-8 stream's buffer, and decode them for any other
    stream: the text is the same either way (a latin-1 terminal shows what it can encode)."""
    since, until = datetime(2025, 5, 25, 20, 10, tzinfo=UTC), datetime(2025, 5, 25, 22, 40, tzinfo=UTC)
    whole = io.StringIO()
    write_rows(timeline_frame(store, since, until), fmt, whole, "records")
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding=encoding, errors="backslashreplace", newline="")
    write_rows(timeline_frame(store, since, until), fmt, out, "records")
    out.flush()
    expected = whole.getvalue()
    assert "grüße, 温度" in expected       # every format writes the text itself, not escapes
    assert raw.getvalue() == expected.encode(encoding, errors="backslashreplace")


@pytest.fixture()
def open_store(tmp_path: Path) -> Store:
    """The two journals, and a file whose lines have no time (a paste): untimed records."""
    d = _log(tmp_path)
    (d / "paste.txt").write_text("first pasted line\nsecond, no time either\n")
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "st"), "ingest", "--year", "2025",
                                  str(d / "a.log"), str(d / "b.log"), str(d / "paste.txt")])
    assert r.exit_code == 0, r.output
    return Store(tmp_path / "st")


@pytest.mark.parametrize("bounds", [(), ("--since", "2025-05-25 21:10"), ("--until", "2025-05-25 21:10")])
@pytest.mark.parametrize("fmt", ["table", "jsonl", "json", "csv", "timesketch"])
def test_an_open_timeline_streams_the_whole_ones_text(open_store: Store, monkeypatch, bounds: tuple,  # noqa: ANN001
                                                       fmt: str) -> None:
    """Without --since or --until the stream runs from the records' first time or to their last; with
    neither, the untimed records come last, in file order, as printing the whole timeline puts them."""
    monkeypatch.setattr(query, "WINDOW", timedelta(minutes=25))
    when = {"--since": None, "--until": None}
    if bounds:
        when[bounds[0]] = datetime.fromisoformat(bounds[1]).replace(tzinfo=UTC)
    whole = io.StringIO()
    frame = timeline_frame(open_store, when["--since"], when["--until"])
    write_rows(frame, fmt, whole, "records")
    r = CliRunner().invoke(main, ["--store", str(open_store.path), "timeline", *bounds, "--format", fmt])
    assert r.exit_code == 0, r.output
    assert r.output == whole.getvalue()
    untimed = frame.filter(pl.col("ts").is_null()).height
    assert untimed == (2 if not bounds else 0)
    if not bounds:
        assert frame["ts"].tail(2).is_null().all()
        assert ("second, no time either" in r.output) == (fmt != "timesketch")  # Timesketch leaves them out
    tl = timeline_stream(open_store, when["--since"], when["--until"])
    assert len(list(tl.frames)) >= 3           # in windows, not at once


def test_the_lazy_commands_are_those_their_modules_register() -> None:
    """`forensics report` loads only the module of `report`: each lazily registered command is named after the
    module that registers it, and every command a module registers is named."""
    import importlib

    import click

    from forensics.cli import LAZY_COMMANDS

    for module in set(LAZY_COMMANDS.values()):
        group = click.Group()
        importlib.import_module(f"forensics.{module}").register(group)
        assert sorted(group.commands) == sorted(n for n, m in LAZY_COMMANDS.items() if m == module)
    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0 and all(f"  {n} " in r.output for n in LAZY_COMMANDS)


@pytest.mark.parametrize("bounds", [(None, None), (datetime(2025, 5, 25, 20, 0, tzinfo=UTC), None),
                                    (datetime(2025, 5, 25, 20, 0, tzinfo=UTC), datetime(2025, 5, 25, 23, 0, tzinfo=UTC))])
def test_a_source_landing_mid_stream_is_in_every_window_or_in_none(tmp_path: Path, monkeypatch,  # noqa: ANN001
                                                                    bounds: tuple) -> None:
    """The stream reads the manifest once: a source that lands while the windows are being read is not shown
    in part (its records after the window being written only). CI caught this: a reader of `timeline --json`
    saw 400 of a source's 4000 records while four ingests ran."""
    monkeypatch.setattr(query, "WINDOW", timedelta(minutes=20))
    d = _log(tmp_path)
    late = tmp_path / "late.log"
    late.write_text("".join(f"{datetime(2025, 5, 25, 20, 0) + timedelta(minutes=i):%b %d %H:%M:%S} gpu3 late[1]: "
                            f"row {i}\n" for i in range(0, 180, 2)))
    st = tmp_path / "st"
    r = CliRunner().invoke(main, ["--store", str(st), "ingest", "--year", "2025", str(d / "a.log")])
    assert r.exit_code == 0, r.output
    tl = timeline_stream(Store(st), *bounds)
    frames = iter(tl.frames)
    seen = [next(frames)]              # the first window is written (the second is being read ahead) ...
    r = CliRunner().invoke(main, ["--store", str(st), "ingest", "--year", "2025", str(late)])  # ... when one lands
    assert r.exit_code == 0, r.output
    seen += list(frames)
    assert len(seen) >= 4
    paths = pl.concat(seen)["path"].to_list()
    assert str(late) not in paths, "a source that landed mid-stream was shown in part"
    assert paths.count(str(d / "a.log")) == 182
    # the next reading shows all of it
    assert pl.concat(list(timeline_stream(Store(st), *bounds).frames))["path"].to_list().count(str(late)) == 90


def test_every_table_row_says_where_it_is(tmp_path: Path) -> None:
    """The table's rows end with `(path:line)`, `(path:line-line_end)` for a record of several lines: the same
    places as the JSON rows, in the same order (the ingest issue: `path:line` on every row)."""
    incident = Path(__file__).resolve().parent.parent / "samples" / "incident"
    where = tmp_path / "s"
    runner = CliRunner()
    assert runner.invoke(main, ["--store", str(where), "ingest", "-q", str(incident)]).exit_code == 0
    table = runner.invoke(main, ["--store", str(where), "timeline"])
    rows = runner.invoke(main, ["--store", str(where), "timeline", "--format", "jsonl"])
    assert table.exit_code == rows.exit_code == 0
    import json

    places = []
    for r in map(json.loads, rows.stdout.splitlines()):
        span = f"-{r['line_end']}" if r["line_end"] > r["line"] else ""
        places.append(f"({r['path']}:{r['line']}{span})")
    lines = table.stdout.splitlines()
    assert lines[0].endswith(" MESSAGE (WHERE)")
    assert len(lines) - 1 == len(places) > 500
    assert all(line.endswith(" " + place) for line, place in zip(lines[1:], places))
    assert any("-" in p.rsplit(":", 1)[1] for p in places)  # multi-line records are among them


def test_names_to_escape_are_checked_once_for_the_whole_timeline(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The table escapes a host or ident with a control or bidi character. Where the sources' profiles are
    kept, their names are checked once for every window; without them, window by window: the same text."""
    t = datetime(2025, 5, 25, 20, 0, 0)
    odd = tmp_path / "odd.log"
    odd.write_text("".join(f"{t + timedelta(minutes=i):%b %d %H:%M:%S} gpu\u202e9 ap\x1bp[{i}]: step {i}\n"
                           for i in range(0, 180, 7)))
    d = _log(tmp_path)
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "st"), "ingest", "--year", "2025",
                                  str(d / "a.log"), str(d / "b.log"), str(odd)])
    assert r.exit_code == 0, r.output
    store = Store(tmp_path / "st")
    since, until = datetime(2025, 5, 25, 20, 10, tzinfo=UTC), datetime(2025, 5, 25, 22, 40, tzinfo=UTC)
    whole = io.StringIO()
    write_rows(timeline_frame(store, since, until), "table", whole, "records")
    assert "\\u202e" in whole.getvalue() and "\\x1b" in whole.getvalue()
    named: list[bool] = []
    real = query.TimelineStream.names

    def spy(self):  # noqa: ANN001, ANN202
        out = real(self)
        named.append(out is not None)
        return out

    monkeypatch.setattr(query.TimelineStream, "names", spy)
    monkeypatch.setattr(query, "WINDOW", timedelta(minutes=20))
    args = ["--store", str(store.path), "timeline", "--since", "2025-05-25 20:10", "--until", "2025-05-25 22:40"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0 and r.output == whole.getvalue() and named == [True]
    gone = list(store.cache_dir.glob("*.groups.parquet"))
    assert gone
    for kept in gone:
        kept.unlink()
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0 and r.output == whole.getvalue() and named == [True, False]
