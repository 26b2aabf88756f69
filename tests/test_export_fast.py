"""The vectorised record exports write exactly what the row-by-row path writes."""

from __future__ import annotations

import csv
import io
import json

from forensics.export import row_dicts, write_rows
from forensics.parse import parse_text

TEXT = ('May 25 20:17:19 h systemd[1]: x.service: Main process exited, code=killed, status=9/KILL\n'
        '[2025-05-25 20:17:19 TP0] caf\u00e9 "quoted", comma, <b>tag</b> \\ backslash\n'
        '  File "x.py", line 1, in f\n'
        'untimed line with a tab\tand \u2028 separator\n')


def test_jsonl_and_csv_match_the_row_path() -> None:
    df = parse_text(TEXT, year=2025)
    buf = io.StringIO()
    write_rows(df, "jsonl", buf, "records")
    got = [json.loads(line) for line in buf.getvalue().split("\n") if line]
    assert got == list(row_dicts(df, "records"))
    buf = io.StringIO()
    write_rows(df, "csv", buf, "records")
    rows = list(csv.reader(io.StringIO(buf.getvalue())))
    want = [{k: ("" if v is None else str(v)) for k, v in r.items()} for r in row_dicts(df, "records")]
    assert [dict(zip(rows[0], r)) for r in rows[1:]] == want


def test_json_array_matches_the_row_path_in_one_and_many_slices(monkeypatch) -> None:  # noqa: ANN001
    import forensics.export as export

    df = parse_text(TEXT * 3, year=2025)
    want = list(row_dicts(df, "records"))
    for size in (100_000, 2, 1):
        monkeypatch.setattr(export, "VECTOR_SLICE", size)
        buf = io.StringIO()
        assert write_rows(df, "json", buf, "records").rows == df.height
        text = buf.getvalue()
        assert json.loads(text) == want
        assert text.startswith("[\n  {") and text.endswith("}\n]\n") and text.count("\n") == df.height + 2
    buf = io.StringIO()
    write_rows(df.clear(), "json", buf, "records")
    assert buf.getvalue() == "[]\n"


def test_record_table_matches_the_row_path(monkeypatch) -> None:  # noqa: ANN001
    """The table's record rows built by polars are the text the row-by-row formatting writes, odd rows too
    (control characters, tabs, bidi overrides, wide characters, untimed and inferred times, a year before 1000)."""
    from datetime import datetime, timezone

    import polars as pl

    import forensics.export as export
    from forensics.schema import RECORD_SCHEMA, conform

    utc = timezone.utc
    rows = [
        (datetime(2025, 5, 25, 20, 17, 19, 999999, tzinfo=utc), "exact", "h", "systemd", 1, None, "plain"),
        (datetime(2025, 5, 25, 20, 17, 19, 5000, tzinfo=utc), "year_inferred", "gpu-node-01", "", None, "x.service",
         "two\nlines\r\nand a third"),
        (None, "none", None, None, None, None, None),
        (None, "none", "h", None, None, None, ""),
        (datetime(2025, 1, 1, tzinfo=utc), "zone_assumed", "日本-host", "python3", 77, "u", "wide 日本 text\r"),
        (datetime(2025, 1, 1, tzinfo=utc), "exact", "h\tx", "id\x1bent", 5, None, "tab\there \x07 bell \u202e rlo"),
        (datetime(2025, 1, 1, tzinfo=utc), "monotonic_only", "h", None, None, "only-unit", "\n"),
        (datetime(999, 3, 4, 5, 6, 7, tzinfo=utc), "exact", "h", "old", None, None, "a year of three digits"),
        (datetime(2025, 1, 1, tzinfo=utc), "boot_anchored", "h", "k\u0085", None, None, "c1 control in the ident"),
    ]
    cols = ["ts", "ts_source", "host", "ident", "pid", "unit", "message"]
    df = conform(pl.DataFrame([dict(zip(cols, r)) for r in rows],
                              schema={c: RECORD_SCHEMA[c] for c in cols}).with_columns(
        pl.lit("p.log").alias("path"), pl.int_range(1, len(rows) + 1).alias("line"),
        pl.int_range(1, len(rows) + 1).alias("line_end"), pl.lit("journal-short").alias("format")), RECORD_SCHEMA)
    def row_path(frame: pl.DataFrame, out: io.StringIO, host_w: int, who_w: int, odd: object = None) -> int:
        for r in row_dicts(frame, "records"):
            out.write(export._record_row(r, host_w, who_w))
        return frame.height

    def table() -> str:
        buf = io.StringIO()
        assert write_rows(df, "table", buf, "records").rows == len(rows)
        return buf.getvalue()

    vectorised = export._write_record_rows
    monkeypatch.setattr(export, "_write_record_rows", row_path)
    want = table()
    monkeypatch.setattr(export, "_write_record_rows", vectorised)
    for size in (100_000, 3):
        monkeypatch.setattr(export, "VECTOR_SLICE", size)
        assert table() == want
    lines = want.split("\n")
    assert "\\x1b" in lines[6] and "\\u202e" in lines[6] and "[+2 lines]" in lines[2] and lines[8].startswith("0999-03-04 ")  # ISO 8601: four digits


_TS_ALPHABET = 'ab "\\\n\r\t\b\f\x00\x01\x1f\x7f\u0085\u2028é日_'


def _ts_frame(rows: list):  # noqa: ANN202 - a records frame
    from datetime import datetime, timedelta, timezone

    import polars as pl

    from forensics.schema import RECORD_SCHEMA, conform

    base = datetime(2025, 5, 25, tzinfo=timezone.utc)
    out = []
    for k, (secs, src, host, ident, pid, unit, msg, path, line) in enumerate(rows):
        ts = None if secs is None else base + timedelta(microseconds=secs)
        out.append({"ts": ts, "ts_source": src, "host": host, "ident": ident, "pid": pid, "unit": unit,
                    "message": msg, "path": path, "line": line, "line_end": None if line is None else line + k,
                    "format": "journal-short" if k % 2 else None})
    cols = ["ts", "ts_source", "host", "ident", "pid", "unit", "message", "path", "line", "line_end", "format"]
    return conform(pl.DataFrame(out, schema={c: RECORD_SCHEMA[c] for c in cols}), RECORD_SCHEMA)


def _row_path_timesketch(df) -> tuple[str, int, int]:  # noqa: ANN001
    import forensics.export as export

    buf = io.StringIO()
    w = export._write_timesketch(row_dicts(df, "records"), buf, "records")
    return buf.getvalue(), w.rows, w.skipped


def test_timesketch_records_match_the_row_path_on_odd_values() -> None:
    """Quotes, backslashes, every control character json.dumps escapes, C1 and separators, wide text, nulls,
    inferred times, untimed rows (left out and counted), years before 1000 and before 1970."""
    rows = [(0, "exact", "h", "systemd", 1, "x.service", 'say "hi" \\ now', "a.log", 1),
            (1, "year_inferred", None, None, None, None, None, None, None),
            (None, "none", "h", None, None, None, "untimed", "a.log", 3),
            (2, "zone_assumed", "日本", "id\x1f", 5, None, "nl\ncr\rtab\tbs\bff\f nul\x00 del\x7f \u0085\u2028", "p", 4),
            (-10**15, "boot_anchored", "h", "k", None, None, "before 1970", "d.log", 5),
            (-62_000_000_000 * 10**6, "exact", "h", "k", None, None, "a year of three digits", "d.log", 6),
            (3, "monotonic_only", "h", "k", None, "u", "", "d.log", 7)]
    df = _ts_frame(rows)
    buf = io.StringIO()
    w = write_rows(df, "timesketch", buf, "records")
    assert (buf.getvalue(), w.rows, w.skipped) == _row_path_timesketch(df)
    assert w.skipped == 1 and w.rows == len(rows) - 1


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_text = st.one_of(st.none(), st.text(alphabet=_TS_ALPHABET, max_size=12))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(-10**12, 10**12)),
                          st.sampled_from(["exact", "year_inferred", "zone_assumed", "boot_anchored", "none"]),
                          _text, _text, st.one_of(st.none(), st.integers(0, 10**6)), _text, _text, _text,
                          st.one_of(st.none(), st.integers(1, 10**6))), max_size=15))
def test_timesketch_records_match_the_row_path(rows: list) -> None:
    df = _ts_frame(rows)
    buf = io.StringIO()
    w = write_rows(df, "timesketch", buf, "records")
    assert (buf.getvalue(), w.rows, w.skipped) == _row_path_timesketch(df)


def _row_path_table(df) -> str:  # noqa: ANN001
    import forensics.export as export

    host_w, who_w = export.table_widths(export.longest(df, "host"), export.longest(df, "ident"))
    return (f"{'TIME (UTC)':<24} {'HOST':<{host_w}} {'SOURCE':<{who_w}} MESSAGE (WHERE)\n"
            + "".join(export._record_row(r, host_w, who_w) for r in row_dicts(df, "records")))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(-10**12, 10**12), st.integers(0, 5 * 10**6)),
                          st.sampled_from(["exact", "year_inferred", "zone_assumed", "boot_anchored", "none"]),
                          _text, _text, st.one_of(st.none(), st.integers(0, 10**6)), _text,
                          st.one_of(_text, st.text(alphabet=" -~az09", max_size=30)), _text,
                          st.one_of(st.none(), st.integers(1, 10**6))), max_size=15),
       st.sampled_from([100_000, 4, 1]))
def test_record_table_matches_the_row_path_on_any_rows(rows: list, slice_rows: int) -> None:
    """Printable ASCII messages (written as they are) and any others, times within seconds of each other (their
    seconds formatted once) and far apart (formatted row by row), nulls, in slices of any size."""
    import forensics.export as export

    df = _ts_frame(rows)
    buf = io.StringIO()
    saved = export.VECTOR_SLICE
    export.VECTOR_SLICE = slice_rows
    try:
        assert write_rows(df, "table", buf, "records").rows == len(rows)
    finally:
        export.VECTOR_SLICE = saved
    assert buf.getvalue() == _row_path_table(df)
