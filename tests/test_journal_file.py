"""Binary systemd journal files (`/var/log/journal/<id>/system.journal`), read through journalctl; a directory's
files that are not text left out (a named one stays an error); JSON journal entries quoted as journal lines."""

from __future__ import annotations

import hashlib
import json
import lzma
import shutil
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics import journalfile
from forensics.cli import main
from forensics.render.data import as_short

FIXTURE = Path(__file__).parent / "fixtures" / "journal" / "system.journal.xz"
SAMPLES = Path(__file__).parent.parent / "samples" / "incident"
needs_journalctl = pytest.mark.skipif(shutil.which("journalctl") is None, reason="journalctl (systemd) not installed")


def _journal(tmp: Path, name: str = "system.journal") -> Path:
    p = tmp / name
    p.write_bytes(lzma.decompress(FIXTURE.read_bytes()))
    return p


def _run(tmp: Path, *args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["--store", str(tmp / "store"), *args])
    return r.exit_code, r.output


@needs_journalctl
def test_a_binary_journal_is_read_through_journalctl(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    dmesg = tmp_path / "dmesg.log"
    shutil.copy(SAMPLES / "dmesg.log", dmesg)
    code, out = _run(tmp_path, "ingest", str(j), str(dmesg))
    assert code == 0, out
    assert (f"ingested  {j}: journal-json (100%), 169 records, 0 unparsed, 10 events, 2025-05-25T20:05:01.000000Z .. "
            "2025-05-25T20:17:19.000000Z") in out, out
    code, out = _run(tmp_path, "sources", "--json")
    src = next(s for s in json.loads(out) if s["path"] == str(j))
    assert src["notes"][0].startswith(f"a binary systemd journal file, read through `journalctl --file {j} -o json "
                                      "--all` (systemd ")
    assert src["sha256"] == hashlib.sha256(j.read_bytes()).hexdigest()   # the file's bytes, not journalctl's text
    code, out = _run(tmp_path, "incidents")
    assert "2025-05-25-dflash-train-sglang-k26-eagle3\t" in out and "killed by the kernel OOM killer" in out
    code, out = _run(tmp_path, "report", "--incident", "2025-05-25", "--max-chars", "0")
    assert code == 0, out
    # the OOM report's lines are entries 70-164; quoted as the journal prints them, not as JSON
    assert "| 20:17:18 | `system.journal:70-164` | `sglang-k26-eagle3.service` | OOM killer (global) killed python3" in out
    assert ("- a binary journal file: line N is the N-th entry `journalctl --file system.journal -o json --all` "
            "prints, shown as `journalctl -o short-iso-precise` prints it") in out
    assert (">  70  2025-05-25T20:17:18.000000+0000 dflash-train kernel: python3 invoked oom-killer: "
            "gfp_mask=0x140dca(GFP_HIGHUSER_MOVABLE|__GFP_COMP|__GFP_ZERO), order=0, oom_score_adj=0") in out
    assert '{"' not in out.split("### Cited log lines", 1)[1].split("### Sources", 1)[0]


@needs_journalctl
def test_a_journal_journalctl_cannot_read_is_an_error_naming_it(tmp_path: Path) -> None:
    cut = tmp_path / "cut.journal"
    cut.write_bytes(_journal(tmp_path).read_bytes()[:60000])   # copied off while being written, cut short
    code, out = _run(tmp_path, "ingest", str(cut), str(SAMPLES / "dmesg.log"))
    assert code == 1
    assert f"error: {cut}: cannot read (journalctl could not read all of it (exit 1: " in out, out
    assert f"ingested  {SAMPLES / 'dmesg.log'}: dmesg (100%)" in out   # the other inputs land


def test_without_journalctl_the_error_says_how_to_read_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    j = _journal(tmp_path)
    monkeypatch.setattr(journalfile, "journalctl", lambda: None)
    code, out = _run(tmp_path, "ingest", str(j))
    assert code == 1
    assert (f"error: {j}: a binary systemd journal file, and journalctl (systemd's reader of it) is not installed here; "
            "nothing ingested from it. Install systemd's journalctl, or on a machine with systemd run `journalctl "
            f"--file {j} -o json --all > system.journal.json` and ingest that file") in out, out


def test_a_compressed_journal_says_to_decompress_it(tmp_path: Path) -> None:
    gz = tmp_path / "system.journal.xz"
    shutil.copy(FIXTURE, gz)
    code, out = _run(tmp_path, "ingest", str(gz))
    assert code == 1
    assert (f"error: {gz}: not a text log (a compressed systemd journal file); nothing ingested from it. Decompress it "
            "and ingest the `.journal` file, which forensics reads through journalctl") in out, out


def test_a_directorys_binary_files_are_left_out_and_said(tmp_path: Path) -> None:
    logs = tmp_path / "varlog"
    logs.mkdir()
    shutil.copy(SAMPLES / "dmesg.log", logs / "dmesg")
    # login records: utmp structs (type, pid, line, id, user, host, exit, session, time, address), NUL-padded; the
    # address 10.1.2.5 holds a newline byte; lastlog: one record per uid, mostly zeros
    rec = struct.pack("<hxxi32s4s32s256shhiii16s20s", 7, 61234, b"pts/0", b"ts/0", b"root", b"10.1.2.5", 0, 0, 0,
                      1748204701, 123456, bytes([10, 1, 2, 5]) + bytes(12), bytes(20))
    (logs / "wtmp").write_bytes(rec * 5)
    last = bytearray(292 * 3)
    last[0:4], last[4:9], last[36:44] = struct.pack("<i", 1748204701), b"pts/0", b"10.1.2.5"
    (logs / "lastlog").write_bytes(bytes(last))
    (logs / "tool").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(200))
    code, out = _run(tmp_path, "ingest", str(logs))
    assert code == 0, out
    assert (f"skipped   {logs / 'tool'}: not a text log (an ELF executable); a file that is not text in a directory is "
            "left out") in out
    assert f"skipped   {logs / 'wtmp'}: not a text log (binary data)" in out
    assert f"skipped   {logs / 'lastlog'}: not a text log (binary data)" in out
    assert f"ingested  {logs / 'dmesg'}: dmesg (100%)" in out
    # named itself, it is an error, as before
    code, out = _run(tmp_path, "ingest", str(logs / "tool"))
    assert code == 1 and f"error: {logs / 'tool'}: not a text log (an ELF executable); nothing ingested" in out


def test_json_entries_read_as_journal_lines() -> None:
    line = json.dumps({"__REALTIME_TIMESTAMP": "1748204238123456", "_HOSTNAME": "gpu-1", "SYSLOG_IDENTIFIER": "python3",
                       "_PID": "48213", "MESSAGE": [104, 105, 255]})
    assert as_short(line) == "2025-05-25T20:17:18.123456+0000 gpu-1 python3[48213]: hi\ufffd"
    assert as_short('{"MESSAGE": "no time"}') is None and as_short("not json") is None


def test_unit_file_keys_are_camel_case(tmp_path: Path) -> None:
    # /etc/fstab and /etc/os-release (a sosreport's etc/) are no unit files; a unit file with OOMPolicy= is
    for name, text, fmt in (("fstab", "UUID=6b1f0c3e / ext4 defaults 0 1\n", "text"),
                            ("os-release", 'NAME="Ubuntu"\nVERSION_ID="24.04"\n', "text"),
                            ("x.service", "[Service]\nOOMPolicy=stop\nExecStart=/bin/true\n", "unit-file")):
        p = tmp_path / name
        p.write_text(text)
        code, out = _run(tmp_path, "ingest", str(p))
        assert f"ingested  {p}: {fmt} (" in out, out
