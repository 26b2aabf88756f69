"""Inputs: globs, directories, stdin, compression, rotated names, bad bytes, and errors that name the file."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import zstandard

from forensics.pipeline import IngestOptions, ingest
from forensics.sources import expand, rotation_key
from forensics.store import Store
from helpers import records

LINES = "2025-05-25T20:17:19+00:00 h systemd[1]: a\n2025-05-25T20:17:20+00:00 h systemd[1]: b\n"


def test_compressed_inputs_are_read_transparently(tmp_path: Path) -> None:
    (tmp_path / "a.log.gz").write_bytes(gzip.compress(LINES.encode()))
    (tmp_path / "b.log.bz2").write_bytes(bz2.compress(LINES.replace("a\n", "c\n").encode()))
    (tmp_path / "c.log.xz").write_bytes(lzma.compress(LINES.replace("a\n", "d\n").encode()))
    (tmp_path / "d.log.zst").write_bytes(zstandard.ZstdCompressor().compress(LINES.replace("a\n", "e\n").encode()))
    store = Store(tmp_path / "s")
    rep = ingest(store, [str(tmp_path / "*.log.*")], IngestOptions())
    assert not rep.failed
    df = records(store)
    assert df.height == 8 and sorted(set(df["message"])) == ["a", "b", "c", "d", "e"]


def test_directory_is_recursive_and_rotated_logs_sort_oldest_first(tmp_path: Path) -> None:
    d = tmp_path / "logs" / "sub"
    d.mkdir(parents=True)
    for name in ("syslog", "syslog.1", "syslog.2.gz"):
        (d / name).write_text("x")
    srcs, errs = expand([str(tmp_path / "logs")])
    assert not errs
    assert [Path(s.path).name for s in srcs] == ["syslog.2.gz", "syslog.1", "syslog"]
    assert rotation_key("syslog.10.gz") < rotation_key("syslog.9.gz")


def test_a_store_inside_the_directory_ingested_is_left_out_and_said(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "j.log").write_text(LINES)
    Store(tmp_path / "logs" / ".forensics").init()
    Store(tmp_path / "logs" / "sub" / "old-store").init()
    skipped: list[str] = []
    srcs, errs = expand([str(tmp_path / "logs")], skipped)
    assert not errs and [Path(s.path).name for s in srcs] == ["j.log"]
    assert [Path(s.split(":")[0]).name for s in skipped] == [".forensics", "old-store"]
    assert all("a forensics store" in s for s in skipped)
    # named itself, a store is an error that says what to name instead
    srcs, errs = expand([str(tmp_path / "logs" / ".forensics")])
    assert srcs == [] and "a forensics store, not logs" in errs[0] and "name the directory of the logs" in errs[0]


def test_ingest_dot_where_the_default_store_is_reads_the_logs_only(tmp_path: Path) -> None:
    box = tmp_path / "box"   # not tmp_path itself, which holds the tests' cache
    box.mkdir()
    (box / "j.log").write_text(LINES)
    run = [sys.executable, "-m", "forensics.cli", "ingest", "."]
    env = {k: v for k, v in os.environ.items() if k != "FORENSICS_STORE"}   # the default store: ./.forensics
    for status in ("ingested", "unchanged"):   # the second run finds the store the first made, in `.`
        out = subprocess.run(run, cwd=box, capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        assert "skipped   ./.forensics: a forensics store" in out.stderr
        assert f"{status:9} ./j.log" in out.stderr and ".forensics/" not in out.stderr
    assert [e.path for e in Store(box / ".forensics").sources()] == ["./j.log"]


def test_stdin(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "forensics.cli", "--store", str(tmp_path / "s"), "ingest", "-"],
                         input=LINES.encode(), capture_output=True)
    assert out.returncode == 0, out.stderr
    assert "<stdin>" in out.stderr.decode()


def test_invalid_utf8_crlf_and_nul_are_repaired_and_counted(tmp_path: Path) -> None:
    data = b"2025-05-25T20:17:19+00:00 h a[1]: caf\xe9\r\n2025-05-25T20:17:20+00:00 h a[1]: nul\x00here\r\n"
    (tmp_path / "bad.log").write_bytes(data)
    store = Store(tmp_path / "s")
    rep = ingest(store, [str(tmp_path / "bad.log")], IngestOptions())
    e = rep.results[0].entry
    assert e.invalid_utf8 == 1 and e.records == 2
    assert any("CRLF" in n for n in e.notes) and any("NUL" in n for n in e.notes)
    msgs = records(store)["message"].to_list()
    assert msgs == ["caf\ufffd", "nul\ufffdhere"]


def test_errors_name_the_input_and_the_rest_lands(tmp_path: Path) -> None:
    (tmp_path / "good.log").write_text(LINES)
    store = Store(tmp_path / "s")
    rep = ingest(store, [str(tmp_path / "missing.log"), str(tmp_path / "good.log"), str(tmp_path / "nope*.log")],
                 IngestOptions())
    assert rep.failed
    assert any("missing.log: no such file" in e for e in rep.errors)
    assert any("nope*.log: no file matches" in e for e in rep.errors)
    assert records(store).height == 2


def test_truncated_gzip_keeps_what_was_read_and_fails_with_the_line(tmp_path: Path) -> None:
    body = "".join(f"2025-05-25T20:17:{i % 60:02d}+00:00 h a[1]: line {i}\n" for i in range(20000)).encode()
    (tmp_path / "t.log.gz").write_bytes(gzip.compress(body)[:-4000])
    out = subprocess.run([sys.executable, "-m", "forensics.cli", "--store", str(tmp_path / "s"), "ingest",
                          str(tmp_path / "t.log.gz")], capture_output=True, text=True)
    assert out.returncode == 1
    assert "t.log.gz" in out.stderr and "compressed stream ends early" in out.stderr


def test_fifo_is_refused_with_a_fix(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    srcs, errs = expand([str(fifo)])
    assert not srcs and "not a regular file" in errs[0] and "ingest -" in errs[0]


def test_empty_file_is_one_source_with_no_records(tmp_path: Path) -> None:
    (tmp_path / "empty.log").write_text("")
    store = Store(tmp_path / "s")
    rep = ingest(store, [str(tmp_path / "empty.log")], IngestOptions())
    assert not rep.failed and rep.results[0].entry.records == 0


def test_cli_exit_codes(tmp_path: Path) -> None:
    (tmp_path / "good.log").write_text(LINES)
    base = [sys.executable, "-m", "forensics.cli", "--store", str(tmp_path / "s"), "ingest"]
    assert subprocess.run(base + [str(tmp_path / "good.log")], capture_output=True).returncode == 0
    assert subprocess.run(base + [str(tmp_path / "nope.log")], capture_output=True).returncode == 1
    assert subprocess.run(base + ["--tz", "Mars/Olympus", str(tmp_path / "good.log")],
                          capture_output=True).returncode == 2


def test_a_nul_hole_is_one_short_line_with_every_byte_counted(tmp_path: Path) -> None:
    from forensics.sources import HOLE, ReadStats, expand, read_batches

    hole = 40 * HOLE + 123
    p = tmp_path / "holey.log"
    p.write_bytes(b"before\n" + b"\x00" * hole + b"\nafter\n")
    stats = ReadStats()
    frames = list(read_batches(expand([str(p)])[0][0], stats, block=3 * HOLE + 7))   # the hole spans many blocks
    text = pl.concat(frames)["text"].to_list()
    assert len(text) == 3 and text[0] == "before" and text[2] == "after"
    assert stats.nul_bytes == hole and stats.bytes == p.stat().st_size and stats.lines == 3
    assert len(text[1].encode()) < 8 * HOLE and f"<{stats.hole_bytes} NUL bytes>" in text[1]


def test_a_file_in_no_known_format_is_kept_and_said(tmp_path: Path) -> None:
    """A file no format reads lands as untimed text records (nothing lost, exit 0), with a warning naming it and
    its first line and saying what to do; a file in a known format, or one whose format is forced, gets none."""
    from click.testing import CliRunner

    from forensics.cli import main

    (tmp_path / "notes.txt").write_text("\n  the box froze at about 8pm\nrebooted it\n")
    (tmp_path / "j.log").write_text("May 25 20:17:19 gpu1 systemd[1]: a.service: Failed with result 'signal'.\n")
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "st"), "ingest", "--year", "2025",
                                  str(tmp_path / "notes.txt"), str(tmp_path / "j.log")])
    assert r.exit_code == 0, r.output
    warned = [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 1 and "notes.txt: no log format found" in warned[0]
    assert "(line 2: `  the box froze at about 8pm`)" in warned[0] and "--format NAME" in warned[0]
    assert "notes.txt: text (0%), 3 records" in r.stderr   # every line, the blank one too
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "st2"), "ingest", "--format", "text",
                                  str(tmp_path / "notes.txt")])
    assert r.exit_code == 0 and "warning:" not in r.stderr


def test_month_names_in_another_language_are_pointed_out(tmp_path: Path) -> None:
    """journalctl prints the month in the locale's language; such stamps are read by no format, and the warning
    says so and how to export them again (`LC_ALL=C`)."""
    from click.testing import CliRunner

    from forensics.cli import main

    (tmp_path / "j.log").write_text("мая 25 20:17:19 gpu1 systemd[1]: a.service: Failed with result 'signal'.\n"
                                    "мая 25 20:17:20 gpu1 kernel: Out of memory: Killed process 1 (x)\n")
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "st"), "ingest", str(tmp_path / "j.log")])
    assert r.exit_code == 0, r.output
    assert "month in another language (`мая`)" in r.stderr and "LC_ALL=C journalctl" in r.stderr


SEED_JOURNAL = Path(__file__).parent.parent / "samples" / "incident" / "journal-eagle3.log"
SEED_DMESG = Path(__file__).parent.parent / "samples" / "incident" / "dmesg.log"
_SAME = ["line", "ts", "ts_source", "host", "ident", "pid", "message", "format"]


def _ingested(tmp_path: Path, name: str, data: bytes) -> tuple[Store, object]:
    (tmp_path / name).write_bytes(data)
    store = Store(tmp_path / f"s-{name}")
    rep = ingest(store, [str(tmp_path / name)], IngestOptions())
    assert not rep.failed, rep.results
    return store, rep.results[0].entry


def test_sniff_encoding_tells_utf16_from_utf8_and_from_holes() -> None:
    from forensics.sources import sniff_encoding

    text = "May 25 20:17:19 h systemd[1]: x.service: Main process exited, code=killed, status=9/KILL\n"
    assert sniff_encoding(text.encode("utf-16")) == "utf-16-le"           # with its byte order mark
    assert sniff_encoding(text.encode("utf-16-be")[:0] + b"\xfe\xff" + text.encode("utf-16-be")) == "utf-16-be"
    assert sniff_encoding(text.encode("utf-16-le")) == "utf-16-le"        # no mark: a NUL beside every character
    assert sniff_encoding(text.encode("utf-16-be")) == "utf-16-be"
    assert sniff_encoding(text.encode()) is None
    assert sniff_encoding(("\ufeff" + text).encode()) is None              # UTF-8's own mark
    assert sniff_encoding(b"\x00" * 4096) is None                          # a hole of a half-written file
    assert sniff_encoding(b"a\x00b\x00") is None                           # too short to tell
    assert sniff_encoding("\ufeff".encode("utf-32-le") + text.encode("utf-32-le")) is None


def test_a_utf16_journal_lands_as_its_utf8_copy_does(tmp_path: Path) -> None:
    """Windows PowerShell 5 (`ssh host journalctl > x.log`, `Out-File`) writes UTF-16LE with a byte order mark:
    it used to be read as UTF-8 with every other byte a NUL (detected as a journal, every line unparsed, no time,
    no event). It is read through a transcoder: the same records and events as the UTF-8 file, the same line
    numbers, said in the source's notes; its sha256 is the file's own bytes'."""
    import hashlib

    text = SEED_JOURNAL.read_text()
    plain, pe = _ingested(tmp_path, "plain.log", text.encode())
    for name, data in (("le-bom.log", text.encode("utf-16")), ("be.log", text.encode("utf-16-be")),
                       ("le.log.gz", gzip.compress(text.encode("utf-16")))):
        store, e = _ingested(tmp_path, name, data)
        assert e.unparsed == pe.unparsed == 0 and e.records == pe.records and e.events == pe.events > 0
        assert records(store).select(_SAME).equals(records(plain).select(_SAME)), name
        assert any(n.startswith("UTF-16") and "read as UTF-8" in n for n in e.notes), e.notes
        assert e.sha256 == hashlib.sha256(data).hexdigest()


def test_utf16_on_stdin(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "forensics.cli", "--store", str(tmp_path / "s"), "ingest", "-"],
                         input=LINES.encode("utf-16"), capture_output=True)
    assert out.returncode == 0, out.stderr
    assert "journal-short-iso (100%), 2 records, 0 unparsed" in out.stderr.decode(), out.stderr
    assert records(Store(tmp_path / "s"))["message"].to_list() == ["a", "b"]


def test_a_byte_order_mark_does_not_cost_the_first_line(tmp_path: Path) -> None:
    """A UTF-8 byte order mark before journalctl's `-- Logs begin at` banner (or a JSON object) left line 1 to
    no format; it is read as if the mark were not there."""
    text = SEED_JOURNAL.read_text()
    plain, pe = _ingested(tmp_path, "plain.log", text.encode())
    store, e = _ingested(tmp_path, "bom.log", b"\xef\xbb\xbf" + text.encode())
    assert e.unparsed == pe.unparsed == 0
    assert records(store).select(_SAME).equals(records(plain).select(_SAME))
    js = (Path(__file__).parent.parent / "samples" / "formats" / "journal-json.log").read_bytes()
    _, je = _ingested(tmp_path, "j.log", js)
    _, jb = _ingested(tmp_path, "jbom.log", b"\xef\xbb\xbf" + js)
    assert jb.format == "journal-json" and jb.confidence == je.confidence and jb.records == je.records


def _coloured(text: str) -> str:
    """`dmesg --color=always`: the stamp in green, a bold-red error message, a reset."""
    import re

    out = []
    for line in text.splitlines(True):
        m = re.match(r"(\[[ \d.]+\])( .*)", line, re.S)
        out.append(f"\x1b[32m{m.group(1)}\x1b[0m\x1b[1;31m{m.group(2).rstrip(chr(10))}\x1b[0m\n" if m else line)
    return "".join(out)


def test_terminal_colour_codes_are_taken_out_of_line_formats_and_counted(tmp_path: Path) -> None:
    """`dmesg --color=always` (or any capture of a terminal) puts escape sequences around the stamp: the file
    was `text (0%)` with one event. The sequences are taken out before detection and parsing: the same records
    and events as the plain file, and a note counting the lines that held them."""
    text = SEED_DMESG.read_text()
    plain, pe = _ingested(tmp_path, "plain.log", text.encode())
    store, e = _ingested(tmp_path, "colour.log", _coloured(text).encode())
    assert e.format == "dmesg" and e.records == pe.records and e.events == pe.events > 0
    assert records(store).select(_SAME).equals(records(plain).select(_SAME))
    n = sum(1 for line in text.splitlines() if line.startswith("["))
    assert f"{n} line(s) held terminal colour codes (ANSI escape sequences), taken out before parsing" in e.notes
    assert not any("colour" in x for x in pe.notes)


def test_colour_codes_in_explain_and_in_quoted_lines(tmp_path: Path) -> None:
    """`forensics explain` on a line pasted from a coloured terminal matches as the plain line does, and a
    report quotes a coloured file's lines as they were read (no `\\x1b[32m` in the excerpt)."""
    from forensics.ansi import strip_text
    from forensics.explain import explain
    from forensics.parse import parse_text
    from forensics.rulepacks import load_rules

    line = "[44238.512345] Out of memory: Killed process 48213 (python3) total-vm:1kB, anon-rss:1kB, file-rss:0kB"
    coloured = _coloured(line + "\n").rstrip("\n")
    assert coloured != line and strip_text(coloured) == line
    rules = load_rules()
    got = explain(parse_text(coloured), rules)
    want = explain(parse_text(line), rules)
    assert got.matched and [e["rule"] for e in got.records[0].events] == [e["rule"] for e in want.records[0].events]
    assert strip_text("\x1b]0;title\x07\x1b[Kend") == "end"
    assert strip_text("lone \x1b here") == "lone \x1b here"   # not a sequence: kept
    inc = tmp_path / "incident"
    inc.mkdir()
    (inc / "dmesg.log").write_text(_coloured(SEED_DMESG.read_text()))
    (inc / "journal-eagle3.log").write_text(SEED_JOURNAL.read_text())
    store = tmp_path / "s"
    for args in (["ingest", str(inc)], ["report", "--incident", "2025-05-25", "-o", str(tmp_path / "r.md")]):
        out = subprocess.run([sys.executable, "-m", "forensics.cli", "--store", str(store), *args],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
    report = (tmp_path / "r.md").read_text()
    assert "invoked oom-killer" in report and "dmesg.log:" in report
    assert "\x1b" not in report and "\\x1b" not in report and "[32m" not in report


def test_a_structured_formats_values_keep_their_escapes(tmp_path: Path) -> None:
    """journalctl -o export keeps a coloured message as a binary field whose length counts the escape bytes:
    the value is kept as written (the reader needs those bytes), not stripped."""
    import struct

    msg = b"\x1b[31mred alert\x1b[0m"
    data = (b"__REALTIME_TIMESTAMP=1748204239000000\n_HOSTNAME=h\nSYSLOG_IDENTIFIER=app\nMESSAGE\n"
            + struct.pack("<Q", len(msg)) + msg + b"\n\n")
    store, e = _ingested(tmp_path, "x.export", data)
    assert e.format == "journal-export" and not any("colour" in n for n in e.notes)
    assert records(store)["message"].to_list() == [msg.decode()]


def _pods_log(n: int = 400) -> str:
    """`kubectl logs -l app=sglang --all-containers --prefix --timestamps`: without `-f` kubectl prints each pod's
    log in turn; two pods, each crashing with a traceback."""
    tb = ["[2025-05-25 20:17:19 TP0] Scheduler hit an exception: Traceback (most recent call last):",
          '  File "/sgl/scheduler.py", line 2311, in run_scheduler_process',
          "    scheduler.event_loop_overlap()",
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 5.24 GiB."]
    lines = []
    for pod in ("sglang-a-0", "sglang-b-0"):
        for i in range(n):
            lines.append(f"[pod/{pod}/sglang] 2025-05-25T20:{10 + i // 60:02d}:{i % 60:02d}.000000001Z "
                         f"[2025-05-25 20:{10 + i // 60:02d}:{i % 60:02d} TP0] Decode batch. #running-req: {i}")
        lines.extend(f"[pod/{pod}/sglang] 2025-05-25T20:17:19.500000001Z {t}" for t in tb)
    return "\n".join(lines) + "\n"


def test_kubectl_prefix_names_each_pods_records(tmp_path: Path, monkeypatch) -> None:
    """`kubectl logs --prefix` puts `[pod/NAME/CONTAINER] ` before each line: the file was `text`. The prefix is
    taken off before detection and parsing, and the pod is the host of the records (across batch cuts): each
    pod's traceback is one record, each pod's crash its own event, and a note says so."""
    import forensics.pipeline as pipeline

    monkeypatch.setattr(pipeline, "BATCH_BYTES", 8 << 10)  # many batches: pods carried over cuts
    store, e = _ingested(tmp_path, "pods.log", _pods_log().encode())
    assert e.format == "container" and e.unparsed == 0
    assert any("kubectl's `[pod/NAME/CONTAINER]` prefix" in n and n.startswith("808 line(s)") for n in e.notes)
    recs = records(store)
    assert recs["host"].null_count() == 0
    assert (recs.filter(pl.col("line") <= 404)["host"] == "sglang-a-0").all()
    assert (recs.filter(pl.col("line") > 404)["host"] == "sglang-b-0").all()
    tbs = recs.filter(pl.col("message").str.contains("Traceback"))
    assert tbs.height == 2 and tbs["host"].to_list() == ["sglang-a-0", "sglang-b-0"]
    assert all(m.count("\n") == 3 and m.endswith("Tried to allocate 5.24 GiB.") for m in tbs["message"])
    ev = store.events().collect().filter(pl.col("kind") == "scheduler_exception")
    assert sorted(ev["host"]) == ["sglang-a-0", "sglang-b-0"]


def test_kubectl_prefix_of_interleaved_pods(tmp_path: Path, monkeypatch) -> None:
    """With `-f` the pods' lines interleave: each line's record still takes its own pod as host."""
    import forensics.pipeline as pipeline

    monkeypatch.setattr(pipeline, "BATCH_BYTES", 4 << 10)
    a, b = [x for x in _pods_log(300).splitlines() if "Decode" in x][:300], \
        [x for x in _pods_log(300).splitlines() if "Decode" in x][300:]
    store, e = _ingested(tmp_path, "f.log", "".join(f"{x}\n{y}\n" for x, y in zip(a, b)).encode())
    recs = records(store)
    assert recs.height == 600 and e.unparsed == 0
    assert recs.select((pl.col("host") == pl.when(pl.col("line") % 2 == 1).then(pl.lit("sglang-a-0"))
                        .otherwise(pl.lit("sglang-b-0"))).all()).item()


def test_kubectl_prefix_without_timestamps(tmp_path: Path) -> None:
    """Without `--timestamps` the prefix is followed by the process's own line: SGLang's, with its stamp."""
    text = "".join(f"[pod/sglang-a-0/sglang] {x}\n" for x in
                   ("[2025-05-25 20:17:19 TP0] Load weight begin. avail mem=78.53 GB",
                    "[2025-05-25 20:18:02] The server is fired up and ready to roll!"))
    store, e = _ingested(tmp_path, "p.log", text.encode())
    assert e.format == "sglang" and e.unparsed == 0 and e.host == "sglang-a-0"
    ev = store.events().collect()
    assert "server_ready" in ev["kind"].to_list() and set(ev["host"]) == {"sglang-a-0"}
    from forensics.parse import parse_text

    assert parse_text(text)["host"].to_list() == ["sglang-a-0"] * 2


def test_an_archive_is_refused_with_how_to_read_its_logs(tmp_path: Path) -> None:
    """A sosreport's `.tar.xz` (or any tar, zip) was read as one text glued from its members and its headers:
    one `journal-short` source citing lines of the archive. It is refused, naming the file and how to extract it;
    the other inputs land, the exit is 1. A text holding `ustar` where a tar header has it is still a text."""
    import io
    import tarfile
    import zipfile

    def tar_bytes() -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            data = SEED_JOURNAL.read_bytes()
            info = tarfile.TarInfo("var/log/journal.txt")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    (tmp_path / "sos.tar.xz").write_bytes(lzma.compress(tar_bytes()))
    (tmp_path / "plain.tar").write_bytes(tar_bytes())
    with zipfile.ZipFile(tmp_path / "logs.zip", "w") as zf:
        zf.writestr("journal.txt", SEED_JOURNAL.read_text())
    odd = "x" * 257 + "ustar  and then some text\n"
    (tmp_path / "odd.log").write_text(odd * 3)
    (tmp_path / "ok.log").write_text(LINES)
    store = Store(tmp_path / "s")
    rep = ingest(store, [str(tmp_path / n) for n in ("sos.tar.xz", "plain.tar", "logs.zip", "odd.log", "ok.log")],
                 IngestOptions())
    by = {Path(r.path).name: r for r in rep.results}
    for name, fix in (("sos.tar.xz", "tar xf"), ("plain.tar", "tar xf"), ("logs.zip", "unzip")):
        assert by[name].status == "failed", name
        err = by[name].error or ""
        assert f"{name}: not a text log (a " in err and "archive); nothing ingested" in err
        assert f"(`{fix} {tmp_path / name}`)" in err and "`forensics ingest DIR`" in err
    assert by["odd.log"].status == "ingested" and by["ok.log"].status == "ingested" and rep.failed


def test_a_line_longer_than_the_limit_is_cut_and_said_wherever_the_reads_end(tmp_path: Path) -> None:
    """A line over MAX_LINE bytes keeps its first MAX_LINE (at a character's start) and the lines after it keep
    their numbers, whether its newline comes in the bytes read with it or many reads later (then the rest of it
    is skipped as it is read, never held): the same records and counts for any read size. A file of one 300 MB
    line held all of it, copied again at every read (24 s, 4.1 GB); a 10 MB line lands whole (test_hostile)."""
    from forensics.sources import MAX_LINE, ReadStats, expand, read_batches

    long_a = "é" * (MAX_LINE // 2 + 5)            # 2-byte characters: the cut may not split one
    long_b = "x" * (3 * MAX_LINE + 17)
    p = tmp_path / "long.log"
    p.write_text(f"first\n{long_a}\nmiddle\n{long_b}\nlast\n{long_b}")   # the last one has no newline
    want = None
    for block in (MAX_LINE // 3 + 1, MAX_LINE + 5, 16 * MAX_LINE):
        stats = ReadStats()
        df = pl.concat(list(read_batches(expand([str(p)])[0][0], stats, block=block)))
        got = (df["line"].to_list(), df["text"].to_list(), stats.long_lines, stats.long_first, stats.long_bytes,
               stats.lines)
        assert got[0] == [1, 2, 3, 4, 5, 6], block
        assert got[1][0] == "first" and got[1][2] == "middle" and got[1][4] == "last"
        assert got[1][1] == "é" * (MAX_LINE // 2) and got[1][3] == got[1][5] == "x" * MAX_LINE
        assert got[2:5] == (3, 2, (len(long_a.encode()) - MAX_LINE) + 2 * (len(long_b) - MAX_LINE)), block
        want = want or got
        assert got == want
        assert stats.bytes == p.stat().st_size


def test_a_cut_line_is_a_warning_of_the_ingest(tmp_path: Path) -> None:
    from forensics.sources import MAX_LINE

    p = tmp_path / "kern.log"
    p.write_text("May 25 20:17:01 gpu-a01 kernel: " + "A" * (2 * MAX_LINE) + "\n"
                 "May 25 20:17:02 gpu-a01 kernel: Out of memory: Killed process 4242 (python3) total-vm:1000kB, "
                 "anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0\n")
    store = Store(tmp_path / "s")
    res = ingest(store, [str(p)], IngestOptions())
    assert not res.failed
    (entry,) = store.sources()
    assert entry.records == 2
    assert any(n.startswith("line 1: 1 line(s) longer than 16 MiB") for n in entry.notes), entry.notes
    warnings = [w for r in res.results for w in r.warnings]
    assert any(w.startswith(f"{p}:1: 1 line(s) longer than 16 MiB") for w in warnings), warnings
