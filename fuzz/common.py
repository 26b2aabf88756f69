"""What the fuzz harnesses check, shared by the atheris harnesses (`fuzz/fuzz_*.py`) and the hypothesis
tests (`tests/test_fuzz_short.py`).

Each `check_*` function takes fuzzer bytes and raises `Finding` (or any exception that escaped the code
under test) when something is wrong. No exception may escape forensics, and every input byte is accounted
for: the source's size and line count are the input's, every line lies in exactly one record, each stored
file holds the rows its manifest entry counts, and a record has a time exactly when its `ts_source` says it
has one.

KNOWN lists bugs already reported and tracked by a strict xfail test; a finding that matches one is counted,
not raised, so the fuzzer keeps looking for new ones. Remove an entry when its xfail test starts passing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import traceback
from collections import Counter
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
try:
    import forensics  # noqa: F401  (installed, or on PYTHONPATH)
except ImportError:
    sys.path.insert(0, str(ROOT))

# (id, exception type name, regex over the message, regex over the traceback) -> the xfail test tracking it
KNOWN: list[tuple[str, str, str, str]] = [
    # none at present (the last ones, out-of-range stamps, a batch cut after a backslash line and zlib errors
    # escaping head_bytes, were fixed with their xfail tests)
]
HITS: Counter[str] = Counter()


class Finding(AssertionError):
    """An invariant of the ingest does not hold; the message starts with the invariant's id."""


def known(exc: BaseException) -> str | None:
    """The KNOWN id `exc` matches, or None."""
    name = type(exc).__name__
    msg = str(exc)
    tb = "".join(traceback.format_exception(exc))
    for kid, etype, mrx, tbrx in KNOWN:
        if re.fullmatch(etype, name) and re.search(mrx, msg) and re.search(tbrx, tb):
            return kid
    return None


def tolerate_known(fn):  # noqa: ANN001, ANN201
    """Wrap a check so that a KNOWN bug is counted instead of raised."""

    def run(data: bytes) -> None:
        try:
            fn(data)
        except Exception as e:  # noqa: BLE001
            kid = known(e)
            if kid is None:
                raise
            HITS[kid] += 1

    run.__name__ = fn.__name__
    return run


# ------------------------------------------------------------------------------------------------------------
# the ingest: bytes -> detect -> parse -> normalise -> times -> rules -> store

_WORK = Path(os.environ.get("FORENSICS_FUZZ_TMP")
             or ("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()))
_STORE_DIR = Path(tempfile.mkdtemp(prefix="forensics-fuzz-", dir=_WORK))
_RULES = None
TIMED = {"exact", "zone_assumed", "year_inferred", "boot_anchored"}
UNTIMED = {"none", "monotonic_only"}


def rules():  # noqa: ANN201
    global _RULES
    if _RULES is None:
        from forensics.rulepacks import load_rules

        _RULES = load_rules()
    return _RULES


def expected_lines(data: bytes) -> int:
    """The lines of `data` split at its `\n` bytes."""
    return 0 if not data else data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def ingested_lines(data: bytes) -> int:
    """The lines of a file holding `data`, as ingest numbers them: UTF-16 text (sources.sniff_encoding: a byte
    order mark, or NULs beside nearly every byte) by its decoded line feeds (`0a 0a` in UTF-16LE is U+0A0A, no line
    end; a byte order mark alone is a line, as in UTF-8), anything else by its `\n` bytes."""
    from forensics.sources import SNIFF, sniff_encoding

    enc = sniff_encoding(data[:SNIFF])
    return expected_lines(data.decode(enc, "replace").encode("utf-8", "replace") if enc else data)


def covers(recs: pl.DataFrame, n: int, what: str) -> None:
    """Every line 1..n lies in exactly one record's line..line_end."""
    spans = sorted(zip(recs["line"].to_list(), recs["line_end"].to_list()))
    expect = 1
    for a, b in spans:
        if a is None or b is None or a != expect or b < a:
            raise Finding(f"line-coverage: {what}: expected a record starting at line {expect}, got {a}..{b} "
                          f"(spans {spans[:12]}...)")
        expect = b + 1
    if expect != n + 1:
        raise Finding(f"line-coverage: {what}: records cover lines 1..{expect - 1} of {n}")


def time_consistency(recs: pl.DataFrame, what: str) -> None:
    bad_src = recs.filter(~pl.col("ts_source").is_in(sorted(TIMED | UNTIMED)) | pl.col("ts_source").is_null())
    if bad_src.height:
        raise Finding(f"ts-source-unknown: {what}: ts_source {bad_src['ts_source'][0]!r}")
    null_timed = recs.filter(pl.col("ts").is_null() & pl.col("ts_source").is_in(sorted(TIMED)))
    if null_timed.height:
        r = null_timed.row(0, named=True)
        raise Finding(f"ts-null-with-source: {what}: line {r['line']} has no time but ts_source {r['ts_source']!r} "
                      f"(stamp {r['ts_text']!r})")
    timed_none = recs.filter(pl.col("ts").is_not_null() & pl.col("ts_source").is_in(sorted(UNTIMED)))
    if timed_none.height:
        r = timed_none.row(0, named=True)
        raise Finding(f"ts-with-no-source: {what}: line {r['line']} has time {r['ts']} "
                      f"but ts_source {r['ts_source']!r}")


def fresh_store():  # noqa: ANN201
    from forensics.store import Store

    shutil.rmtree(_STORE_DIR / "s", ignore_errors=True)
    store = Store(_STORE_DIR / "s")
    store.init()
    return store


COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd")


def check_ingest(data: bytes, fmt: str | None = None) -> None:
    """The whole ingest (`forensics.pipeline.ingest`) of one file holding the bytes, into a fresh store."""
    from forensics import pipeline
    from forensics.pipeline import IngestOptions, ingest

    if getattr(pipeline, "_load_rules", None) is not None and not getattr(pipeline._load_rules, "cached", False):
        def cached(opts, _real=pipeline._load_rules):  # noqa: ANN001, ANN202 - the packs once, not per input
            return rules() if not opts.rules_dirs else _real(opts)
        cached.cached = True  # type: ignore[attr-defined]
        pipeline._load_rules = cached
    store = fresh_store()
    path = _STORE_DIR / "input.log"
    path.write_bytes(data)
    rep = ingest(store, [str(path)], IngestOptions(fmt=fmt))
    compressed = data.startswith(COMPRESSED_MAGIC)
    if rep.failed:
        errors = [*rep.errors, *(r.error or "" for r in rep.results if r.status == "failed")]
        # refused with one message naming the file: a broken compressed stream, or bytes that are not a text log
        if len(errors) == 1 and "input.log" in errors[0] and (compressed or "not a text log" in errors[0]):
            if rep.results and any(r.status == "ingested" for r in rep.results) and not compressed:
                raise Finding(f"refused-and-ingested: {errors}")
            return
        raise Finding(f"failed: {errors}")
    (res,) = rep.results
    e = res.entry
    if res.status != "ingested" or e is None:
        raise Finding(f"not-ingested: status {res.status!r}")
    if e.size != len(data):
        raise Finding(f"size: entry says {e.size} bytes, the input has {len(data)}")
    n = e.lines if compressed else ingested_lines(data)
    if e.lines != n:
        raise Finding(f"line-count: entry says {e.lines} lines, the input has {n}")
    recs = store.records().collect()
    events = store.events().collect()
    if recs.height != e.records or events.height != e.events:
        raise Finding(f"counts: files hold {recs.height} records / {events.height} events, the entry says "
                      f"{e.records} / {e.events}")
    covers(recs, n, f"format {e.format}")
    time_consistency(recs, f"format {e.format}")
    if events.height:
        bad = [ln for ln in events["line"].to_list() if ln is None or ln < 1 or ln > max(n, 1)]
        if bad:
            raise Finding(f"event-line: events point at lines {bad[:5]} outside 1..{n}")
        if events["rule"].is_null().any():
            raise Finding("event-rule: an event without a rule")
        for f in events["fields"].to_list():
            if f:
                json.loads(f)
    ts = recs["ts"].drop_nulls()
    if bool(ts.len()) != (e.first_ts is not None):
        raise Finding(f"span: first_ts {e.first_ts!r} but {ts.len()} timed records")
    if not compressed:
        json_text_kept(recs, data)


def json_text_kept(recs: pl.DataFrame, data: bytes) -> None:
    """A journal-json line that is not a JSON object (a half-written last line) keeps its text. A json-sse event
    spans its blank line too, so only a last event without one is checked here."""
    rows = recs.filter(pl.col("format").str.starts_with("journal-json") & (pl.col("line") == pl.col("line_end")))
    if not rows.height:
        return
    lines = data.decode("utf-8", "replace").replace("\x00", "\ufffd").split("\n")
    for ln, msg, fmt in zip(rows["line"].to_list(), rows["message"].to_list(), rows["format"].to_list()):
        text = lines[ln - 1].rstrip("\r").strip().lstrip("\x1e")
        if fmt == "journal-json-sse":  # an event's object follows `data: `
            text = text.removeprefix("data: ")
        try:
            ok = isinstance(json.loads(text), dict)
        except ValueError:
            ok = False
        if not ok and text and text not in (msg or ""):
            raise Finding(f"json-text-lost: line {ln} is not a JSON object and its text {text[:60]!r} is not in "
                          f"its record (message {str(msg)[:60]!r})")


# ------------------------------------------------------------------------------------------------------------
# every parser, forced, with the batch cut anywhere

def parse_split(lines: list[str], fmt_name: str, cut: int) -> None:
    from forensics.formats import FORMATS, StructuredFormat
    from forensics.parse import ParseContext, parse_lines, parse_structured

    fmt = FORMATS[fmt_name]
    frame = pl.DataFrame({"line": list(range(1, len(lines) + 1)), "text": lines},
                         schema={"line": pl.Int64, "text": pl.String})
    ctx = ParseContext(path="fuzz.log", source_id="fuzz")
    if isinstance(fmt, StructuredFormat):
        whole, carry = parse_structured(fmt, frame, ctx, final=True)
        if carry.height:
            raise Finding(f"carry-final: {fmt_name} left {carry.height} lines after the final batch")
        a, carry = parse_structured(fmt, frame.head(cut), ctx, final=False)
        b, _ = parse_structured(fmt, pl.concat([carry, frame.slice(cut)]), ctx, final=True)
    else:
        chain = [fmt, FORMATS["text"]] if fmt_name != "text" else [fmt]
        whole, carry = parse_lines(frame, chain, ctx, final=True)
        if carry.height:
            raise Finding(f"carry-final: {fmt_name} left {carry.height} lines after the final batch")
        covers(whole, len(lines), f"forced {fmt_name}")
        a, carry = parse_lines(frame.head(cut), chain, ctx, final=False)
        b, _ = parse_lines(pl.concat([carry, frame.slice(cut)]), chain, ctx, final=True)
    joined = pl.concat([a, b]).sort("line")
    cols = ["line", "line_end", "message"]
    if not joined.select(cols).equals(whole.sort("line").select(cols)):
        tag = " (a backslash line before the cut)" if any(t.endswith("\\") for t in lines[:cut]) else ""
        raise Finding(f"batch-split: {fmt_name}: cutting the batch after line {cut} changes the records{tag}")


def check_formats(data: bytes) -> None:
    """Detection, then every format forced, over the same lines (first byte picks the cut)."""
    from forensics.detect import detect
    from forensics.formats import FORMATS
    from forensics.sources import ReadStats, Source, read_batches

    if not data:
        return
    cut_seed, body = data[0], data[1:]
    frames = list(read_batches(Source("-", None, None, None, stdin_data=body), ReadStats()))
    frame = pl.concat(frames) if frames else pl.DataFrame(schema={"line": pl.Int64, "text": pl.String})
    if frame["line"].to_list() != list(range(1, frame.height + 1)):
        raise Finding("decode-line-numbers: read_batches did not number the lines 1..n")
    lines = frame["text"].to_list()
    if len(lines) != expected_lines(body):
        raise Finding(f"decode-lines: {len(lines)} lines decoded, the input has {expected_lines(body)}")
    if not lines:
        return
    det = detect(frame["text"], "fuzz.log")
    if not det.formats or det.formats[-1] != "text" and len(det.formats) != 1:
        raise Finding(f"detect: formats {det.formats} do not end with text")
    if not 0.0 <= det.confidence <= 1.0:
        raise Finding(f"detect: confidence {det.confidence}")
    cut = 1 + cut_seed % max(1, len(lines))
    names = sorted(FORMATS)
    # the detected formats and three more picked by the input (all of them over a fuzzing run)
    chosen = dict.fromkeys([*det.formats, *(names[(cut_seed * 7 + k * 11) % len(names)] for k in range(3))])
    for name in chosen:
        parse_split(lines, name, min(cut, len(lines)))


# ------------------------------------------------------------------------------------------------------------
# the rule engine: packs from YAML, matching (vectorised == general path), the flag parsers

_PACK_DIR = Path(tempfile.mkdtemp(prefix="forensics-fuzz-rules-", dir=_WORK))


def check_pack_yaml(data: bytes) -> None:
    """Any bytes as a rule pack file: loads, or fails with RulePackError naming the file."""
    from forensics.rulepacks import RulePackError, load_pack

    p = _PACK_DIR / "fuzz.yaml"
    p.write_bytes(data)
    try:
        pack = load_pack(p)
    except RulePackError as e:
        if not e.errors or any("fuzz.yaml" not in str(path) for path, _, _ in e.errors):
            raise Finding(f"pack-error-location: {e.errors[:3]}") from e
        return
    for r in pack.rules:
        if not r.id:
            raise Finding("pack-rule-id: a rule without an id loaded")


def check_match(data: bytes) -> None:
    """Records parsed from the bytes, matched by the built-in rules; the vectorised and general paths agree."""
    from forensics.casts import parse_command_flags, parse_server_args
    from forensics.match import match_records
    from forensics.parse import parse_text

    text = data.decode("utf-8", "replace")
    recs = parse_text(text, path="fuzz.log")
    recs = recs.with_columns(pl.lit("fuzz").alias("source_id"))
    time_consistency(recs, "parse_text")
    fast = match_records(recs, rules())
    slow = match_records(recs, rules(), vectorise=False)
    cols = ["rule", "line", "line_end", "title", "fields"]
    if not fast.select(cols).equals(slow.select(cols)):
        diff = fast.select(cols).join(slow.select(cols), on=cols, how="anti")
        raise Finding(f"vectorised-vs-general: {fast.height} vs {slow.height} events; first differing: "
                      f"{diff.head(2).to_dicts()}")
    for line in text.split("\n")[:20]:
        parse_command_flags(line)
        parse_server_args(line)


def check_rules(data: bytes) -> None:
    """The rule engine: rule pack text (input starting like a pack file) or log text to match."""
    if data.lstrip().startswith((b"#", b"pack:", b"rules:", b"version:", b"kinds:", b"lookups:")):
        check_pack_yaml(data)
    else:
        check_match(data)


def cleanup() -> None:
    shutil.rmtree(_STORE_DIR, ignore_errors=True)
    shutil.rmtree(_PACK_DIR, ignore_errors=True)


# ------------------------------------------------------------------------------------------------------------
# the atheris driver shared by the harnesses

def instrumented_imports() -> None:
    """Import forensics under atheris' coverage instrumentation (its dependencies stay uninstrumented)."""
    import atheris
    import click  # noqa: F401
    import jinja2  # noqa: F401
    import regex  # noqa: F401
    import yaml  # noqa: F401

    with atheris.instrument_imports(include=["forensics"]):
        import forensics.detect  # noqa: F401
        import forensics.formats  # noqa: F401
        import forensics.match  # noqa: F401
        import forensics.normalise  # noqa: F401
        import forensics.parse  # noqa: F401
        import forensics.pipeline  # noqa: F401
        import forensics.rulepacks  # noqa: F401
        import forensics.sources  # noqa: F401
        import forensics.store  # noqa: F401
        import forensics.timeparse  # noqa: F401


def fuzz_main(check) -> None:  # noqa: ANN001
    """Run `check` under atheris with the command line's libFuzzer options. Known bugs are counted in the
    JSON file named by FORENSICS_FUZZ_STATS (if set), not reported as crashes."""
    import atexit

    import atheris

    instrumented_imports()
    run_one = tolerate_known(check)
    stats_path = os.environ.get("FORENSICS_FUZZ_STATS")
    state = {"execs": 0}

    def save() -> None:
        if stats_path:
            Path(stats_path).write_text(json.dumps({"execs": state["execs"], "known": dict(HITS)}))

    def one(data: bytes) -> None:
        state["execs"] += 1
        before = sum(HITS.values())
        run_one(data)
        if stats_path and (state["execs"] % 25 == 0 or sum(HITS.values()) != before):
            save()

    atexit.register(save)
    atexit.register(cleanup)
    rules()  # load the packs once, before fuzzing
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
