"""Rows out of the store for people and other tools: table, JSON, CSV, JSON lines, Timesketch.

    write_rows(df, "jsonl", sys.stdout, kind="events")

`df` is a records frame (`forensics.schema.RECORD_SCHEMA`) or an events frame (`EVENT_SCHEMA`).
Times are ISO 8601 UTC with `Z` and microseconds (`2025-05-25T20:17:19.000000Z`), or null.

Fields, records: ts, ts_source, host, ident, pid, unit, message, path, line, line_end, format.
Fields, events: ts, ts_source, kind, rule, severity, role, host, unit, pid, title, source (the path),
line, line_end, message, fields (an object; in CSV its JSON text).
Timesketch (JSON lines for its importer): `message`, `datetime` (ISO 8601 with `+00:00`),
`timestamp` (microseconds since the epoch) and `timestamp_desc`, then the fields above; rows
without a time cannot be placed on a Timesketch timeline and are left out (counted in the result).
`table` is for terminals: one line per row, control characters shown as `\\xNN`.
CSV is written verbatim: a spreadsheet may read a cell that starts with `=`, `+`, `-` or `@` as a formula.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import Any, BinaryIO, Literal, TextIO

import polars as pl

from forensics.model import line_span
from forensics.schema import EVENT_SCHEMA, RECORD_SCHEMA, conform

__all__ = ["EXPORT_FORMATS", "Written", "write_rows", "row_dicts"]

EXPORT_FORMATS: tuple[str, ...] = ("table", "json", "csv", "jsonl", "timesketch")
Kind = Literal["records", "events"]

RECORD_FIELDS = ("ts", "ts_source", "host", "ident", "pid", "unit", "message", "path", "line", "line_end", "format")
# what the records table shows
TABLE_FIELDS = ("ts", "ts_source", "host", "ident", "pid", "unit", "message", "path", "line", "line_end")
EVENT_FIELDS = ("ts", "ts_source", "kind", "rule", "severity", "role", "host", "unit", "pid", "title", "source",
                "line", "line_end", "message", "fields")
INFERRED = frozenset({"zone_assumed", "year_inferred", "boot_anchored", "monotonic_only"})
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CHUNK = 20_000


@dataclass(frozen=True)
class Written:
    rows: int
    skipped: int = 0      # rows left out (Timesketch: rows without a time)


def _iso(ts: datetime | None) -> str | None:
    if ts is None:
        return None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=timezone.utc)
    # ISO 8601's four-digit year (strftime's %Y prints a year before 1000 in fewer digits, which polars' exports
    # do not and which Timesketch's datetime cannot be read back from)
    return ts.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _fields(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_value": value}


def row_dicts(df: pl.DataFrame, kind: Kind) -> Iterator[dict[str, Any]]:
    """The documented JSON object of each row, in frame order."""
    schema = RECORD_SCHEMA if kind == "records" else EVENT_SCHEMA
    frame = conform(df, schema)
    for chunk in frame.iter_slices(_CHUNK):
        for r in chunk.iter_rows(named=True):
            if kind == "records":
                yield {"ts": _iso(r["ts"]), "ts_source": r["ts_source"], "host": r["host"], "ident": r["ident"],
                       "pid": r["pid"], "unit": r["unit"], "message": r["message"], "path": r["path"],
                       "line": r["line"], "line_end": r["line_end"], "format": r["format"]}
            else:
                yield {"ts": _iso(r["ts"]), "ts_source": r["ts_source"], "kind": r["kind"], "rule": r["rule"],
                       "severity": r["severity"], "role": r["role"], "host": r["host"], "unit": r["unit"],
                       "pid": r["pid"], "title": r["title"], "source": r["path"], "line": r["line"],
                       "line_end": r["line_end"], "message": r["message"], "fields": _fields(r["fields"])}


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)


def _write_json(rows: Iterator[dict[str, Any]], out: TextIO) -> int:
    n = 0
    out.write("[")
    for row in rows:
        out.write(",\n  " if n else "\n  ")
        out.write(_dumps(row))
        n += 1
    out.write("\n]\n" if n else "]\n")
    return n


def _write_jsonl(rows: Iterator[dict[str, Any]], out: TextIO) -> int:
    n = 0
    for row in rows:
        out.write(_dumps(row))
        out.write("\n")
        n += 1
    return n


def _write_csv(rows: Iterator[dict[str, Any]], out: TextIO, kind: Kind) -> int:
    names = RECORD_FIELDS if kind == "records" else EVENT_FIELDS
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    n = 0
    for row in rows:
        writer.writerow(["" if row[k] is None else (_dumps(row[k]) if k == "fields" else row[k]) for k in names])
        n += 1
    return n


def _write_timesketch(rows: Iterator[dict[str, Any]], out: TextIO, kind: Kind) -> Written:
    n = skipped = 0
    for row in rows:
        line = _timesketch_line(row, kind)
        if line is None:
            skipped += 1
            continue
        out.write(line)
        n += 1
    return Written(n, skipped)


def _timesketch_line(row: dict[str, Any], kind: Kind) -> str | None:
    """The Timesketch JSON line of a row (`row_dicts`), or None for a row without a time."""
    if row["ts"] is None:
        return None
    dt = datetime.strptime(row["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    micros = (dt - datetime(1970, 1, 1, tzinfo=timezone.utc)) // _MICRO
    if kind == "events":
        desc = f"Event time ({row['kind']})"
        message = row["title"] or row["message"] or ""
    else:
        desc = "Log time"
        message = row["message"] or ""
    if row["ts_source"] in INFERRED:
        desc += f", {row['ts_source'].replace('_', ' ')}"
    doc = {"message": message, "datetime": dt.isoformat(timespec="microseconds"), "timestamp": micros,
           "timestamp_desc": desc}
    for k, v in row.items():
        doc.setdefault(k, v)
    if kind == "events":
        doc["log_message"] = row["message"]
    return _dumps(doc) + "\n"


_MICRO = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)


def _show(text: str | None) -> str:
    if text is None:
        return ""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}" if ord(m.group(0)) < 0x100 else f"\\u{ord(m.group(0)):04x}",
                        text.replace("\t", " "))


def _first_line(text: str | None) -> str:
    if not text:
        return ""
    lines = text.split("\n")
    more = f"  [+{len(lines) - 1} lines]" if len(lines) > 1 else ""
    return _show(lines[0].rstrip("\r")) + more


def _table_time(ts: str | None, ts_source: str | None) -> str:
    if ts is None:
        return "-".ljust(24)
    mark = "~" if ts_source in INFERRED else " "
    return f"{ts[:10]} {ts[11:23]}{mark}"


def longest(df: pl.DataFrame, col: str) -> int | None:
    """The longest value of `col` in characters (None: no value, or no such column)."""
    if col not in df.columns:
        return None
    got = df.select(pl.col(col).cast(pl.String).str.len_chars().max()).item()
    return None if got is None else int(got)


def _width(longest_value: int | None, cap: int) -> int:
    return max(1, min(cap, int(longest_value or 1)))


def table_widths(host_max: int | None, ident_max: int | None) -> tuple[int, int]:
    """(host, source) column widths of the records table, from the longest host and ident of the rows."""
    return _width(host_max, 24), min(32, max(_width(ident_max, 24) + 8, 8))


def write_record_table(frames: Iterable[pl.DataFrame], out: TextIO, widths: tuple[int, int],
                       odd: list[pl.Expr] | None = None) -> int:
    """The records table of frames written one after the other (in order), with the given column widths; `odd`:
    `odd_names` of every name the frames may hold (else each frame's are checked)."""
    host_w, who_w = widths
    out.write(f"{'TIME (UTC)':<24} {'HOST':<{host_w}} {'SOURCE':<{who_w}} MESSAGE (WHERE)\n")
    return sum(_write_record_rows(df, out, host_w, who_w, odd) for df in frames)


def _write_table(rows: Iterator[dict[str, Any]], out: TextIO, kind: Kind, df: pl.DataFrame) -> int:
    n = 0
    if kind == "records":
        return write_record_table([df], out, table_widths(longest(df, "host"), longest(df, "ident")))
    else:
        kind_w = _width(longest(df, "kind"), 28)
        unit_w = _width(longest(df, "unit"), 36)
        out.write(f"{'TIME (UTC)':<24} {'SEVERITY':<8} {'KIND':<{kind_w}} {'UNIT':<{unit_w}} WHAT (WHERE)\n")
        for r in rows:
            where = f"{r['source']}:{r['line']}" if r["source"] else ""
            what = _first_line(r["title"] or r["message"])
            out.write(f"{_table_time(r['ts'], r['ts_source'])} {_show(r['severity']):<8} {_show(r['kind']):<{kind_w}} "
                      f"{_show(r['unit']):<{unit_w}} {what} ({_show(where)})\n")
            n += 1
    return n


VECTOR_SLICE = 100_000  # records written by polars at a time ...
VECTOR_AT_ONCE = 2      # ... in this many slices built at once (one per core)


def _record_fields(r: dict[str, Any], host_w: int, who_w: int) -> tuple[str, str, str, str, str]:
    """A record's row of the table, its five fields: time, host, source, message and where it is (`(path:line)`,
    `(path:line-line_end)` for a record of several lines), joined by spaces."""
    who = (r["ident"] or r["unit"] or "") + (f"[{r['pid']}]" if r["pid"] is not None else "")
    return (_table_time(r["ts"], r["ts_source"]), f"{_show(r['host']):<{host_w}}", f"{_show(who):<{who_w}}",
            _first_line(r["message"]), _where(r["path"], r["line"], r["line_end"]))


def _where(path: str | None, line: int | None, end: int | None) -> str:
    if path is None:
        return ""
    if line is None:
        return f"({_show(path)})"
    return f"({_show(path)}:{line_span(line, end)})"


def _where_field() -> list[pl.Expr]:
    """`_where` as polars builds it for nearly every row (`x`: `(path:line)`), and where that is not `_where`'s
    text (`s`: a record of several lines, or no path or line; `_mend_fields` makes those few again in full)."""
    path, line, end = pl.col("path"), pl.col("line"), pl.col("line_end")
    return [pl.format("({}:{})", path, line).alias("x"),  # a fifth cheaper than concat_str of the same parts
            (path.is_null() | line.is_null() | (end > line).fill_null(False)).alias("s")]


def _where_full() -> pl.Expr:
    """`_where` as a polars expression, for any row."""
    path, line, end = pl.col("path"), pl.col("line"), pl.col("line_end")
    span = pl.when(end > line).then(pl.concat_str([pl.lit("-"), end.cast(pl.String)])).otherwise(pl.lit(""))
    return (pl.when(path.is_null()).then(pl.lit(""))
            .when(line.is_null()).then(pl.concat_str([pl.lit("("), path, pl.lit(")")]))
            .otherwise(pl.concat_str([pl.lit("("), path, pl.lit(":"), line.cast(pl.String), span, pl.lit(")")]))
            .alias("x"))


def _record_row(r: dict[str, Any], host_w: int, who_w: int) -> str:
    return " ".join(_record_fields(r, host_w, who_w)) + "\n"


# what polars does not write as `_record_row` does: a control character or a tab to escape (anything in the
# host, source or path); such rows are written by `_record_row`
_ODD_NAME = "[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
_ODD_TEXT = "[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
_MILLIS = pl.Series([f"{k:03d}" for k in range(1000)])
_UNTIMED = "-".ljust(24)


def _write_record_rows(df: pl.DataFrame, out: TextIO, host_w: int, who_w: int,
                       odd: list[pl.Expr] | None = None) -> int:
    """The table's record rows, built by polars a slice at a time: the same text as `_record_row`, written by
    polars' CSV writer as five fields joined by spaces, unquoted. A message of printable ASCII is its own field
    (nearly every row; 4.2 M records of a busy day are formatted in about a second); any other message is cut to
    its first line with `[+N lines]`, and a row with a character to escape is made by `_record_fields`."""
    frame = conform(df, RECORD_SCHEMA)
    if _PLAIN in df.columns:
        frame = frame.with_columns(df.get_column(_PLAIN))
    odd_exprs = odd_names(frame) if odd is None else odd
    chunks = list(frame.iter_slices(VECTOR_SLICE))
    for i in range(0, len(chunks), VECTOR_AT_ONCE):
        group = chunks[i:i + VECTOR_AT_ONCE]
        built = pl.collect_all([c.lazy().select(_time_field(c), *_name_fields(host_w, who_w), pl.col("message").alias("m"),
                                                *_where_field(), pl.any_horizontal(*odd_exprs, False).alias("o"))
                                for c in group])
        for chunk, got in zip(group, built):
            _write_fields(_mend_fields(chunk, got, host_w, who_w), out)
    return frame.height


_PLAIN = "_plain"


def with_plain(df: pl.DataFrame) -> pl.DataFrame:
    """`df` (records) with `_plain`: whether the table writes the message as it is (printable ASCII, or none). A
    timeline computes it where each window is read, off the thread that writes the one before."""
    return df.with_columns(_plain_messages(df.get_column("message")).alias(_PLAIN))


def _plain_messages(message: pl.Series) -> pl.Series:
    """Printable ASCII or empty, row by row: pyarrow's check, a pass at memory speed (polars' regex engine takes
    four times as long for the character class)."""
    from pyarrow._compute import call_function  # not pyarrow.compute, whose wrappers take 25 ms to import

    printable = pl.Series(call_function("ascii_is_printable", [message.to_arrow()]), dtype=pl.Boolean)
    return printable.fill_null(True) | (message.str.len_bytes() == 0)


def _shown_names() -> dict[str, pl.Expr]:
    """The names the table shows: host, ident, path, and the unit where the ident is empty."""
    ident = pl.col("ident")
    return {"host": pl.col("host"), "ident": ident, "unit": pl.col("unit").filter(ident.is_null() | (ident == "")),
            "path": pl.col("path")}


def odd_names(df: pl.DataFrame | pl.LazyFrame) -> list[pl.Expr]:
    """Expressions true on the rows whose host, ident (unit where the ident is empty) or path has a character the
    table escapes, for rows whose names are among those of `df` (records, or any frame with those four columns,
    such as the sources' profiles: what every window of a timeline may show, checked once). Names are few: their
    distinct values are checked, and a unit only where it is shown."""
    shown = _shown_names()
    distinct = df.lazy().select(*(v.unique().drop_nulls().implode().alias(c) for c, v in shown.items())).collect()
    out = []
    for c in shown:
        values = distinct.get_column(c)[0]
        bad = values.filter(values.str.contains(_ODD_NAME))
        if bad.len():
            out.append(pl.col(c).is_in(bad.to_list()))
    return out


def _time_field(df: pl.DataFrame) -> pl.Expr:
    """The time field (`t`): the second's text gathered from the chunk's seconds formatted once each, then the
    milliseconds and the inferred mark; `strftime` row by row when the chunk spans more seconds than it has rows."""
    ts, mark = pl.col("ts"), pl.when(pl.col("ts_source").is_in(sorted(INFERRED))).then(pl.lit("~")).otherwise(pl.lit(" "))
    us = ts.dt.epoch("us")
    lo, hi = df.select((us.min() // 1_000_000).alias("lo"), (us.max() // 1_000_000).alias("hi")).row(0)
    if lo is None:
        return pl.lit(_UNTIMED).alias("t")
    if hi - lo < df.height:
        labels = pl.select(pl.int_range(lo, hi + 1, dtype=pl.Int64).mul(1_000_000).cast(pl.Datetime("us"))
                           .dt.strftime("%Y-%m-%d %H:%M:%S.")).to_series()
        second = us // 1_000_000
        text = pl.concat_str([pl.lit(labels).gather(second - lo), pl.lit(_MILLIS).gather((us - second * 1_000_000) // 1000),
                              mark])
    else:
        text = pl.concat_str([ts.dt.convert_time_zone("UTC").dt.strftime("%Y-%m-%d %H:%M:%S%.3f"), mark])
    return pl.when(ts.is_null()).then(pl.lit(_UNTIMED)).otherwise(text).alias("t")


def _name_fields(host_w: int, who_w: int) -> list[pl.Expr]:
    """The host field (`h`) and the source field (`w`: ident, else unit, then `[pid]`), padded."""
    ident, unit, pid = pl.col("ident"), pl.col("unit"), pl.col("pid")
    name = pl.when(ident.fill_null("") != "").then(ident).when(unit.fill_null("") != "").then(unit).otherwise(pl.lit(""))
    who = pl.concat_str([name, pl.when(pid.is_not_null()).then(pl.format("[{}]", pid)).otherwise(pl.lit(""))])
    return [pl.col("host").fill_null("").str.pad_end(host_w).alias("h"), who.str.pad_end(who_w).alias("w")]


def _mend_fields(chunk: pl.DataFrame, got: pl.DataFrame, host_w: int, who_w: int) -> pl.DataFrame:
    """`got`'s fields (`t`, `h`, `w`, `m`, `x`), with the rows the plain build does not write as `_record_row` does
    mended: a message that is not printable ASCII (see `with_plain`), a name or path to escape, or a place that is
    not one line's."""
    plain = chunk.get_column(_PLAIN) if _PLAIN in chunk.columns else _plain_messages(chunk.get_column("message"))
    redo = ~plain | got.get_column("o") | got.get_column("s")
    fields = got.select("t", "h", "w", "m", "x")
    at = redo.arg_true()
    if at.len() == 0:
        return fields
    msg = pl.col("message").fill_null("")
    head = msg.str.replace(r"(?s)\n.*", "")  # the first line
    extra = msg.str.count_matches("\n", literal=True)
    some = chunk[at].with_columns(got.get_column("o").gather(at).alias("o"))
    mended = some.select(pl.concat_str([head.str.strip_chars_end("\r"), pl.when(extra > 0).then(
        pl.format("  [+{} lines]", extra)).otherwise(pl.lit(""))]).alias("m"), (pl.col("o") | head.str.contains(_ODD_TEXT)).alias("o"),
        _where_full())
    h, w, m, x = (fields.get_column(c).clone() for c in ("h", "w", "m", "x"))
    m.scatter(at, mended.get_column("m"))
    x.scatter(at, mended.get_column("x"))
    odd = mended.get_column("o").arg_true()
    if odd.len():
        made = [_record_fields(r, host_w, who_w) for r in row_dicts(some[odd], "records")]
        for series, k in ((h, 1), (w, 2), (m, 3), (x, 4)):
            series.scatter(at.gather(odd), pl.Series([f[k] for f in made], dtype=pl.String))
    return pl.DataFrame([fields.get_column("t"), h, w, m, x])


def _write_lines(chunk: pl.DataFrame, got: pl.DataFrame, row_path: Callable[[dict[str, Any]], str | None],
                 out: TextIO) -> None:
    """A slice's lines as polars built them (`got`: `l`, each line with its newline; `o`, the rows polars does not
    write as the row path does), those rows' lines made by `row_path` from their `row_dicts`."""
    lines = got.get_column("l")
    at = got.get_column("o").arg_true()
    if at.len():
        fixed = [row_path(r) for r in row_dicts(chunk[at], "records")]
        lines = lines.scatter(at, pl.Series(fixed, dtype=pl.String))
    buf = io.BytesIO()  # the lines as they are, one after the other
    pl.DataFrame([lines.alias("l")]).write_csv(buf, include_header=False, quote_style="never", line_terminator="")
    write_bytes(out, buf.getvalue())


def write_bytes(out: TextIO, data: bytes) -> None:
    """UTF-8 text written to `out`: straight to its binary buffer when it has one that takes UTF-8 (a
    terminal or pipe: no decoding into a Python string and encoding back, 0.8 GB for a busy day), else decoded."""
    raw = _utf8_buffer(out)
    if raw is None:
        out.write(data.decode("utf-8"))
        return
    raw.write(data)


def _utf8_buffer(out: TextIO) -> BinaryIO | None:
    """`out`'s binary buffer, flushed up to here, when it takes UTF-8; else None."""
    raw = getattr(out, "buffer", None)
    encoding = (getattr(out, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    if raw is None or encoding != "utf8":
        return None
    out.flush()
    return raw


def _polars_write(out: TextIO, write: Callable[[BinaryIO], object]) -> None:
    """What polars' `write` writes, straight into `out`'s binary buffer when it has one that takes UTF-8 (no copy
    of the text in between), else through bytes."""
    raw = _utf8_buffer(out)
    if raw is not None:
        try:
            write(raw)
        except OSError as e:
            raise _with_errno(e) from e
        return
    buf = io.BytesIO()
    write(buf)
    out.write(buf.getvalue().decode("utf-8"))


_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def _with_errno(e: OSError) -> OSError:
    """An I/O error polars raised, as Python raises it: polars' errors carry the OS's error number only in their
    text ("Broken pipe (os error 32)"), so `forensics timeline | head` ended in a traceback, where click ends a
    command quietly on a `BrokenPipeError`."""
    found = _OS_ERROR.search(str(e)) if e.errno is None else None
    if found is None:
        return e
    n = int(found.group(1))
    return OSError(n, os.strerror(n))   # the subclass of that number: BrokenPipeError for EPIPE


def _write_fields(fields: pl.DataFrame, out: TextIO) -> None:
    """Rows of string fields joined by spaces, unquoted."""
    _polars_write(out, partial(fields.write_csv, include_header=False, separator=" ", quote_style="never"))


def _write_records_vectorised(df: pl.DataFrame, fmt: str, out: TextIO) -> int:
    """Records as JSON lines, a JSON array or CSV written by polars in slices: the same rows as `row_dicts`,
    5-20x faster (a day of a busy fleet is millions of records). The array holds one JSON line per record."""
    return write_record_stream([df], fmt, out)


def write_record_stream(frames: Iterable[pl.DataFrame], fmt: str, out: TextIO) -> int:
    """Records of frames written one after the other (in order) as JSON lines, one JSON array or CSV: the same
    text as their concatenation written at once."""
    if fmt == "csv":
        out.write(",".join(RECORD_FIELDS) + "\n")
    n = 0
    for df in frames:
        frame = conform(df, RECORD_SCHEMA).select(
            pl.col("ts").dt.convert_time_zone("UTC").dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").alias("ts"),
            *[c for c in RECORD_FIELDS if c != "ts"])
        # a JSON array's slices are rewritten as bytes in Python: a quarter of the rows keeps each buffer under
        # glibc's largest mmap threshold (32 MiB), so that freed buffers are reused instead of faulted in afresh
        # (a day: system time 2.8 -> 1.4-2.0 s, peak 640 -> 480-520 MiB)
        for chunk in frame.iter_slices(VECTOR_SLICE if fmt != "json" else max(1, VECTOR_SLICE // 4)):
            if chunk.height == 0:
                continue
            if fmt == "csv":
                _polars_write(out, partial(chunk.write_csv, include_header=False))
            elif fmt == "jsonl":
                _polars_write(out, chunk.write_ndjson)
            else:  # `[`, then each line as `\n  {...},` but the last, then `\n]`
                buf = io.BytesIO()
                chunk.write_ndjson(buf)
                data = buf.getvalue().removesuffix(b"\n").replace(b"\n", b",\n  ")
                write_bytes(out, (b"," if n else b"[") + b"\n  " + data)
            n += chunk.height
    if fmt == "json":
        out.write("\n]\n" if n else "[]\n")
    return n


def _json_str(col: pl.Expr) -> pl.Expr:
    """A String column as `json.dumps(value, ensure_ascii=False)` writes it (null: `null`), for values whose only
    control characters are newlines, returns and tabs (`_TS_ODD` sends the others to the row path)."""
    esc = (col.str.replace_all("\\", "\\\\", literal=True).str.replace_all('"', '\\"', literal=True)
           .str.replace_all("\n", "\\n", literal=True).str.replace_all("\r", "\\r", literal=True)
           .str.replace_all("\t", "\\t", literal=True))
    return pl.when(col.is_null()).then(pl.lit("null")).otherwise(pl.concat_str([pl.lit('"'), esc, pl.lit('"')]))


def _json_int(col: pl.Expr) -> pl.Expr:
    return pl.when(col.is_null()).then(pl.lit("null")).otherwise(col.cast(pl.String))


_TS_ODD = "[\x00-\x08\x0b\x0c\x0e-\x1f]"   # a control character json.dumps writes as an escape of its own


def _write_timesketch_records(df: pl.DataFrame, out: TextIO) -> Written:
    """Records as Timesketch JSON lines built by polars a slice at a time: the text of `_write_timesketch` (rows
    with a control character json.dumps escapes as \\u00XX are written by it)."""
    frame = conform(df, RECORD_SCHEMA)
    timed = frame.filter(pl.col("ts").is_not_null())
    ts = pl.col("ts").dt.convert_time_zone("UTC")
    strings = ("ts_source", "host", "ident", "unit", "path", "format")
    desc = pl.concat_str([pl.lit("Log time"), pl.when(pl.col("ts_source").is_in(sorted(INFERRED)))
                          .then(pl.lit(", ") + pl.col("ts_source").str.replace_all("_", " ", literal=True))
                          .otherwise(pl.lit(""))])
    line = pl.concat_str([
        pl.lit('{"message": '), _json_str(pl.col("message").fill_null("")),
        pl.lit(', "datetime": "'), ts.dt.strftime("%Y-%m-%dT%H:%M:%S%.6f+00:00"),
        pl.lit('", "timestamp": '), ts.dt.epoch("us").cast(pl.String),
        pl.lit(', "timestamp_desc": '), _json_str(desc),
        pl.lit(', "ts": "'), ts.dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ"), pl.lit('"'),
        *[x for c in ("ts_source", "host", "ident") for x in (pl.lit(f', "{c}": '), _json_str(pl.col(c)))],
        pl.lit(', "pid": '), _json_int(pl.col("pid")),
        pl.lit(', "unit": '), _json_str(pl.col("unit")),
        pl.lit(', "path": '), _json_str(pl.col("path")),
        pl.lit(', "line": '), _json_int(pl.col("line")), pl.lit(', "line_end": '), _json_int(pl.col("line_end")),
        pl.lit(', "format": '), _json_str(pl.col("format")), pl.lit("}\n")])
    odd = pl.any_horizontal([pl.col(c).fill_null("").str.contains(_TS_ODD) for c in ("message", *strings)])
    for chunk in timed.iter_slices(VECTOR_SLICE):
        _write_lines(chunk, chunk.select(line.alias("l"), odd.alias("o")),
                     lambda r: _timesketch_line(r, "records"), out)
    return Written(timed.height, frame.height - timed.height)


def write_rows(df: pl.DataFrame, fmt: str, out: TextIO, kind: Kind) -> Written:
    """Write `df` (a records or an events frame) to `out` in `fmt`; returns how many rows were written."""
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(EXPORT_FORMATS)}")
    if kind not in ("records", "events"):
        raise ValueError(f"unknown row kind {kind!r}; use 'records' or 'events'")
    if kind == "records" and fmt in ("jsonl", "json", "csv"):
        return Written(_write_records_vectorised(df, fmt, out))
    rows = row_dicts(df, kind)
    if fmt == "json":
        return Written(_write_json(rows, out))
    if fmt == "jsonl":
        return Written(_write_jsonl(rows, out))
    if fmt == "csv":
        return Written(_write_csv(rows, out, kind))
    if fmt == "timesketch":
        return _write_timesketch_records(df, out) if kind == "records" else _write_timesketch(rows, out, kind)
    return Written(_write_table(rows, out, kind, df))
