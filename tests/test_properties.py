"""Property tests: no parser raises on arbitrary input; every line lands in exactly one record."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.detect import detect
from forensics.formats import FORMATS, StructuredFormat
from forensics.journalfile import MAGIC as JOURNAL_MAGIC
from forensics.parse import ParseContext, parse_lines, parse_structured, parse_text
from forensics.pipeline import IngestOptions, ingest
from forensics.store import Store

PIECES = [
    "May 25 20:17:19 h systemd[1]: x.service: Main process exited, code=killed, status=9/KILL",
    "2025-05-25T20:17:19+00:00 h kernel: Out of memory: Killed process 1 (p)",
    "[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    "[2025-05-25 20:17:19 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "x.py", line 1, in f', "RuntimeError: boom", "", "   ", "\t", "-- Boot 0123456789abcdef0123456789abcdef --",
    "ExecStart=/bin/x --a 1 \\", "  --b 2", "\u00d7 x.service - X", "     Active: failed (Result: signal) since Sun "
    "2025-05-25 20:17:19 UTC; 1min ago", "failed", '{"__REALTIME_TIMESTAMP":"1748204239000000","MESSAGE":[1,2]}',
    "{", "}", "Feb 30 10:00:00 h a[1]: bad date", "[E0525 20:17:19.1 x.cc:1] glog", "9999-99-99T99:99:99Z junk",
]
line = st.one_of(st.sampled_from(PIECES), st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=80))


def _covers(recs: pl.DataFrame, n: int) -> None:
    spans = sorted(zip(recs["line"].to_list(), recs["line_end"].to_list()))
    expect = 1
    for a, b in spans:
        assert a == expect and b >= a
        expect = b + 1
    assert expect == n + 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(line, min_size=1, max_size=30))
def test_every_format_parses_any_lines_and_covers_each_line_once(lines: list[str]) -> None:
    frame = pl.DataFrame({"line": list(range(1, len(lines) + 1)), "text": lines},
                         schema={"line": pl.Int64, "text": pl.String})
    ctx = ParseContext(path="p")
    for fmt in FORMATS.values():
        if isinstance(fmt, StructuredFormat):
            recs, _ = parse_structured(fmt, frame, ctx, final=True)
            continue
        recs, carry = parse_lines(frame, [fmt, FORMATS["text"]], ctx, final=True)
        assert carry.height == 0
        _covers(recs, len(lines))
    det = detect(frame["text"])
    fmts = [FORMATS[f] for f in det.formats]
    if isinstance(fmts[0], StructuredFormat):
        parse_structured(fmts[0], frame, ctx, final=True)
        return
    recs, _ = parse_lines(frame, fmts, ctx, final=True)
    _covers(recs, len(lines))


@settings(max_examples=60, deadline=None)
@given(st.lists(line, min_size=1, max_size=20), st.integers(1, 5))
def test_batches_split_anywhere_give_the_same_records(lines: list[str], cut: int) -> None:
    frame = pl.DataFrame({"line": list(range(1, len(lines) + 1)), "text": lines},
                         schema={"line": pl.Int64, "text": pl.String})
    ctx = ParseContext(path="p")
    fmts = [FORMATS[f] for f in detect(frame["text"]).formats]
    if isinstance(fmts[0], StructuredFormat):
        return
    whole, _ = parse_lines(frame, fmts, ctx, final=True)
    cut = min(cut, len(lines))
    a, carry = parse_lines(frame.head(cut), fmts, ctx, final=False)
    b, _ = parse_lines(pl.concat([carry, frame.slice(cut)]), fmts, ctx, final=True)
    joined = pl.concat([a, b])
    assert joined.select("line", "line_end", "message").equals(whole.select("line", "line_end", "message"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_ingest_never_raises_on_arbitrary_bytes(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "b.log"
    p.write_bytes(data)
    store = Store(tmp_path / "s")
    rep = ingest(store, [str(p)], IngestOptions(force=True))
    if rep.failed:  # a broken compressed stream or plainly binary data may fail, and it says which file
        err = rep.results[0].error
        assert "b.log" in err
        # a systemd journal file's magic sends it to journalctl, which says what it could not read
        journal = data.startswith(JOURNAL_MAGIC) and "journalctl" in err
        assert data[:2] in (b"\x1f\x8b", b"BZ", b"\xfd7", b"\x28\xb5") or "not a text log" in err or journal
        return
    e = rep.results[0].entry
    n = 0 if not data else data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    if rep.results[0].entry and e.lines != n:  # a compressed stream: its lines are the decompressed ones
        assert data[:2] in (b"\x1f\x8b", b"BZ", b"\xfd7", b"\x28\xb5")
        return
    assert e.lines == n


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=300))
def test_parse_text_never_raises(text: str) -> None:
    parse_text(text)
