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
