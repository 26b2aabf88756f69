"""Reading a span a window at a time, each row group once, gives the rows of each window in timeline order:
the same rows, in the same order, as one filtered scan of the whole span sorted by (time, path, line)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics import rowgroups
from forensics.rowgroups import ORDER, WindowReader, groups, in_order, untimed_reads
from forensics.schema import RECORD_SCHEMA

UTC = timezone.utc
T0 = datetime(2025, 5, 25, tzinfo=UTC)
COLUMNS = ["ts", "host", "message", "path", "line"]


def _file(path: Path, rows: list[tuple[int | None, str, str]], group: int, lines: str = "up") -> Path:
    """A records file: (minutes after T0 or None, path, host) per row, `group` rows per row group; lines in file
    order (`up`), or `down`, or `same` (all 1)."""
    n = len(rows)
    df = pl.DataFrame({
        "ts": [None if m is None else T0 + timedelta(minutes=m) for m, _, _ in rows],
        "host": [h for _, _, h in rows],
        "message": [f"row {k}" for k in range(len(rows))],
        "path": [p for _, p, _ in rows],
        "line": {"up": list(range(1, n + 1)), "down": list(range(n, 0, -1)), "same": [1] * n}[lines],
    }, schema={c: RECORD_SCHEMA[c] for c in COLUMNS})
    df.write_parquet(path, statistics=True, row_group_size=group)
    return path


def _windows(since: int, until: int, step: int) -> list[tuple[datetime, datetime]]:
    out, t = [], since
    while t < until:
        out.append((T0 + timedelta(minutes=t), T0 + timedelta(minutes=min(t + step, until))))
        t += step
    return out


def _expected(files: list[Path], a: datetime, b: datetime, host: str | None) -> pl.DataFrame:
    lf = pl.scan_parquet([str(f) for f in files]).filter((pl.col("ts") >= a) & (pl.col("ts") < b))
    if host:
        lf = lf.filter(pl.col("host") == host)
    return lf.select(COLUMNS).collect().sort(list(ORDER))


row = st.tuples(st.one_of(st.none(), st.integers(-30, 300)), st.sampled_from(["b.log", "a.log", "c/a.log"]),
                st.sampled_from(["h1", "h2"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.tuples(st.lists(row, max_size=60), st.integers(1, 9), st.booleans(),
                                st.sampled_from(["up", "up", "down", "same"])), min_size=1, max_size=3),
       since=st.integers(-10, 100), length=st.integers(1, 240), step=st.integers(1, 90),
       host=st.sampled_from([None, "h1"]))
def test_windows_read_once_are_the_whole_scan_cut(tmp_path: Path, files, since: int, length: int,  # noqa: ANN001
                                                  step: int, host: str | None) -> None:
    """Times in order (a log's; cut by slicing) and out of order, in and out of the span, missing; several paths
    in a file; lines up, down or all the same; row groups of 1-9 rows."""
    paths = [_file(tmp_path / f"{k}-{len(rows)}-{group}.parquet",
                   sorted(rows, key=lambda r: (r[0] is None, r[0] or 0)) if in_time else rows, group, lines)
             for k, (rows, group, in_time, lines) in enumerate(files)]
    windows = _windows(since, since + length, step)
    reader = WindowReader(paths, windows, None if host is None else pl.col("host") == host, COLUMNS)
    for k, (a, b) in enumerate(windows):
        got, want = reader.read(k), _expected(paths, a, b, host)
        assert got.columns == COLUMNS
        assert got.select(ORDER).rows() == want.select(ORDER).rows(), (k, a, b)  # in order; rows whose keys
        assert sorted(got.rows(), key=repr) == sorted(want.rows(), key=repr)     # tie may come in any order


def test_one_path_in_two_files(tmp_path: Path) -> None:
    """The same path read from two files (two sources of one path): their lines interleave at equal times."""
    a = _file(tmp_path / "a.parquet", [(1, "x.log", "h")] * 4, 2)
    b = _file(tmp_path / "b.parquet", [(1, "x.log", "h")] * 3, 2)
    windows = _windows(0, 10, 10)
    got = WindowReader([a, b], windows, None, COLUMNS).read(0)
    assert got.get_column("line").to_list() == [1, 1, 2, 2, 3, 3, 4]


def test_each_row_group_is_read_once(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Groups spanning several windows are read by the first; the others take their rows from memory."""
    rows = [(m, "x.log", "h") for m in range(0, 120)]  # one a minute, 25 to a group: a group spans 25 minutes
    path = _file(tmp_path / "x.parquet", rows, 25)
    assert [(g.first, g.rows) for g in groups(path)] == [(0, 25), (25, 25), (50, 25), (75, 25), (100, 20)]
    read: list[tuple[int, int]] = []
    real = pl.LazyFrame.slice

    def counted(self, offset, length=None):  # noqa: ANN001, ANN202
        read.append((offset, length))
        return real(self, offset, length)

    monkeypatch.setattr(pl.LazyFrame, "slice", counted)
    windows = _windows(0, 120, 10)
    reader = WindowReader([path], windows, None, COLUMNS)
    got = pl.concat([reader.read(k) for k in range(len(windows))])
    assert got.get_column("line").to_list() == list(range(1, 121))
    assert sorted(read) == [(0, 25), (25, 25), (50, 25), (75, 25), (100, 20)]


def test_groups_without_times_and_out_of_order_windows(tmp_path: Path) -> None:
    path = _file(tmp_path / "n.parquet", [(None, "n.log", "h")] * 4 + [(5, "n.log", "h")], 4)
    assert [g.span for g in groups(path)] == [None, (groups(path)[1].span[0],) * 2]
    windows = _windows(0, 20, 10)
    reader = WindowReader([path], windows, None, COLUMNS)
    with pytest.raises(ValueError, match="in order"):
        reader.read(1)
    assert reader.read(0).get_column("line").to_list() == [5]
    assert reader.read(1).height == 0


def test_in_order_ranks_paths_only_where_each_part_has_one() -> None:
    t = T0
    one = pl.DataFrame({"ts": [t, t], "path": ["b", "b"], "line": [2, 1]})
    two = pl.DataFrame({"ts": [t, t], "path": ["a", "c"], "line": [9, 0]})
    assert in_order([one, two]).rows() == [(t, "a", 9), (t, "b", 1), (t, "b", 2), (t, "c", 0)]
    three = pl.DataFrame({"ts": [t], "path": ["a"], "line": [3]})
    assert in_order([one, three]).rows() == [(t, "a", 3), (t, "b", 1), (t, "b", 2)]


def _untimed_expected(files: list[Path], host: str | None) -> pl.DataFrame:
    lf = pl.scan_parquet([str(f) for f in files]).filter(pl.col("ts").is_null())
    if host:
        lf = lf.filter(pl.col("host") == host)
    return lf.select(COLUMNS).collect().sort(["path", "line"], maintain_order=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.tuples(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 9)), st.sampled_from(["h1", "h2"])),
                                         max_size=40), st.integers(1, 9)), min_size=1, max_size=4),
       host=st.sampled_from([None, "h1"]), rows=st.integers(1, 20))
def test_untimed_reads_are_the_untimed_end_in_order(tmp_path: Path, files, host: str | None, rows: int,  # noqa: ANN001
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """One path per file (named so that file order is not path order), row groups of 1-9 rows read a few at a
    time: the reads, one after the other, are the untimed records sorted by (path, line)."""
    monkeypatch.setattr(rowgroups, "UNTIMED_ROWS", rows)
    paths = [_file(tmp_path / f"{k}-{len(rs)}-{group}.parquet", [(m, f"z{9 - k}.log", h) for m, h in rs], group)
             for k, (rs, group) in enumerate(files)]
    reads = untimed_reads(paths, None if host is None else pl.col("host") == host, COLUMNS)
    assert reads is not None
    got = pl.concat([r() for r in reads]) if reads else pl.DataFrame(schema={c: RECORD_SCHEMA[c] for c in COLUMNS})
    assert got.rows() == _untimed_expected(paths, host).rows()


def test_untimed_reads_need_one_path_per_file(tmp_path: Path) -> None:
    """A file of two paths, or two files of one path, cannot be read file after file in (path, line) order."""
    two = _file(tmp_path / "two.parquet", [(None, "a.log", "h"), (None, "b.log", "h")], 1)
    assert untimed_reads([two], None, COLUMNS) is None
    a = _file(tmp_path / "a.parquet", [(None, "x.log", "h")] * 2, 1)
    b = _file(tmp_path / "b.parquet", [(None, "x.log", "h")] * 2, 1)
    assert untimed_reads([a, b], None, COLUMNS) is None
    assert untimed_reads([a], None, COLUMNS) is not None
