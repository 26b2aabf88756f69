"""The fast paths give exactly what the slow, declarative ones give.

- A format's `fast_pattern` (a one-pass regex for the common layout of a line's head) must claim only lines its
  `pattern` matches, with identical groups: `LineFormat.extract` equals `str.extract_groups(pattern)` for any
  lines (arbitrary text, near-misses of real lines, every sample line, the benchmark corpus when generated).
- The fast line splitter in `sources` (the CSV reader) must give the lines and repair counts of the exact one.
"""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from conftest import ROOT
from forensics import sources
from forensics.formats import FORMATS
from forensics.formats.base import group_names

FAST = sorted(name for name, f in FORMATS.items() if f.fast_pattern)
SAMPLES = ROOT / "samples" / "formats"
CORPUS = ROOT / "bench" / ".cache" / "42-1024"


def _slow(fmt, lines: pl.Series) -> pl.DataFrame:
    return lines.str.extract_groups(fmt.pattern).struct.unnest()


def _same(fmt, lines: list[str]) -> None:
    s = pl.Series("text", lines, dtype=pl.String)
    assert_frame_equal(fmt.extract(s), _slow(fmt, s))


def _sample_lines() -> list[str]:
    out: list[str] = []
    for p in sorted(SAMPLES.glob("*.log")):
        out.extend(p.read_text(encoding="utf-8", errors="replace").split("\n"))
    out.extend(f.example for f in FORMATS.values() if f.example)
    return out


SAMPLE_LINES = _sample_lines()


def test_fast_patterns_have_the_groups_of_the_pattern() -> None:
    assert FAST, "no format has a fast path"
    for name in FAST:
        fmt = FORMATS[name]
        assert group_names(fmt.pattern)[-1] == "msg", name
        assert set(group_names(fmt.fast_pattern)) == set(group_names(fmt.pattern)) - {"msg"} | {"_head"}, name
        assert fmt.fast_pattern.startswith("^(?P<_head>") and fmt.fast_pattern.endswith(")"), name


@pytest.mark.parametrize("name", FAST)
def test_fast_path_on_every_sample_line(name: str) -> None:
    _same(FORMATS[name], SAMPLE_LINES)


@pytest.mark.parametrize("name", FAST)
def test_fast_path_claims_its_own_sample(name: str) -> None:
    """Not dead code: the fast pattern takes the lines of the format's own sample that the pattern matches."""
    fmt = FORMATS[name]
    lines = pl.Series([fmt.example] + (fmt.sample_path.read_text().split("\n") if fmt.sample_path.exists() else []))
    matched = lines.filter(lines.str.contains(fmt.pattern))
    fast = matched.str.contains(fmt.fast_pattern)
    assert matched.len() and fast.mean() >= 0.8, (name, fast.mean())


# near-misses: real lines with a few characters inserted, deleted or replaced by ones that matter to the patterns
EDIT = [" ", "  ", "\t", ":", ": ", "[", "]", "[1]", "<3>", ".", ",", "-", "+", "Z", "0", "9", "1234567", "٣", "x",
        "é", "\u3000", "\u00a0", "\n", "\r", "T", "kernel", "TP0", " DP1", "ATTN_CP2", "May", "Sun", "UTC", "/", "_"]


@st.composite
def near_miss(draw) -> str:
    line = draw(st.sampled_from(SAMPLE_LINES))
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, min(len(line), 48)))
        op = draw(st.sampled_from(("ins", "del", "rep", "cut")))
        piece = draw(st.sampled_from(EDIT) | st.text(min_size=1, max_size=2))
        if op == "ins":
            line = line[:i] + piece + line[i:]
        elif op == "del":
            line = line[:i] + line[i + draw(st.integers(1, 3)):]
        elif op == "rep":
            line = line[:i] + piece + line[i + len(piece):]
        else:
            line = line[:i]
    return line


ANY_LINE = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)

# lines built from the parts of a line head, each in usual and unusual spellings
STAMPS = ["May 25 20:17:19", "May  5 20:17:19", "May 5 20:17:19", "May 125 20:17:19", "may 25 20:17:19",
          "Jun 25 20:17:19.123456", "Jul 25 20:17:19.", "Dec 25 20:17:19.1234567890", "May 2٥ 20:17:19",
          "2025-05-25T20:17:19+00:00", "2025-05-25T20:17:19+0000", "2025-05-25T20:17:19Z", "2025-05-25T20:17:19z",
          "2025-05-25T20:17:19.123456+00:00", "2025-05-25T20:17:19.123-05:00", "2025-05-25T20:17:19.1234567Z",
          "2025-05-25T20:17:19", "2025-05-25T20:17:19.123456", "2025-05-25 20:17:19,123", "2025/05/25 20:17:19",
          "2025-05-25T20:17:19,123456+00:00", "2025-05-25T20:17:19,123456+0200", "2025-05-25T20:17:19,123456",
          "[ 12.345678]", "[12.5]", "[\t1.5]", "[ 1.]", "[   8123.456789]", "1748204239.123456", "174820423.123456",
          "Sun 2025-05-25 20:17:19 UTC", "Sun 2025-05-25 20:17:19.123 CEST", "Mon 2025-05-25 20:17:19 Europe/Paris",
          "[2025-05-25 20:17:19]", "[2025-05-25 20:17:19 TP0]", "[2025-05-25 20:17:19.123 DP1 TP3]",
          "[2025-05-25 20:17:19 TP]", "[2025-05-25 20:17:19  TP0]", "[2025-05-25 20:17:19 ATTN_CP2 MOE_DP1 EP0]",
          "[2025-05-25 20:17:19.1234567 TP0]", "17482042.123456", "174820423912.123456", "1748204239.1234567",
          "<6>[ 1.0]", "<12>May 25 20:17:19", "<1234>May 25 20:17:19", "<1234>[ 1.0]", "kern  :err   : [ 1.0]", "user :info  :[ 1.0]",
          "[Sun May 25 20:17:19 2025]", "[Sun May  5 20:17:19 2025]", "[Sat May 25 20:17:19 25]", "INFO:", "TRACE:",
          "2025-05-25 20:29:46,981 - INFO - core.py:123 - flashinfer.jit:", "2025-05-25 20:29:46,981 - INFO - x:1 - y:",
          ""]
SEPS = [" ", " ", " ", "", "  ", "\t", "\u3000", " \n"]
HOSTS = ["h", "gpu-node-1", "a:b", "a[1]", "hôte", "x]y", "", "a:", "a\tb", "a\u3000b", "a\u00a0b"]
IDENTS = ["kernel", "systemd", "foo:bar", "a::", "a:", ":", "x]", "python3", "sshd(pam_unix)", "", "a b", "[", "é",
          "sglang.service", "k:8"]
PIDS = ["", "", "[1]", "[48213]", "[12a]", "[]", "[٣]", "[1", "1]", "[1]]"]
COLONS = [":", ":", "::", ": ", ":x", "", " :"]
MSGS = ["", " msg", "msg", " : x", "\n", " a\nb", " \t", "  x", " [1]: y", "\r"]

HEADED = st.builds(lambda *p: "".join(p), st.sampled_from(STAMPS), st.sampled_from(SEPS), st.sampled_from(HOSTS),
                   st.sampled_from(SEPS), st.sampled_from(IDENTS), st.sampled_from(PIDS), st.sampled_from(COLONS),
                   st.sampled_from(MSGS))
STAMPED = st.builds(lambda *p: "".join(p), st.sampled_from(STAMPS), st.sampled_from(SEPS), st.sampled_from(MSGS))
TOKENS = st.lists(st.sampled_from(EDIT + ["May 25 20:17:19", "2025-05-25T20:17:19", ".123456", "+00:00", "host",
                                          "sshd", "[2025-05-25 20:17:19", "[ 12.5]", "INFO:", "kern  :err   : "]),
                  max_size=12).map("".join)


def _built_lines() -> list[str]:
    """Every stamp with every separator and message; a seeded draw of full heads from the parts."""
    out = [a + b + c for a in STAMPS for b in SEPS for c in MSGS]
    rng = random.Random(1)
    parts = (STAMPS, SEPS, HOSTS, SEPS, IDENTS, PIDS, COLONS, MSGS)
    out += ["".join(rng.choice(p) for p in parts) for _ in range(40000)]
    return out


BUILT = _built_lines()


@pytest.mark.parametrize("name", FAST)
def test_fast_path_on_built_lines(name: str) -> None:
    _same(FORMATS[name], BUILT)


@pytest.mark.parametrize("name", FAST)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(HEADED | STAMPED | near_miss() | ANY_LINE | TOKENS, min_size=1, max_size=40))
def test_fast_path_equals_pattern_on_arbitrary_lines(name: str, lines: list[str]) -> None:
    _same(FORMATS[name], lines)


@pytest.mark.skipif(not CORPUS.is_dir(), reason="benchmark corpus not generated (bench/gen_corpus.py)")
@pytest.mark.parametrize("name", FAST)
def test_fast_path_on_the_benchmark_corpus(name: str) -> None:
    lines: list[str] = []
    for p in sorted(CORPUS.glob("*.log")):
        with open(p, "rb") as fh:
            lines.extend(fh.read(4 << 20).decode("utf-8", "replace").split("\n")[:-1])
    _same(FORMATS[name], lines)


# --- line splitting -----------------------------------------------------------------------------------------

PIECES = [b"a", b"b", b" ", b"\n", b"\n", b"\n", b"\r", b"\r\n", b'"', b",", b"\t", b"#", b"\x00", sources.BOM,
          "é".encode(), b"\xff", b"\xc3", "\u2028".encode(), b"\x0b"]


def _reference(data: bytes) -> tuple[list[str], tuple[int, int, int, int]]:
    """The original splitter: decode with replacement, count invalid lines, NULs and CRLF ends."""
    if data.endswith(b"\n"):
        data = data[:-1]
    nul = data.count(b"\x00")
    data = data.replace(b"\x00", "\ufffd".encode())
    raw = data.split(b"\n")
    text = [b.decode("utf-8", "replace") for b in raw]
    bad = sum(1 for b in raw if b.decode("utf-8", "replace").encode() != b)
    crlf = sum(1 for t in text if t.endswith("\r"))
    text = [t[:-1] if t.endswith("\r") else t for t in text]
    return text, (len(text), bad, nul, crlf)


@settings(max_examples=500, deadline=None)
@given(parts=st.lists(st.sampled_from(PIECES), min_size=1, max_size=16), whole=st.booleans(), first=st.integers(1, 9))
def test_line_splitting_is_exact(parts: list[bytes], whole: bool, first: int) -> None:
    data = b"".join(parts)
    end = data.rfind(b"\n") + 1 if whole and b"\n" in data else len(data)
    stats = sources.ReadStats()
    df = sources._decode(data, first, stats, end)
    text, counts = _reference(data[:end])
    assert df["text"].to_list() == text
    assert df["line"].to_list() == list(range(first, first + len(text)))
    assert (stats.lines, stats.invalid_utf8, stats.nul_bytes, stats.crlf) == counts


def test_fast_splitter_takes_ordinary_text() -> None:
    data = "May 25 20:17:19 h a[1]: x\r\n\n\"\n\ufeff é\nlast".encode()
    assert sources._split_fast(b"\xef\xbb\xbf" + data, len(data) + 3, sources.ReadStats()) is not None


def test_read_batches_cover_every_line(tmp_path: Path) -> None:
    rng = random.Random(7)
    body = b"".join(rng.choice([b"x\n", b"\n", b"yy\r\n", "é\n".encode(), b"\xff\n", b"\x00z\n", b"long" * 50 + b"\n"])
                    for _ in range(5000)) + b"tail"
    (tmp_path / "f.log").write_bytes(body)
    src = sources.expand([str(tmp_path / "f.log")])[0][0]
    stats = sources.ReadStats()
    frames = list(sources.read_batches(src, stats, block=997))
    got = pl.concat(frames)
    text, counts = _reference(body)
    assert got["text"].to_list() == text and got["line"].to_list() == list(range(1, len(text) + 1))
    assert (stats.lines, stats.invalid_utf8, stats.nul_bytes, stats.crlf) == counts
    assert stats.bytes == len(body)


# --- record assembly ----------------------------------------------------------------------------------------

def _assemble_reference(df: pl.DataFrame, ctx, final: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The first, plain-expression version of `parse._assemble` (over every row), kept as the reference."""
    from forensics.formats.base import Continuation
    from forensics.parse import MAX_CARRY, WORK
    from forensics.schema import RECORD_SCHEMA, conform

    real = pl.col("format") != "text"
    seg = real.cum_sum()
    policy = pl.when(real).then(pl.col("_policy")).forward_fill()
    indented = pl.col("text").str.contains(r"^\s")
    after_backslash = pl.col("text").shift(1).str.ends_with("\\").fill_null(False)
    breaker = (~real & ~indented & ~after_backslash).cast(pl.Int8).cum_max().over(seg) > 0
    cont = (~real & policy.is_not_null() & (
        (policy == Continuation.ANY.value)
        | ((policy == Continuation.INDENTED.value) & indented & ~breaker)
        | after_backslash
    ))
    df = df.with_columns(cont.alias("_cont")).with_columns((~pl.col("_cont")).cum_sum().alias("_rid"))
    carry = df.clear().select("line", "text")
    if not final and df.height:
        last = df["_rid"][-1]
        first = last
        # a text record after a claimed line continues under that line's policy: carried from that line on
        before = df.filter((pl.col("_rid") < last) & real)
        if df.filter(pl.col("_rid") == last)["format"][0] == "text" and before.height:
            first = before["_rid"][-1]
        if df.filter(pl.col("_rid") >= first).height == df.height >= MAX_CARRY:
            first = last
        tail = df.filter(pl.col("_rid") >= first)
        if tail.height < df.height or tail.height < MAX_CARRY:
            carry = tail.select("line", "text")
            df = df.filter(pl.col("_rid") < first)
    if df["_cont"].any():
        multi = pl.col("_cont") | pl.col("_cont").shift(-1).fill_null(False)
        piece = pl.when(pl.col("_cont")).then(pl.col("text")).otherwise(pl.col("message"))
        first_cols = [pl.col(c).first() for c in WORK if c not in ("line", "message", "text")]
        df = df.with_columns(multi.alias("_multi"))
        joined = (df.filter(pl.col("_multi")).with_columns(piece.alias("message"))
                  .group_by("_rid", maintain_order=True)
                  .agg(pl.col("line").first(), pl.col("line").last().alias("line_end"),
                       pl.col("message").str.join("\n"), *first_cols))
        single = df.filter(~pl.col("_multi")).with_columns(pl.col("line").alias("line_end"))
        df = pl.concat([single.select(joined.columns), joined]).sort("line")
    else:
        df = df.with_columns(pl.col("line").alias("line_end"))
    out = df.with_columns(pl.lit(None, dtype=pl.String).alias("ts_anchor"), pl.lit(None, dtype=pl.String).alias("boot_id"),
                          pl.lit(ctx.source_id).alias("source_id"), pl.lit(ctx.path).alias("path"))
    return conform(out, RECORD_SCHEMA), carry


POLICY = {"text": "none", "ind": "indented", "any": "any", "one": "none"}
TEXTS = ["", " ", "x", " x", "\tx", "\u3000x", "x\\", " x\\", "\\", "plain", "Traceback (most recent call last):"]


def test_assembly_equals_the_reference_on_a_seeded_sweep() -> None:
    rng = random.Random(3)
    for _ in range(800):
        rows = [(rng.choice(sorted(POLICY)), rng.choice(TEXTS), rng.randint(0, 3)) for _ in range(rng.randint(1, 40))]
        _check_assembly(rows, rng.random() < 0.5)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(sorted(POLICY)), st.sampled_from(TEXTS), st.integers(0, 3)),
                     min_size=1, max_size=40),
       final=st.booleans())
def test_assembly_equals_the_reference(rows: list[tuple[str, str, int]], final: bool) -> None:
    _check_assembly(rows, final)


def _check_assembly(rows: list[tuple[str, str, int]], final: bool) -> None:
    from forensics.parse import ParseContext, _assemble

    n = len(rows)
    df = pl.DataFrame({
        "line": list(range(1, n + 1)), "text": [t for _, t, _ in rows],
        "ts": pl.Series([None] * n, dtype=pl.Datetime("us", "UTC")), "ts_source": ["none"] * n,
        "ts_text": [None] * n, "mono": [float(k) for *_, k in rows], "host": [f"h{k}" for *_, k in rows],
        "ident": [None] * n, "pid": [k for *_, k in rows], "unit": [None] * n, "rank": [None] * n,
        "level": [None] * n, "message": [f"m{i}" if f != "text" else t for i, (f, t, _) in enumerate(rows)],
        "format": [f for f, _, _ in rows], "_policy": [POLICY[f] for f, _, _ in rows],
    }, schema_overrides={"ts_text": pl.String, "ident": pl.String, "unit": pl.String, "rank": pl.String,
                         "level": pl.String})
    ctx = ParseContext(path="p", source_id="s")
    got, got_carry = _assemble(df, ctx, final)
    ref, ref_carry = _assemble_reference(df, ctx, final)
    assert_frame_equal(got, ref)
    assert_frame_equal(got_carry, ref_carry)


# --- stamps -------------------------------------------------------------------------------------------------

ISO_STAMPS = ["2025-05-25T20:17:19.123456+00:00", "2025-05-25T20:17:19.123456+0200", "2025-05-25T20:17:19,123456-05:00",
              "2025-05-25T20:17:19.123456Z", "2025-05-25T20:17:19.123456z", "2025-05-25T20:17:19.123456",
              "2025-03-30T02:30:00.000001", "2025-10-26T02:30:00.5", "2025-10-26T02:30:00.500000",
              "2024-02-29T23:59:59.999999+00:00", "2025-02-29T10:00:00.000000+00:00", "2016-12-31T23:59:60.500000Z",
              "2025-13-01T00:00:00.000000Z", "2025-05-25T24:00:00.000000Z", "2025-05-25T20:17:19.123456+24:00",
              "2025-05-25T20:17:19.123456+23:59", "2025-05-25T20:17:19+00:00", "2025-05-25 20:17:19,123",
              "2025/05/25 20:17:19", "2025-05-25T20:17:19.1234567+00:00", "2025-05-25T20:17:19.123456,5",
              "٢٠٢٥-05-25T20:17:19.123456Z", "2025-05-25T20:17:19.123456+00:00 "]
SECONDS = ["May 25 20:17:19", "May  5 20:17:19", "Feb 29 00:00:00", "Feb 30 00:00:00", "May 25 20:17:19.5"]


def _stamp_frame(stamps: list[str], fmt_name: str) -> pl.DataFrame:
    fmt = FORMATS[fmt_name]
    lines = pl.Series([f"{s} h x[1]: m" if "journal" in fmt_name else f"{s} m" for s in stamps], dtype=pl.String)
    return _slow(fmt, lines).drop_nulls("msg")


@pytest.mark.parametrize("tz", ["UTC", "Europe/Paris", "America/New_York"])
@pytest.mark.parametrize("fmt_name", ["journal-short-iso-precise", "syslog-rfc3339", "dmesg-iso", "generic",
                                      "journal-short", "journal-short-precise", "sglang", "dmesg"])
@settings(max_examples=40, deadline=None)
@given(picks=st.lists(st.tuples(st.integers(0, 99), st.integers(1, 300)), min_size=1, max_size=12))
def test_stamp_columns_equal_the_expressions(fmt_name: str, tz: str, picks: list[tuple[int, int]]) -> None:
    """Runs of repeated stamps and the ISO fraction split give what the expressions give row by row."""
    from forensics.formats.base import Stamp
    from forensics.timeparse import stamp_columns, stamp_exprs

    pool = ISO_STAMPS + SECONDS + [f"[2025-05-25 20:17:{i:02d}]" for i in range(3)] + ["[ 12.5]", "[2.000001]"]
    stamps = [pool[i % len(pool)] for i, k in picks for _ in range(k)]
    df = _stamp_frame(stamps, fmt_name)
    fmt = FORMATS[fmt_name]
    ts, src, mono = stamp_exprs(fmt.stamp, set(df.columns), tz)
    want = df.with_columns(ts.alias("ts"), src.alias("ts_source"),
                           (mono if mono is not None else pl.lit(None, dtype=pl.Float64)).alias("mono"))
    got = stamp_columns(fmt.stamp, df, tz)
    assert_frame_equal(got, want.select("ts", "ts_source", "mono"))
    if fmt.stamp is Stamp.ISO and df.height:  # and the frame-aware expressions alone
        ts, src, _ = stamp_exprs(fmt.stamp, set(df.columns), tz, df)
        assert_frame_equal(df.select(ts.alias("ts"), src.alias("ts_source")), want.select("ts", "ts_source"))


@pytest.mark.parametrize("tz", ["UTC", "Europe/Paris", "America/New_York"])
@settings(max_examples=30, deadline=None)
@given(picks=st.lists(st.tuples(st.integers(0, 99), st.integers(1, 400)), min_size=1, max_size=12))
def test_iso_fraction_split_equals_the_expressions(tz: str, picks: list[tuple[int, int]]) -> None:
    import re

    from forensics.timeparse import ISO_US, stamp_columns, stamp_exprs

    canonical = [s for s in ISO_STAMPS if re.match(ISO_US, s)]
    assert len(canonical) >= 8
    stamps = [canonical[i % len(canonical)] for i, k in picks for _ in range(k)]
    stamps += [s.replace(".", ",") for s in canonical] * 100  # over 1024 rows: the split runs
    df = pl.DataFrame({"stamp": stamps})
    fmt = FORMATS["syslog-rfc3339"]
    ts, src, _ = stamp_exprs(fmt.stamp, {"stamp"}, tz)
    assert_frame_equal(stamp_columns(fmt.stamp, df, tz).select("ts", "ts_source"),
                       df.select(ts.alias("ts"), src.alias("ts_source")))
