"""Hostile inputs, ingested together in one command: every bad input gets one clear message naming it, the good
ones land whole, the exit status is 1, no traceback, and memory stays bounded (peak RSS of the ingest process,
read with os.wait4).

Sizes: the big file is FORENSICS_TEST_BIG_MB MiB (default 48, to keep `make test` short: log lines, then a NUL
hole, as a log copied half-written off a crashed machine leaves it); `FORENSICS_TEST_BIG_MB=2048 make test` runs
the 2 GB case.
The peak RSS allowed is FORENSICS_TEST_RSS_MB (default 640 MiB), whatever the size.

Unreadable files: the tests run as root, which reads a chmod 000 file anyway. The ingest subprocess therefore
drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from its capability bounding set (prctl PR_CAPBSET_DROP) before
exec: it stays root, but file modes apply to it. Where that is impossible the unreadable input is skipped.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import gzip
import io
import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

from forensics.store import Store

NOT_A_LOG = r"binary|not a (text )?log"   # what the message about an ELF or PNG input must say
BIG_MB = int(os.environ.get("FORENSICS_TEST_BIG_MB", "48"))
RSS_LIMIT_MB = int(os.environ.get("FORENSICS_TEST_RSS_MB", "640"))
TEN_MB = 10 << 20

# ------------------------------------------------------------------------------------------------------------
# helpers (also used by test_crash, test_concurrency and test_safety)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    maxrss_mb: float


_libc = ctypes.CDLL(None, use_errno=True)
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2


def _drop_dac() -> None:
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def can_drop_dac() -> bool:
    if os.geteuid() != 0:
        return True   # file modes already apply
    try:
        r = subprocess.run([sys.executable, "-c", "print(1)"], preexec_fn=_drop_dac, capture_output=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def cli(store: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "forensics.cli", "--store", str(store), *args]


# Runs a command as its own child and writes the child's peak RSS (KiB) to fd argv[1], exiting as the child did.
# A process's ru_maxrss counts the image it was forked from (Linux keeps the high-water mark across exec), so a
# CLI forked straight from pytest would be charged pytest's own memory; forked from this small process, it is not.
_MEASURE = """
import os, signal, sys
fd, cmd = int(sys.argv[1]), sys.argv[2:]
pid = os.fork()
if pid == 0:
    os.execvp(cmd[0], cmd)
_, status, usage = os.wait4(pid, 0)
os.write(fd, str(usage.ru_maxrss).encode())
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
os._exit(os.waitstatus_to_exitcode(status))
"""


def run_cli(store: Path, *args: str, drop_dac: bool = False, timeout: float = 900, cwd: Path | None = None,
            env: dict | None = None) -> Run:
    """Run the CLI; return its exit status, output and peak RSS (MiB, from wait4's rusage, measured by a small
    parent: see _MEASURE)."""
    rfd, wfd = os.pipe()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            p = subprocess.Popen([sys.executable, "-c", _MEASURE, str(wfd), *cli(store, *args)], stdout=out,
                                 stderr=err, stdin=subprocess.DEVNULL, cwd=cwd, pass_fds=(wfd,),
                                 start_new_session=True,
                                 preexec_fn=_drop_dac if drop_dac and os.geteuid() == 0 else None,
                                 env={**os.environ, **(env or {})})
        finally:
            os.close(wfd)
        try:
            _, status, _usage = _wait4(p, timeout)
        finally:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
        with os.fdopen(rfd, "rb") as fh:
            peak = fh.read().decode() or "0"
        out.seek(0)
        err.seek(0)
        return Run(os.waitstatus_to_exitcode(status), out.read().decode("utf-8", "replace"),
                   err.read().decode("utf-8", "replace"), int(peak) / 1024)


def _wait4(p: subprocess.Popen, timeout: float):  # noqa: ANN202
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return pid, status, usage
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)     # the measuring parent and the CLI under it
            p.kill()
            raise TimeoutError(f"{p.args} still running after {timeout} s")
        time.sleep(0.05)


def journal_lines(n: int, tag: str = "x", host: str = "gpu-node-1", start_minute: int = 0,
                  oom_every: int = 0) -> str:
    """n journalctl short-iso lines; every `oom_every` lines an OOM kill (kernel + systemd) that rules match."""
    out = []
    for i in range(n):
        m, s = divmod(start_minute * 60 + i, 60)
        stamp = f"2025-05-25T{(m // 60) % 24:02d}:{m % 60:02d}:{s:02d}+00:00"
        if oom_every and i % oom_every == oom_every - 1:
            out.append(f"{stamp} {host} kernel: Out of memory: Killed process {4000 + i} (python3) total-vm:1000kB, "
                       f"anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0")
        else:
            out.append(f"{stamp} {host} app-{tag}[{1000 + i % 7}]: {tag} request {i} served in {i % 97} ms")
    return "\n".join(out) + "\n"


def sources_json(store: Path) -> list[dict]:
    r = subprocess.run(cli(store, "sources", "--json"), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout or "[]")


def lines_of(data: bytes) -> int:
    return 0 if not data else data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def mentions(stderr: str, name: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if name in ln]


# ------------------------------------------------------------------------------------------------------------
# the inputs


def elf_bytes() -> bytes:
    header = b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 8 + struct.pack("<HHI", 2, 62, 1) + b"\x00" * 40
    return header + random.Random(7).randbytes(48 << 10)


def png_bytes() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    raw = random.Random(8).randbytes(64 * 64 * 3 + 64)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 64, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def truncated_gz() -> tuple[bytes, int]:
    """A gzip of 30,000 lines cut short; returns (bytes, lines fully decompressible before the cut)."""
    body = journal_lines(30000, "gz").encode()
    whole = gzip.compress(body, mtime=0)
    cut = whole[: len(whole) * 2 // 3]
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    got = d.decompress(cut)
    return cut, got.count(b"\n")


STAMPS = (b"1970-01-01T00:00:00+00:00 h app[1]: the epoch\n"
          b"9999-12-31T23:59:59+00:00 h app[1]: the last second of year 9999\n"
          b"2025-02-30T12:00:00+00:00 h app[1]: February 30th\n"
          b"9999-12-31T23:59:59-05:00 h app[1]: past year 9999 once in UTC\n"
          b"0001-01-01T00:00:00+05:00 h app[1]: before year 1 once in UTC\n")


def write_big(path: Path, size: int, hole: bool = True) -> int:
    """`size` bytes: log lines, then (if `hole`) a NUL hole over the last quarter and one final line.
    Written in large blocks (the hole is sparse): a few seconds for 2 GB. Returns the line count."""
    block = journal_lines(20000, "big").encode()
    lines_part = size * 3 // 4 if hole else size
    lines = 0
    with open(path, "wb") as fh:
        written = 0
        while written + len(block) <= lines_part:
            fh.write(block)
            written += len(block)
            lines += 20000
        if hole:
            tail = b"\n2025-05-25T23:59:59+00:00 gpu-node-1 app-big[1]: written after the hole\n"
            fh.truncate(size - len(tail))
            fh.seek(size - len(tail))
            fh.write(tail)
            lines += 2   # the NUL run is one line, the last line another
        else:
            fh.truncate(written)
    return lines


def make_inputs(d: Path, big_mb: int = BIG_MB) -> tuple[dict[str, tuple[Path, int | None]], dict[str, Path]]:
    """(good inputs: name -> (path, expected lines or None), bad inputs: name -> path)."""
    good: dict[str, tuple[Path, int | None]] = {}
    bad: dict[str, Path] = {}

    def put(name: str, data: bytes) -> Path:
        p = d / name
        p.write_bytes(data)
        return p

    g = journal_lines(400, "good", oom_every=100).encode()
    good["good.log"] = (put("good.log", g), lines_of(g))
    good["empty.log"] = (put("empty.log", b""), 0)
    crlf = journal_lines(50, "crlf").replace("\n", "\r\n").encode()
    good["crlf.log"] = (put("crlf.log", crlf), lines_of(crlf))
    bad_utf8 = journal_lines(20, "utf").encode().replace(b"request 3 ", b"caf\xe9 \xff\xfe\xc3 request 3 ")
    good["invalid-utf8.log"] = (put("invalid-utf8.log", bad_utf8), lines_of(bad_utf8))
    nul = journal_lines(20, "nul").encode().replace(b"request 5 ", b"req\x00uest\x00\x00 5 ") + b"\x00\x00\n"
    good["nul.log"] = (put("nul.log", nul), lines_of(nul))
    long = (journal_lines(2, "long").encode() + b"2025-05-25T00:00:03+00:00 h app[1]: " + b"A" * TEN_MB + b"\n"
            + journal_lines(2, "long", start_minute=1).encode())
    good["long-line.log"] = (put("long-line.log", long), 5)
    good["stamps.log"] = (put("stamps.log", STAMPS), lines_of(STAMPS))
    (d / "adir" / "nested").mkdir(parents=True)
    (d / "adir" / "empty-subdir").mkdir()
    inner = journal_lines(30, "inner").encode()
    good["adir"] = (put("adir/nested/inner.log", inner), lines_of(inner))
    big = d / "big.log"
    good["big.log"] = (big, write_big(big, big_mb << 20))

    bad["elf.bin"] = put("elf.bin", elf_bytes())
    bad["image.png"] = put("image.png", png_bytes())
    bad["truncated.log.gz"] = put("truncated.log.gz", truncated_gz()[0])
    bad["missing.log"] = d / "missing.log"
    unreadable = put("unreadable.log", journal_lines(5, "secret").encode())
    unreadable.chmod(0)
    bad["unreadable.log"] = unreadable
    fifo = d / "fifo"
    os.mkfifo(fifo)
    bad["fifo"] = fifo
    (d / "emptydir").mkdir()
    bad["emptydir"] = d / "emptydir"
    return good, bad


# ------------------------------------------------------------------------------------------------------------
# all of them in one command


def test_hostile_inputs_in_one_command(tmp_path: Path) -> None:
    if not can_drop_dac():
        pytest.skip("cannot drop CAP_DAC_OVERRIDE: a chmod 000 file stays readable to root")
    good, bad = make_inputs(tmp_path)
    store = tmp_path / "store"
    args = [str(p) for p, _ in good.values()] + [str(p) for p in bad.values()]
    args = [str(tmp_path / "adir") if a.endswith("inner.log") else a for a in args]
    r = run_cli(store, "ingest", *args, drop_dac=True)
    report = f"exit {r.returncode}, peak RSS {r.maxrss_mb:.0f} MiB\n{r.stderr[-4000:]}"
    print(f"{len(good)} good and {len(bad)} bad inputs ({BIG_MB} MiB in all) in one ingest: exit {r.returncode}, "
          f"peak RSS {r.maxrss_mb:.0f} MiB")
    assert r.returncode == 1, report
    assert "Traceback" not in r.stderr, report
    for name, path in bad.items():
        said = [ln for ln in mentions(r.stderr, str(path)) if ln.startswith(("error:", "warning:"))]
        assert len(said) == 1, f"{name}: expected one message naming it, got {said}\n{report}"
    for name in ("elf.bin", "image.png"):
        assert re.search(NOT_A_LOG, mentions(r.stderr, str(bad[name]))[0]), report
    landed = {Path(s["path"]).name: s for s in sources_json(store)}
    for name, (path, lines) in good.items():
        assert path.name in landed, f"{name} did not land\n{report}"
        assert landed[path.name]["lines"] == lines, (name, landed[path.name])
    assert r.maxrss_mb < RSS_LIMIT_MB, report


# ------------------------------------------------------------------------------------------------------------
# the same inputs, each checked on its own (one ingest for all the bad ones, one for all the odd good ones)


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, dict[str, Path], Path, Path]:
    d = tmp_path_factory.mktemp("bad")
    _, bad = make_inputs(d, big_mb=1)
    good = d / "good2.log"
    good.write_text(journal_lines(100, "g2"))
    if not can_drop_dac():
        bad.pop("unreadable.log")
    r = run_cli(d / "store", "ingest", str(good), *map(str, bad.values()), drop_dac=True)
    return r, bad, good, d / "store"


BAD_XFAIL: dict[str, str] = {}   # input -> reason, while a bad input gets no clear message


@pytest.mark.parametrize("name", ["elf.bin", "image.png", "truncated.log.gz", "missing.log", "unreadable.log", "fifo",
                                  "emptydir"])
def test_bad_input_gets_one_clear_message(bad_run, name: str, request: pytest.FixtureRequest) -> None:  # noqa: ANN001
    r, bad, _, _ = bad_run
    if name not in bad:
        pytest.skip("cannot drop CAP_DAC_OVERRIDE: a chmod 000 file stays readable to root")
    if name in BAD_XFAIL:
        request.applymarker(pytest.mark.xfail(strict=True, reason=BAD_XFAIL[name]))
    said = mentions(r.stderr, str(bad[name]))
    assert len(said) == 1 and said[0].startswith(("error:", "warning:")), said
    if name in ("elf.bin", "image.png"):
        assert re.search(NOT_A_LOG, said[0]), said[0]
        assert str(bad[name]) not in {e.path for e in Store(bad_run[3]).sources()}, "a binary file landed as a log"


def test_bad_inputs_exit_1_and_the_good_one_lands(bad_run) -> None:  # noqa: ANN001
    r, _, good, store = bad_run
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 1, r.stderr
    landed = {e.path: e for e in Store(store).sources()}
    assert landed[str(good)].lines == 100 and landed[str(good)].records == 100


@pytest.fixture(scope="module")
def odd_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, dict[str, tuple[Path, int | None]], Path]:
    d = tmp_path_factory.mktemp("odd")
    good, _ = make_inputs(d, big_mb=1)
    good.pop("big.log")
    good.pop("stamps.log")   # its own tests below
    args = [str(d / "adir") if name == "adir" else str(p) for name, (p, _) in good.items()]
    return run_cli(d / "store", "ingest", *args), good, d / "store"


def test_odd_inputs_exit_0(odd_run) -> None:  # noqa: ANN001
    r, _, _ = odd_run
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]


@pytest.mark.parametrize("name", ["good.log", "empty.log", "crlf.log", "invalid-utf8.log", "nul.log", "long-line.log",
                                  "adir"])
def test_odd_input_lands_whole(odd_run, name: str) -> None:  # noqa: ANN001
    _, good, store = odd_run
    path, lines = good[name]
    landed = {e.path: e for e in Store(store).sources()}
    src = landed[str(path)]
    assert src.lines == lines
    notes = " ".join(src.notes)
    if name == "crlf.log":
        assert "CRLF" in notes
    if name == "nul.log":
        assert "NUL" in notes
    if name == "invalid-utf8.log":
        assert src.invalid_utf8 == 1 and "UTF-8" in notes
    if name == "good.log":
        assert src.events >= 4   # the OOM kills
    recs = Store(store).records([src.source_id]).collect()
    assert recs.height == src.records
    spans = sorted(zip(recs["line"].to_list(), recs["line_end"].to_list()))
    assert [ln for a, b in spans for ln in range(a, b + 1)] == list(range(1, lines + 1))
    if name == "long-line.log":
        longest = recs["message"].str.len_bytes().max()
        assert longest is not None and longest >= TEN_MB, "the 10 MB line was cut"


def test_truncated_gzip_keeps_the_lines_before_the_cut(tmp_path: Path) -> None:
    data, before = truncated_gz()
    p = tmp_path / "t.log.gz"
    p.write_bytes(data)
    r = run_cli(tmp_path / "store", "ingest", str(p))
    assert r.returncode == 1 and len(mentions(r.stderr, str(p))) == 1, r.stderr
    landed = sources_json(tmp_path / "store")
    assert landed and landed[0]["lines"] >= before - 1, landed
    said = mentions(r.stderr, str(p))[0]
    assert said.startswith("error:") and "lost" in said, said


# found by fuzz/fuzz_ingest.py: a gzip stream whose deflate data is damaged (not cut short)
CORRUPT_GZ = base64.b64decode("H4sIAAAAAAACA7MyMDLVNTDVNTINMTKwMjS3MrTUNjCwMjBQyFBITTaMtVKoyiwoSE3hMhpVOKpwSE3hMhp"
                              "VOKpwVOGowlFU4ajCUYXLCklXCADxtkYSaAYAAA==")


def test_corrupt_gzip_gets_one_clear_message(tmp_path: Path) -> None:
    p = tmp_path / "corrupt.log.gz"
    p.write_bytes(CORRUPT_GZ)
    good = tmp_path / "good.log"
    good.write_text(journal_lines(10, "g"))
    r = run_cli(tmp_path / "store", "ingest", str(p), str(good))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(mentions(r.stderr, str(p))) == 1
    assert [s["path"] for s in sources_json(tmp_path / "store")] == [str(good)]


def test_truncated_big_gzip_names_the_line_where_it_ends(tmp_path: Path) -> None:
    """A head larger than the detection sample: the message names the file and the line where it ends."""
    body = journal_lines(60000, "gzbig").encode()
    cut = gzip.compress(body, mtime=0)[:-20000]
    p = tmp_path / "t.log.gz"
    p.write_bytes(cut)
    r = run_cli(tmp_path / "store", "ingest", str(p))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    said = mentions(r.stderr, str(p))
    assert len(said) == 1 and "line" in said[0], said


# ------------------------------------------------------------------------------------------------------------
# stamps out of range


STAMP_CASES = {
    "1970-and-9999": (b"1970-01-01T00:00:00+00:00 h app[1]: epoch\n9999-12-31T23:59:59+00:00 h app[1]: far\n", None),
    "past-9999-in-utc": (b"9999-12-31T23:59:59-05:00 h app[1]: past year 9999 in UTC\n", None),
    "before-year-1-in-utc": (b"0001-01-01T00:00:00+05:00 h app[1]: before year 1 in UTC\n", None),
    "year-0": (b"0000-01-01T00:00:00+00:00 h app[1]: year zero\n", None),
    "journal-json-past-9999": (b'{"__REALTIME_TIMESTAMP":"253402300800000000","MESSAGE":"x"}\n', None),
    "feb30-iso": (b"2025-02-30T12:00:00+00:00 h app[1]: February 30th\n", None),
    "feb30-beside-dated": (b"2025-05-25T20:00:00+00:00 h app[1]: dated\n"
                           b"Feb 30 12:00:00 h app[1]: no year, no such day\n",
                           None),
}


@pytest.mark.parametrize("case", list(STAMP_CASES))
def test_out_of_range_stamps_land(tmp_path: Path, case: str, request: pytest.FixtureRequest) -> None:
    from forensics.export import write_rows
    from forensics.pipeline import IngestOptions, ingest
    from forensics.query import timeline_frame

    data, bug = STAMP_CASES[case]
    if bug:
        request.applymarker(pytest.mark.xfail(strict=True, reason=bug))
    p = tmp_path / f"{case}.log"
    p.write_bytes(data)
    store = Store(tmp_path / "store")
    rep = ingest(store, [str(p)], IngestOptions())
    assert not rep.failed, rep
    (src,) = store.sources()
    assert src.lines == lines_of(data) and src.records == lines_of(data)
    tl = timeline_frame(store, None, None, None, None, None)
    assert tl.height == lines_of(data)
    for fmt in ("json", "csv"):   # what `timeline --json` / `--format csv` print
        out = io.StringIO()
        write_rows(tl, fmt, out, "records")
    if case == "1970-and-9999":
        assert [t.isoformat() for t in tl["ts"].to_list()] == ["1970-01-01T00:00:00+00:00", "9999-12-31T23:59:59+00:00"]


def test_out_of_range_stamp_is_kept_untimed_with_a_message(tmp_path: Path) -> None:
    p = tmp_path / "far.log"
    p.write_bytes(b"2025-05-25T20:00:00+00:00 h app[1]: dated\n"
                  b"9999-12-31T23:59:59-05:00 h app[1]: past year 9999 in UTC\n")
    r = run_cli(tmp_path / "store", "ingest", str(p))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    (said,) = [ln for ln in mentions(r.stderr, str(p)) if ln.startswith("warning:")]
    assert f"{p}:2:" in said and "1..9999" in said, said
    recs = Store(tmp_path / "store").records().collect().sort("line")
    assert recs["ts_source"].to_list() == ["exact", "none"] and recs["ts"].null_count() == 1
    assert recs["ts_text"][1] == "9999-12-31T23:59:59-05:00" and "1..9999" in recs["ts_anchor"][1]
    (src,) = sources_json(tmp_path / "store")
    assert src["last_ts"] == "2025-05-25T20:00:00.000000Z" and any("1..9999" in n for n in src["notes"])


def test_impossible_dates_have_no_time_source(tmp_path: Path) -> None:
    p = tmp_path / "feb30.log"
    p.write_bytes(b"2025-02-30T12:00:00+00:00 h app[1]: iso\nFeb 30 12:00:00 h app[1]: syslog\n")
    r = run_cli(tmp_path / "store", "ingest", str(p))
    assert r.returncode == 0, r.stderr[-2000:]
    recs = Store(tmp_path / "store").records().collect()
    assert recs.height == 2
    assert recs.filter(pl.col("ts").is_null())["ts_source"].to_list() == ["none", "none"]


# ------------------------------------------------------------------------------------------------------------
# half-written journal exports


def test_blank_lines_in_journal_json_are_kept(tmp_path: Path) -> None:
    p = tmp_path / "j.json"
    p.write_bytes(b'{"__REALTIME_TIMESTAMP":"1748204239000000","MESSAGE":"a"}\n\n'
                  b'{"__REALTIME_TIMESTAMP":"1748204240000000","MESSAGE":"b"}\n')
    assert run_cli(tmp_path / "store", "ingest", str(p)).returncode == 0
    recs = Store(tmp_path / "store").records().collect().sort("line")
    spans = sorted(zip(recs["line"].to_list(), recs["line_end"].to_list()))
    assert [ln for a, b in spans for ln in range(a, b + 1)] == [1, 2, 3]


def test_half_written_journal_json_line_keeps_its_text(tmp_path: Path) -> None:
    p = tmp_path / "j.json"
    p.write_bytes(b'{"__REALTIME_TIMESTAMP":"1748204239000000","MESSAGE":"first"}\n'
                  b'{"__REALTIME_TIMESTAMP":"1748204240000000","MESSAGE":"half-wri')
    assert run_cli(tmp_path / "store", "ingest", str(p)).returncode == 0
    msgs = Store(tmp_path / "store").records().collect().sort("line")["message"].to_list()
    assert msgs[0] == "first"
    assert "half-wri" in msgs[1] and "omitted by journalctl" not in msgs[1]


# ------------------------------------------------------------------------------------------------------------
# memory


def test_big_log_memory_stays_bounded(tmp_path: Path) -> None:
    """FORENSICS_TEST_BIG_MB of log lines (no hole) in one source: peak RSS under FORENSICS_TEST_RSS_MB."""
    p = tmp_path / "big.log"
    lines = write_big(p, BIG_MB << 20, hole=False)
    t0 = time.monotonic()
    r = run_cli(tmp_path / "store", "ingest", str(p))
    print(f"{BIG_MB} MiB, {lines} lines: ingest took {time.monotonic() - t0:.1f} s, peak RSS {r.maxrss_mb:.0f} MiB")
    assert r.returncode == 0, r.stderr[-2000:]
    (src,) = sources_json(tmp_path / "store")
    assert src["lines"] == lines and src["records"] == lines
    assert r.maxrss_mb < RSS_LIMIT_MB, f"{BIG_MB} MiB of log lines took {r.maxrss_mb:.0f} MiB of memory"


def test_nul_hole_memory_stays_bounded(tmp_path: Path) -> None:
    """A NUL hole (a sparse file: what a log copied half-written off a crashed machine ends in) of 1 MiB and of
    max(8, FORENSICS_TEST_BIG_MB / 6) MiB: the larger hole may not cost more than 64 MiB more memory."""
    def holey(name: str, size: int) -> Run:
        p = tmp_path / name
        with open(p, "wb") as fh:
            fh.write(b"2025-05-25T20:00:00+00:00 h app[1]: before the hole\n")
            fh.truncate(size)
            fh.seek(size - 60)
            fh.write(b"\n2025-05-25T20:00:01+00:00 h app[1]: after the hole...........\n")
        r = run_cli(tmp_path / "store", "ingest", str(p), timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        return r

    small = holey("small-hole.log", 1 << 20)
    size = max(8, BIG_MB // 6) << 20
    big = holey("big-hole.log", size)
    grew = big.maxrss_mb - small.maxrss_mb
    assert grew < 64 and big.maxrss_mb < RSS_LIMIT_MB, (
        f"a {size >> 20} MiB NUL hole took {big.maxrss_mb:.0f} MiB, a 1 MiB one {small.maxrss_mb:.0f} MiB")
    landed = {Path(s["path"]).name: s for s in sources_json(tmp_path / "store")}
    assert landed["big-hole.log"]["lines"] == 3 and "NUL" in " ".join(landed["big-hole.log"]["notes"])


@pytest.mark.parametrize("fmt", ["table", "jsonl", "csv", "json"])
def test_a_reader_that_stops_early_ends_the_timeline_quietly(tmp_path: Path, fmt: str) -> None:
    """`forensics timeline | head`: once the reader has closed the pipe, the command stops with exit 1 and no
    traceback, as click ends a command on a broken pipe (polars' own writes report it only in their text)."""
    log = tmp_path / "big.log"
    log.write_text(journal_lines(20_000, "p"))
    store = tmp_path / "s"
    assert subprocess.run(cli(store, "ingest", str(log)), capture_output=True).returncode == 0
    p = subprocess.Popen(cli(store, "timeline", "--format", fmt), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    assert len(p.stdout.read(100)) == 100
    p.stdout.close()   # the output is 2 MB: the writer meets the closed pipe
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 1
    assert "Traceback" not in err and "Broken pipe" not in err, err


def test_polars_io_errors_get_their_number() -> None:
    from forensics.export import _with_errno

    got = _with_errno(OSError("Broken pipe (os error 32)"))
    assert isinstance(got, BrokenPipeError) and got.errno == 32
    other = OSError("something else")
    assert _with_errno(other) is other


@pytest.mark.parametrize("args", [["timeline"], ["sources"], ["sources", "--json"], ["report", "--incident", "2025-05-25"],
                                  ["incidents"], ["events"], ["rescan"]])
def test_a_mistyped_store_is_an_error_not_an_empty_store(tmp_path: Path, args: list[str]) -> None:
    """Every command that reads the store says there is none (exit 2) rather than answer as an empty store would
    (an empty timeline, no sources, no incident), and creates nothing."""
    from click.testing import CliRunner

    from forensics.cli import main

    where = tmp_path / "nowhere"
    r = CliRunner().invoke(main, ["--store", str(where), *args])
    assert r.exit_code == 2, r.output
    assert f"no store at {where}" in r.stderr and r.stdout == ""
    assert not where.exists()
