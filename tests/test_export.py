"""Exports for other tools: table, JSON, CSV, JSON lines, Timesketch."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone

import polars as pl
import pytest

from forensics.export import EXPORT_FORMATS, write_rows
from forensics.schema import EVENT_SCHEMA, RECORD_SCHEMA, conform

T = datetime(2025, 5, 25, 20, 17, 19, 123456, tzinfo=timezone.utc)


def records() -> pl.DataFrame:
    return conform(pl.DataFrame({
        "ts": [T, None], "ts_source": ["year_inferred", "none"], "host": ["dflash-train", None],
        "ident": ["systemd", "kernel"], "pid": [1, None], "unit": ["a.service", None],
        "message": ["a.service: Main process exited, code=killed, status=9/KILL\x1b[2J", "multi\nline, \"quoted\""],
        "path": ["j.log", "d.log"], "line": [1041, 7], "line_end": [1041, 8], "format": ["journal_short", "dmesg_raw"],
    }), RECORD_SCHEMA)


def events() -> pl.DataFrame:
    return conform(pl.DataFrame({
        "ts": [T, None], "ts_source": ["exact", "none"], "kind": ["service_killed", "boot"],
        "rule": ["systemd.service_killed", "journal.boot"], "severity": ["error", "info"], "role": ["symptom", "context"],
        "host": ["h", "h"], "unit": ["a.service", None], "pid": [1, None], "title": ["a.service killed", "boot"],
        "fields": ['{"signal": "KILL", "status": "9/KILL"}', None], "message": ["m", "-- Boot 1 --"],
        "path": ["j.log", "j.log"], "line": [5, 1], "line_end": [5, 1],
    }), EVENT_SCHEMA)


def write(df: pl.DataFrame, fmt: str, kind: str) -> tuple[str, int, int]:
    buf = io.StringIO()
    w = write_rows(df, fmt, buf, kind)  # type: ignore[arg-type]
    return buf.getvalue(), w.rows, w.skipped


def test_records_json_and_jsonl() -> None:
    text, n, _ = write(records(), "json", "records")
    rows = json.loads(text)
    assert n == 2 and len(rows) == 2
    assert list(rows[0]) == ["ts", "ts_source", "host", "ident", "pid", "unit", "message", "path", "line",
                             "line_end", "format"]
    assert rows[0]["ts"] == "2025-05-25T20:17:19.123456Z" and rows[1]["ts"] is None
    lines = write(records(), "jsonl", "records")[0].splitlines()
    assert [json.loads(x) for x in lines] == rows


def test_events_json_fields_object() -> None:
    rows = json.loads(write(events(), "json", "events")[0])
    assert rows[0]["fields"] == {"signal": "KILL", "status": "9/KILL"} and rows[1]["fields"] == {}
    assert rows[0]["source"] == "j.log" and rows[0]["kind"] == "service_killed"
    for key in ("ts", "kind", "rule", "severity", "role", "host", "unit", "pid", "source", "line", "line_end",
                "message", "fields"):
        assert key in rows[0]


def test_csv_round_trips() -> None:
    text, n, _ = write(records(), "csv", "records")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert n == 2 and rows[1]["message"] == "multi\nline, \"quoted\"" and rows[1]["ts"] == ""
    ev = list(csv.DictReader(io.StringIO(write(events(), "csv", "events")[0])))
    assert json.loads(ev[0]["fields"]) == {"signal": "KILL", "status": "9/KILL"}


def test_timesketch_has_the_importer_fields() -> None:
    text, n, skipped = write(events(), "timesketch", "events")
    assert (n, skipped) == (1, 1)
    doc = json.loads(text)
    assert doc["message"] == "a.service killed"
    assert doc["datetime"] == "2025-05-25T20:17:19.123456+00:00"
    assert doc["timestamp"] == int(T.timestamp()) * 1_000_000 + 123456
    assert doc["timestamp_desc"].startswith("Event time")
    assert doc["kind"] == "service_killed" and doc["log_message"] == "m"
    rec = json.loads(write(records(), "timesketch", "records")[0].splitlines()[0])
    assert rec["timestamp_desc"] == "Log time, year inferred" and rec["message"].startswith("a.service")


def test_table_is_terminal_safe() -> None:
    text, n, _ = write(records(), "table", "records")
    assert n == 2 and "\x1b" not in text and "\\x1b[2J" in text
    assert "2025-05-25 20:17:19.123~" in text and "[+1 lines]" in text
    ev = write(events(), "table", "events")[0]
    assert "a.service killed (j.log:5)" in ev


def test_empty_frames_and_bad_format() -> None:
    for fmt in EXPORT_FORMATS:
        write(records().head(0), fmt, "records")
    assert write(records().head(0), "json", "records")[0] == "[]\n"
    with pytest.raises(ValueError, match="unknown format"):
        write(records(), "xml", "records")
