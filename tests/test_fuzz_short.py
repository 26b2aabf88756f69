"""Fuzzing in `make test`: hypothesis drives the fuzz checks (fuzz/common.py) with log-shaped input, and the
atheris harnesses run for a bounded time (about a minute in all; `make fuzz` runs them longer).

The checks: no exception escapes detection, any parser, the rule engine or the ingest; every input byte is
accounted for (size, line count, each line in exactly one record, stored row counts); a record has a time
exactly when its `ts_source` says so; the vectorised and the general rule paths give the same events; a rule
pack either loads or fails with RulePackError naming the file. Bugs already tracked by a strict xfail test
are listed in fuzz/common.py KNOWN and counted, not failed on.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fuzz"))

import common  # noqa: E402

# seconds per atheris harness in `make test` (three harnesses: about a minute in all); FORENSICS_FUZZ_SECONDS overrides
FUZZ_SECONDS = float(os.environ.get("FORENSICS_FUZZ_SECONDS", "20"))

PIECES = [
    "May 25 20:17:19 h systemd[1]: x.service: Main process exited, code=killed, status=9/KILL",
    "May 25 20:17:18 h kernel: Out of memory: Killed process 48213 (python3) total-vm:1kB, anon-rss:1kB",
    "2025-05-25T20:17:19+00:00 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
    "[ 1234.567890] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
    "[2025-05-25 20:17:19 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "x.py", line 1, in f', "RuntimeError: CUDA error: out of memory",
    "torch.OutOfMemoryError: CUDA out of memory.",
    "", "   ", "\t", "-- Boot 0123456789abcdef0123456789abcdef --",
    "ExecStart=/bin/python -m sglang.launch_server --tp-size 8 --mem-fraction-static 0.90 \\", "  --port 30000",
    "\u25cf x.service - X", "     Active: failed (Result: signal) since Sun 2025-05-25 20:17:19 UTC; 1min ago",
    '{"__REALTIME_TIMESTAMP":"1748204239000000","_HOSTNAME":"h","MESSAGE":[104,105]}', "{", "}",
    '{"__REALTIME_TIMESTAMP":"17482', "\x1e{\"__REALTIME_TIMESTAMP\":\"1748204239000000\",\"MESSAGE\":\"x\"}",
    'data: {"__REALTIME_TIMESTAMP":"1748204239000000","MESSAGE":"sse"}', "[ 8123.456789 <    0.000123 >] h a[1]: delta",
    "[    0.000000                ] h kernel: first", "[    1.000000 <25200.123456*>] h a[1]: across a boot",
    "Sun 2025-05-25 20:17:19.419012 UTC [s=ab12;i=1;b=cd34;m=1f;t=2;x=3]", "    MESSAGE=a verbose field",
    "    _HOSTNAME=h", "            continued under its field", "    MESSAGE=[1.2K blob data]",
    "I0525 20:17:19.123456 1234 x.cc:12] glog line", "INFO:     127.0.0.1:5000 - \"POST /generate HTTP/1.1\" 200 OK",
    "1970-01-01T00:00:00+00:00 h a[1]: epoch", "9999-12-31T23:59:59+00:00 h a[1]: far future",
    "Dec 31 23:59:59 h a[1]: new year's eve", "Jan  1 00:00:01 h a[1]: new year",
    "<script>alert(1)</script>", "[click](http://evil)", "`" * 7, "\u202e\u2066 bidi",
]
SAFE_PIECES = [p for p in PIECES]
line = st.one_of(st.sampled_from(SAFE_PIECES),
                 st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=60))
ending = st.sampled_from(["\n", "\r\n", ""])


@st.composite
def log_bytes(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(line, min_size=0, max_size=25))
    text = "\n".join(lines) + draw(ending)
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.booleans()):   # damage: invalid UTF-8 / NUL bytes / CR at random places
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\x00", b"\r", b"\xc3", b"\xe2\x80"])) + data[at:]
    return data


SETTINGS = settings(max_examples=int(os.environ.get("FORENSICS_FUZZ_EXAMPLES", "15")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(log_bytes())
def test_ingest_accounts_for_every_byte(data: bytes) -> None:
    common.tolerate_known(common.check_ingest)(data)


@SETTINGS
@given(st.integers(0, 255), log_bytes())
def test_every_parser_with_the_batch_cut_anywhere(cut: int, data: bytes) -> None:
    common.tolerate_known(common.check_formats)(bytes([cut]) + data)


@SETTINGS
@given(log_bytes())
def test_rule_engine_vectorised_and_general_paths_agree(data: bytes) -> None:
    common.tolerate_known(common.check_rules)(data)


@pytest.mark.parametrize("data", [
    b"\xff\xfe", "a\nb\n".encode("utf-16-le"), b"\xff\xfea\x00\n\x00b\x00", b"\xfe\xff\x00a\x00\n\x00b",
    "\ufeffMay 25 20:17:19 h systemd[1]: x.service: Main process exited, code=killed, status=9/KILL\r\n".encode("utf-16-le"),
    # found by fuzz_ingest: after its byte order mark, `0a 0a` is U+0A0A, not two line ends
    b"\xff\xfe\xfe\x00\x00\x00\x00\x00\x00\xff\xfe\x00\x00\x00\n\n",
])
def test_utf16_input_has_the_lines_of_its_text(data: bytes) -> None:
    """The harness's oracle counts a UTF-16 file's lines in its decoded text, as ingest reads it."""
    common.check_ingest(data)


@pytest.mark.parametrize("cut", [2, 3])
def test_batch_cut_after_a_backslash_line(cut: int) -> None:
    lines = ["May 25 20:17:19 h systemd[1]: x.service: Main process exited, code=killed, status=9/KILL",
             "ExecStart=/bin/python -m sglang.launch_server --tp-size 8 \\",
             "2025-05-25T20:17:19+00:00 h kernel: NVRM: Xid 79",
             "May 25 20:17:20 h systemd[1]: y.service: Deactivated successfully."]
    common.parse_split(lines, "journal-short", cut)


PACK_HEAD = "pack: fuzz\nrules:\n  - id: fuzz.one\n    kind: oom_kill\n    severity: error\n    role: cause\n"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from([
    "    pattern: 'Killed process (?P<pid>\\d+)'\n", "    pattern: '(a+)+$'\n", "    pattern: '('\n",
    "    engine: regex\n", "    engine: polars\n", "    title: 'x {pid}'\n", "    title: '{nope'\n",
    "    explain: e\n", "    examples: {match: ['Killed process 1'], near_miss: ['nothing']}\n",
    "    casts: {pid: int}\n", "    casts: {pid: nosuchcast}\n", "    applies: {idents: [kernel]}\n",
    "    !!python/object/apply:os.system ['true']\n", "  - id: fuzz.one\n", "    context: [{name: c}]\n",
    "    derive: [{field: f, from: [pid], lookup: nope}]\n", "\t", ": :\n", "&a [*a]\n",
]), max_size=8))
def test_any_pack_loads_or_names_the_file(parts: list[str]) -> None:
    common.tolerate_known(common.check_pack_yaml)((PACK_HEAD + "".join(parts)).encode())


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed (pip install "
                    "atheris; it is in the `test` extra)")
def test_atheris_harnesses_find_nothing_new(tmp_path: Path) -> None:
    """Each harness runs FUZZ_SECONDS; a new finding fails with the input that reproduces it."""
    out = tmp_path / "fuzz.json"
    proc = subprocess.run([sys.executable, str(ROOT / "fuzz" / "run.py"), "--seconds", str(FUZZ_SECONDS),
                           "--work", str(tmp_path / "work"), "--corpus", str(tmp_path / "corpus"), "--json", str(out),
                           "--quick"],
                          capture_output=True, text=True, timeout=FUZZ_SECONDS * 3 * 4 + 300)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert [r["harness"] for r in results] == ["fuzz_ingest", "fuzz_formats", "fuzz_rules"]
    for r in results:
        assert r["execs"] and r["execs"] > 20, r   # it really ran (seeds alone are ~40 inputs)
