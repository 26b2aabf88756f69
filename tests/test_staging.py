"""Staged parts: a batch is written without its all-null columns and the source's constants (`slim`), and the
landing reads them back as the records they were (`unslim`)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from forensics.pipeline import slim, unslim

SCHEMA = pl.Schema({"ts": pl.Datetime("us", "UTC"), "host": pl.String, "unit": pl.String, "pid": pl.Int64,
                    "mono": pl.Float64, "message": pl.String, "path": pl.String, "source_id": pl.String,
                    "line": pl.Int64})
CONSTANTS = {"path": "logs/a.log", "source_id": "t0123"}


def _batch(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def _stage(batches: list[pl.DataFrame], tmp: Path) -> pl.DataFrame:
    parts, dropped = [], []
    for i, b in enumerate(batches):
        staged, gone = slim(b, CONSTANTS)
        p = tmp / f"part-{i:05d}.arrow"
        staged.write_ipc(p, compression="uncompressed")
        parts.append(p)
        dropped.append(gone)
    return unslim(parts, dropped, SCHEMA, CONSTANTS).collect()


def test_a_part_is_staged_without_its_null_columns_and_the_sources_constants(tmp_path: Path) -> None:
    b = _batch([(None, "h", None, 1, None, "a", "logs/a.log", "t0123", 1),
                (None, "h", None, 2, None, "b", "logs/a.log", "t0123", 2)])
    staged, gone = slim(b, CONSTANTS)
    assert staged.columns == ["host", "pid", "message", "line"] and gone == ("path", "source_id")
    # a constant column holding another value somewhere (or a null) is kept whole
    odd = b.with_columns(pl.Series("path", ["logs/a.log", "logs/b.log"]))
    staged, gone = slim(odd, CONSTANTS)
    assert "path" in staged.columns and gone == ("source_id",)
    nulled = b.with_columns(pl.Series("source_id", ["t0123", None]))
    staged, gone = slim(nulled, CONSTANTS)
    assert "source_id" in staged.columns and gone == ("path",)


def test_the_landing_reads_back_the_records_staged(tmp_path: Path) -> None:
    """Parts that left out different columns (a unit in one batch only, a path that is not the constant, a column
    null in every part) read back as the batches concatenated, columns and types as parsed."""
    b1 = _batch([(None, "h", None, 1, None, "a", "logs/a.log", "t0123", 1)])
    b2 = _batch([(None, "h", "x.service", None, 2.5, "b", "logs/a.log", "t0123", 2),
                 (None, None, None, None, None, "c", "other", "t0123", 3)])
    b3 = _batch([(None, "h", None, 4, None, "d", "logs/a.log", "t0123", 4)])
    got = _stage([b1, b2, b3], tmp_path)
    assert_frame_equal(got, pl.concat([b1, b2, b3]))
    assert got.schema == SCHEMA


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans(), st.sampled_from(["logs/a.log", "x"]),
                                   st.sampled_from(["t0123", "t9"]), st.booleans()),
                         min_size=1, max_size=4), min_size=1, max_size=4))
def test_staging_loses_nothing(tmp_path_factory, spec: list) -> None:  # noqa: ANN001
    tmp = tmp_path_factory.mktemp("parts")
    batches, line = [], 0
    for rows in spec:
        out = []
        for has_host, has_unit, has_pid, path, sid, null_sid in rows:
            line += 1
            out.append((None, "h" if has_host else None, "u.service" if has_unit else None, line if has_pid else None,
                        None, f"m{line}", path, None if null_sid else sid, line))
        batches.append(_batch(out))
    assert_frame_equal(_stage(batches, tmp), pl.concat(batches))
