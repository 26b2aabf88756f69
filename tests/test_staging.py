"""Staged parts: a batch is written without the columns that hold one value in all its records (`slim`), and the
landing reads the parts back as the records they were (`unslim`)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from forensics.pipeline import slim, unslim

SCHEMA = pl.Schema({"ts": pl.Datetime("us", "UTC"), "host": pl.String, "unit": pl.String, "pid": pl.Int64,
                    "mono": pl.Float64, "message": pl.String, "path": pl.String, "source_id": pl.String,
                    "format": pl.String, "line": pl.Int64})
T = datetime(2025, 5, 25, 20, 17, 19, tzinfo=timezone.utc)


def _batch(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def _stage(batches: list[pl.DataFrame], tmp: Path) -> pl.DataFrame:
    parts, constants = [], []
    for i, b in enumerate(batches):
        staged, consts = slim(b)
        p = tmp / f"part-{i:05d}.arrow"
        staged.write_ipc(p, compression="uncompressed")
        parts.append(p)
        constants.append(consts)
    return unslim(parts, constants, batches[0].schema).collect()


def test_a_part_is_staged_without_its_constant_columns() -> None:
    b = _batch([(T, "h", None, 1, None, "a", "logs/a.log", "t0123", "journal-short", 1),
                (None, "h", None, 2, None, "b", "logs/a.log", "t0123", "journal-short", 2)])
    staged, consts = slim(b)
    assert staged.columns == ["ts", "pid", "message", "line"]
    assert consts == {"unit": None, "mono": None, "path": "logs/a.log", "source_id": "t0123",
                      "format": "journal-short", "host": "h"}
    # a column holding another value somewhere, or a null, is kept whole; a message is never tested
    odd = b.with_columns(pl.Series("path", ["logs/a.log", "logs/b.log"]), pl.Series("host", ["h", None]),
                         pl.Series("message", ["same", "same"]))
    staged, consts = slim(odd)
    assert {"path", "host", "message"} <= set(staged.columns) and "path" not in consts and "host" not in consts


def test_an_empty_batch_or_one_row_reads_back_as_itself(tmp_path: Path) -> None:
    """A batch of no records (a source's last, empty) stays no records; one of a single record, whose every column
    holds one value, keeps its line (a part of literals only would read back as one row whatever it held)."""
    empty = _batch([])
    staged, consts = slim(empty)
    assert staged is empty and consts == {}
    one = _batch([(None, None, None, None, None, None, "logs/a.log", "t0123", "f", 7)])
    staged, consts = slim(one)
    assert staged.columns == ["line"]
    assert_frame_equal(_stage([empty, one, empty], tmp_path), one)


def test_the_landing_reads_back_the_records_staged(tmp_path: Path) -> None:
    """Parts that left out different columns (a unit in one batch only, a path that is not the same in all, a
    column null in every part) read back as the batches concatenated, columns and types as parsed."""
    b1 = _batch([(T, "h", None, 1, None, "a", "logs/a.log", "t0123", "f", 1)])
    b2 = _batch([(None, "h", "x.service", None, 2.5, "b", "logs/a.log", "t0123", "f", 2),
                 (T, None, None, None, None, "c", "other", "t0123", "g", 3)])
    b3 = _batch([(None, "h", None, 4, None, "d", "logs/a.log", "t0123", "f", 4)])
    got = _stage([b1, b2, b3], tmp_path)
    assert_frame_equal(got, pl.concat([b1, b2, b3]))
    assert got.schema == SCHEMA


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.booleans(), st.sampled_from(["h", "g", None]), st.booleans(),
                                   st.sampled_from(["logs/a.log", "x"]), st.sampled_from(["t0123", "t9", None]),
                                   st.sampled_from(["journal-short", "text"])),
                         min_size=1, max_size=4), min_size=1, max_size=4))
def test_staging_loses_nothing(tmp_path_factory, spec: list) -> None:  # noqa: ANN001
    tmp = tmp_path_factory.mktemp("parts")
    batches, line = [], 0
    for rows in spec:
        out = []
        for timed, host, has_unit, path, sid, fmt in rows:
            line += 1
            out.append((T if timed else None, host, "u.service" if has_unit else None, line, None, f"m{line}", path,
                        sid, fmt, line))
        batches.append(_batch(out))
    assert_frame_equal(_stage(batches, tmp), pl.concat(batches))
