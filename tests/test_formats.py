"""Every format has a sample in samples/formats/, detection picks it, and its parse matches a golden file."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from conftest import ROOT, check_golden
from forensics.detect import detect
from forensics.formats import FORMATS
from forensics.parse import parse_text
from helpers import records

SAMPLES = ROOT / "samples" / "formats"
GOLDEN = ROOT / "tests" / "golden" / "formats"
# sample files that show a variant of a format
VARIANT = {"journal-short-iso-hhmm": "journal-short-iso", "journal-reverse": "journal-short-iso",
           "sglang-ms": "sglang", "grep-execstart": "unit-file", "dmesg-delta": "dmesg", "dmesg-caller": "dmesg",
           "dmesg-ctime-delta": "dmesg-ctime", "container-cri": "container"}
COLUMNS = ("ts", "ts_source", "ts_anchor", "boot_id", "mono", "host", "ident", "pid", "unit", "rank", "level",
           "message", "line", "line_end", "format")


def samples() -> list[Path]:
    return sorted(SAMPLES.glob("*.log"))


def test_every_format_has_a_sample() -> None:
    covered = {VARIANT.get(p.stem, p.stem) for p in samples()}
    assert set(FORMATS) <= covered, f"formats without a sample: {sorted(set(FORMATS) - covered)}"


@pytest.mark.parametrize("path", samples(), ids=lambda p: p.stem)
def test_detection_picks_the_format(path: Path) -> None:
    lines = pl.Series(path.read_text().split("\n"))
    det = detect(lines, str(path))
    assert det.primary == VARIANT.get(path.stem, path.stem), det
    assert det.confidence >= 0.5 or det.primary == "text"


@pytest.mark.parametrize("path", samples(), ids=lambda p: p.stem)
def test_golden_parse(path: Path, update_golden: bool) -> None:
    df = parse_text(path.read_text(), path=f"samples/formats/{path.name}", year=2025).select(COLUMNS)
    rows = []
    for r in df.iter_rows(named=True):
        r["ts"] = None if r["ts"] is None else r["ts"].strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        rows.append(json.dumps(r, sort_keys=True, ensure_ascii=False))
    check_golden(GOLDEN / f"{path.stem}.jsonl", "\n".join(rows) + "\n", update_golden)


def test_a_journal_traceback_is_one_record_of_consecutive_lines() -> None:
    """A traceback logged through the journal (one entry per line) becomes one record; a line no format reads (a
    damaged stamp, found by fuzzing) or another process's line in between ends it, so no record's span holds
    another record."""
    from forensics.parse import parse_text

    head = "2025-05-25T20:29:47+00:00 h python3[7]: "
    lines = [head + "Traceback (most recent call last):", head + '  File "x.py", line 1, in f',
             head + "RuntimeError: one", "2025-05-25T2:209:47+00:00 h python3[7]: damaged stamp",
             head + "RuntimeError: two", "2025-05-25T20:29:47+00:00 h other[8]: Traceback (most recent call last):",
             "2025-05-25T20:29:47+00:00 h other[8]:   File \"y.py\", line 2, in g"]
    recs = parse_text("\n".join(lines) + "\n", path="j.log").sort("line")
    spans = list(zip(recs["line"].to_list(), recs["line_end"].to_list()))
    assert spans == [(1, 3), (4, 4), (5, 5), (6, 7)]
    assert recs["message"][0].count("\n") == 2


@pytest.mark.parametrize("name", ["journal-json-sse", "journal-json-pretty", "journal-json-seq", "journal-json",
                                  "journal-verbose", "journal-export", "dmesg-json", "dmesg-reltime",
                                  "systemctl-show"])
def test_structured_batches_cut_anywhere_give_the_same_records(name: str) -> None:
    """A batch may end anywhere in a structured source (in a pretty object, between a json-sse event and the blank
    line that ends it): the records of all the cuts are those of parsing it whole."""
    from forensics.parse import ParseContext, parse_structured

    text = (SAMPLES / f"{name}.log").read_text().rstrip("\n").split("\n")
    frame = pl.DataFrame({"line": list(range(1, len(text) + 1)), "text": text},
                         schema={"line": pl.Int64, "text": pl.String})
    fmt, ctx = FORMATS[name], ParseContext(path="p")
    cols = ["line", "line_end", "message", "ts", "format", "unit", "ts_anchor"]
    whole, _ = parse_structured(fmt, frame, ctx, final=True)
    assert whole["line_end"].max() == len(text) or name != "journal-json-sse"
    for cut in range(1, frame.height):
        a, carry = parse_structured(fmt, frame.head(cut), ctx, final=False)
        b, _ = parse_structured(fmt, pl.concat([carry, frame.slice(cut)]), ctx, final=True)
        assert pl.concat([a, b]).select(cols).equals(whole.select(cols)), cut


def test_systemctl_show_properties() -> None:
    """`systemctl show` of two units: each property a record of the unit its block's `Id=` names (printed after
    most properties); a `...Timestamp=` at its value, an `ExecStart={...}` at its stop_time (or start_time while it
    runs) with its pid, `Result=` at the unit's InactiveEnterTimestamp (said in ts_anchor); `n/a` is no time."""
    recs = parse_text((SAMPLES / "systemctl-show.log").read_text(), path="show.txt").sort("line")
    assert set(recs["format"].to_list()) == {"systemctl-show", "text"}   # the blank line between the blocks
    by = {m.split("=", 1)[0] + f"@{u}": r for m, u, r in zip(recs["message"], recs["unit"], recs.iter_rows(named=True))
          if "=" in m}
    a, b = "@sglang.service", "@sglang-eagle.service"
    assert by["Type" + a]["unit"] == "sglang.service" and by["MainPID" + b]["unit"] == "sglang-eagle.service"
    assert by["ExecMainExitTimestamp" + a]["ts"].isoformat() == "2025-05-25T20:17:19+00:00"
    assert by["ExecMainExitTimestamp" + a]["ts_source"] == "exact" and by["ExecMainExitTimestamp" + a]["ts_anchor"] is None
    assert by["ExecMainExitTimestamp" + b]["ts"] is None and by["ExecMainExitTimestamp" + b]["ts_source"] == "none"
    assert by["ExecStart" + a]["ts"].isoformat() == "2025-05-25T20:17:19+00:00" and by["ExecStart" + a]["pid"] == 48213
    assert by["ExecStart" + b]["ts"].isoformat() == "2025-05-25T20:19:40+00:00" and by["ExecStart" + b]["pid"] == 51877
    assert by["Result" + a]["ts"].isoformat() == "2025-05-25T20:17:19+00:00"
    assert "InactiveEnterTimestamp=" in by["Result" + a]["ts_anchor"]
    assert by["Result" + b]["ts"] is None and by["MemoryMax" + a]["ts"] is None


def test_systemctl_show_variants() -> None:
    """`-p` output naming no unit takes the unit a file name gives; `--timestamp=unix` and `us` stamps and a zone
    abbreviation are read; a unit file (sections, directives only) is still a unit file."""
    text = ("Result=signal\nInactiveEnterTimestamp=@1748204239\nExecMainExitTimestamp=Sun 2025-05-25 22:17:19.250000 CEST\n"
            "MemoryPeak=68719476736\n")
    recs = parse_text(text, path="/tmp/sglang-k26.service.show").sort("line")
    assert recs["format"].to_list() == ["systemctl-show"] * 4
    assert set(recs["unit"].to_list()) == {"sglang-k26.service"}
    assert [t.isoformat() if t else None for t in recs["ts"]] == [
        "2025-05-25T20:17:19+00:00", "2025-05-25T20:17:19+00:00", "2025-05-25T20:17:19.250000+00:00", None]
    unit = parse_text("[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server\nRestart=always\n", path="x")
    assert set(unit["format"].to_list()) == {"unit-file"}


def test_journal_verbose_entries() -> None:
    """-o verbose without --utc prints the zone's abbreviation (CEST is +02:00); a MESSAGE journalctl did not print
    (`[97B blob data]`) and an entry without one say so; the fields of an entry may come in any order."""
    text = "\n".join([
        "Sun 2025-05-25 22:17:19.419012 CEST [s=ab12;i=1;b=cd34;m=1e240;t=2;x=3]",
        "    MESSAGE=sglang.service: Main process exited, code=killed, status=9/KILL",
        "    _HOSTNAME=gpu-node-1", "    SYSLOG_IDENTIFIER=systemd", "    _PID=1", "    UNIT=sglang.service",
        "Sun 2025-05-25 22:17:20.000001 CEST [s=ab12;i=2;b=cd34;m=1e241;t=3;x=4]",
        "    _HOSTNAME=gpu-node-1", "    MESSAGE=[97B blob data]", "    _COMM=python3",
        "Sun 2025-05-25 22:17:21.000000 CEST [s=ab12;i=3;b=cd34;m=1e242;t=4;x=5]", "    _HOSTNAME=gpu-node-1"])
    recs = parse_text(text + "\n", path="v.log").sort("line")
    assert recs["format"].to_list() == ["journal-verbose"] * 3
    assert recs["ts"][0].isoformat() == "2025-05-25T20:17:19.419012+00:00" and recs["ts_source"][0] == "exact"
    assert recs.select("host", "ident", "pid", "unit").row(0) == ("gpu-node-1", "systemd", 1, "sglang.service")
    assert recs["mono"][0] == 0x1e240 / 1e6 and recs["boot_id"][0] == "cd34"
    assert recs["message"][1].startswith("<MESSAGE [97B blob data] not printed") and recs["ident"][1] == "python3"
    assert recs["message"][2] == "<entry without a MESSAGE field>"
    assert list(zip(recs["line"], recs["line_end"])) == [(1, 6), (7, 10), (11, 12)]


def test_journal_export_entries(tmp_path: Path) -> None:
    """-o export: text fields as `NAME=value`; a binary value (ANSI colours, several lines) as `NAME`, its 64-bit
    length and its bytes, read the same from text and from a file (whose reader turns NUL bytes into U+FFFD); a
    length whose low byte is a newline (a blank line after the name) does not end the entry; an entry without
    MESSAGE says so; a line outside every entry is a `text` record of its own."""
    import struct

    from forensics.formats.journal_export import binary_value
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    def blob(name: str, raw: bytes) -> bytes:
        return name.encode() + b"\n" + struct.pack("<Q", len(raw)) + raw + b"\n"

    head = b"__CURSOR=s=ab;i=%d;b=cd;m=1;t=2;x=3\n__REALTIME_TIMESTAMP=17482042390000%02d\n_BOOT_ID=cd34\n"
    data = (b"$ journalctl -u sglang -o export\n"
            + head % (1, 0) + b"_HOSTNAME=gpu-node-1\nSYSLOG_IDENTIFIER=systemd\n_PID=1\nUNIT=sglang.service\n"
            + b"MESSAGE=sglang.service: Main process exited, code=killed, status=9/KILL\n\n"
            + head % (2, 1) + b"_HOSTNAME=gpu-node-1\n_COMM=python3\n_PID=48213\n"
            + blob("MESSAGE", b"Traceback (most recent call last):\n  File \"x.py\", line 1\n\nRuntimeError: boom")
            + b"PRIORITY=3\n\n"
            + head % (3, 2) + blob("MESSAGE", b"\x1b[2K\rready") + b"_HOSTNAME=gpu-node-1\n\n"
            + head % (4, 3) + b"_HOSTNAME=gpu-node-1\n\n")
    recs = parse_text(data.decode(), path="e.log").sort("line")
    assert recs["format"].to_list() == ["text", "journal-export", "journal-export", "journal-export", "journal-export"]
    assert recs["message"][0] == "$ journalctl -u sglang -o export" and recs["ts"][0] is None
    assert recs.select("host", "ident", "pid", "unit").row(1) == ("gpu-node-1", "systemd", 1, "sglang.service")
    assert recs["ts"][1].isoformat() == "2025-05-25T20:17:19+00:00" and recs["ts_source"][1] == "exact"
    assert recs["message"][2] == 'Traceback (most recent call last):\n  File "x.py", line 1\n\nRuntimeError: boom'
    assert recs["level"][2] == "err" and recs["ident"][2] == "python3"
    assert recs["message"][3] == "\x1b[2K\rready" and recs["host"][3] == "gpu-node-1"
    assert recs["message"][4] == "<entry without a MESSAGE field>"
    assert list(zip(recs["line"], recs["line_end"])) == [(1, 1), (2, 10), (11, 23), (24, 31), (32, 36)]
    # a length of two bytes that read as one UTF-8 character (0xC3 0x85: 34,243 bytes) is still 8 bytes long
    assert binary_value("\u00c5\x00\x00\x00\x00\x00\x00value") == "value"
    assert binary_value("\n" + "\ufffd" * 7 + "ten bytes!") == "ten bytes!"
    # from a file: the NUL bytes of the lengths become U+FFFD, the records are the same
    (tmp_path / "e.log").write_bytes(data)
    store = Store(tmp_path / "st")
    ingest(store, [str(tmp_path / "e.log")], IngestOptions())
    got = pl.read_parquet(store.records_file(store.sources()[0].source_id)).sort("line")
    assert got["message"].to_list() == recs["message"].to_list()
    assert got["format"].to_list() == recs["format"].to_list()


@pytest.mark.parametrize(("fmt", "stamp"), [
    ("journal-short", "May 25 20:17:19"), ("journal-short-precise", "May 25 20:17:19.402310"),
    ("journal-short-iso", "2025-05-25T20:17:19+00:00"), ("journal-short-iso-precise", "2025-05-25T20:17:19.402310+00:00"),
    ("journal-short-full", "Sun 2025-05-25 20:17:19 UTC"), ("journal-short-unix", "1748204239.402310")])
def test_journalctl_no_hostname(fmt: str, stamp: str) -> None:
    """`journalctl --no-hostname` leaves the host out: the first word after the stamp is the identifier (a host
    name holds no `:`, `[` or `]`), not a host named `systemd[1]:` with the message's first word as identifier."""
    text = "\n".join([
        f"{stamp} systemd[1]: sglang.service: Main process exited, code=killed, status=9/KILL",
        f"{stamp} kernel: Out of memory: Killed process 48213 (python3) total-vm:1kB, anon-rss:2kB, file-rss:0kB",
        f"{stamp} python3[48213]: [2025-05-25 20:17:19] INFO: ok",
        f"{stamp} gpu-node-1 systemd[1]: sglang.service: Failed with result 'signal'."]) + "\n"
    assert detect(pl.Series(text.split("\n")), "j.log").primary == fmt
    recs = parse_text(text, path="j.log", year=2025).sort("line")
    assert recs["format"].to_list() == [fmt] * 4
    assert recs.select("host", "ident", "pid").rows() == [(None, "systemd", 1), (None, "kernel", None),
                                                          (None, "python3", 48213), ("gpu-node-1", "systemd", 1)]
    assert recs["message"][0] == "sglang.service: Main process exited, code=killed, status=9/KILL"
    assert recs["message"][1].startswith("Out of memory: Killed process 48213")


def test_journalctl_with_unit_no_hostname() -> None:
    text = ("Sun 2025-05-25 20:17:19 UTC init.scope[1]: sglang.service: Main process exited, code=killed, status=9/KILL\n"
            "Sun 2025-05-25 20:17:19 UTC sglang.service[48213]: [2025-05-25 20:17:19] INFO: ok\n")
    assert detect(pl.Series(text.split("\n")), "j.log").primary == "journal-with-unit"
    recs = parse_text(text, path="j.log").sort("line")
    assert recs.select("host", "unit", "pid").rows() == [(None, "init.scope", 1), (None, "sglang.service", 48213)]
    assert recs["message"][0].startswith("sglang.service: Main process exited")


def test_dmesg_show_delta_and_caller_ids_read_as_plain_dmesg() -> None:
    """`dmesg -d` (`[ 8120.113442 <    0.000008>]`) and a kernel with CONFIG_PRINTK_CALLER (`[ 8120.113442] [  T48291]`)
    give the records of plain `dmesg`: the same seconds since boot and the kernel's message, so the kernel rules
    read them (the caller id and the delta are not part of the message)."""
    def first_lines(name: str) -> list[tuple[float, str]]:
        recs = parse_text((SAMPLES / name).read_text(), path=name).sort("line")
        return [(m, msg.split("\n")[0]) for m, msg in zip(recs["mono"], recs["message"])]

    plain = first_lines("dmesg.log")
    delta, caller = first_lines("dmesg-delta.log"), first_lines("dmesg-caller.log")
    assert delta == caller == plain[:len(delta)] and len(delta) > 40
    assert any(msg.startswith("Memory cgroup out of memory: Killed process 48213") for _, msg in caller)


def test_dmesg_json_records() -> None:
    """dmesg -J -x: facility and level as names, a caller id member, a msg that is a JSON string (escapes, a
    multi-line record); the document's own brackets are part of no record and not counted as text."""
    text = "\n".join([
        "{", '   "dmesg": [', "      {", '         "fac": "kern",', '         "pri": "warn",',
        '         "time":  8120.113442,', '         "caller": "T48291",',
        '         "msg": "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"',
        "      },{", '         "fac": "kern",', '         "pri": "err",', '         "time":  8120.113590,',
        '         "msg": "Memory cgroup stats for /system.slice/sglang.service:\\nanon 64424509440\\n\\u00e9t\\u00e9 \\"x\\""',
        "      }", "   ]", "}"]) + "\n"
    assert detect(pl.Series(text.split("\n")), "d.json").primary == "dmesg-json"
    recs = parse_text(text, path="d.json").sort("line")
    assert recs["format"].to_list() == ["dmesg-json", "dmesg-json"]
    assert recs["mono"].to_list() == [8120.113442, 8120.11359] and set(recs["ts_source"]) == {"monotonic_only"}
    assert recs["level"].to_list() == ["warning", "err"] and set(recs["ident"]) == {"kernel"}
    assert recs["message"][1] == 'Memory cgroup stats for /system.slice/sglang.service:\nanon 64424509440\nété "x"'
    assert list(zip(recs["line"], recs["line_end"])) == [(3, 8), (9, 13)]


def test_dmesg_reltime_times(tmp_path: Path) -> None:
    """dmesg -e / -H: a run's records are its minute plus the deltas since its first record (each delta is since
    the record before), the unprinted seconds taken as :00 and said so next to the inferred year; lines without a
    prefix go on the record before; records before the first minute stamp have no time."""
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    text = "\n".join([
        "[  +0.000100] a record before the first minute stamp",
        "[May25 20:17] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        "[  +0.000123] Memory cgroup stats for /system.slice/sglang.service:",
        "              anon 64424509440",
        "[ +12.500000] NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python3, GPU has fallen off the bus.",
        "[May 26 00:01] EXT4-fs (nvme0n1p2): mounted filesystem",
        "[  +1.000000] next"]) + "\n"
    assert detect(pl.Series(text.split("\n")), "d.log").primary == "dmesg-reltime"
    (tmp_path / "d.log").write_text(text)
    store = Store(tmp_path / "st")
    ingest(store, [str(tmp_path / "d.log")], IngestOptions(year=2025))
    recs = records(store).sort("line")
    assert [None if t is None else t.strftime("%m-%d %H:%M:%S.%f") for t in recs["ts"]] == [
        None, "05-25 20:17:00.000000", "05-25 20:17:00.000123", "05-25 20:17:12.500123", "05-26 00:01:00.000000",
        "05-26 00:01:01.000000"]
    assert recs["ts_source"].to_list() == ["none"] + ["year_inferred"] * 5
    assert recs["message"][2] == "Memory cgroup stats for /system.slice/sglang.service:\n              anon 64424509440"
    assert list(zip(recs["line"], recs["line_end"]))[1:4] == [(2, 2), (3, 4), (5, 5)]
    assert "up to 60 s early" in recs["ts_anchor"][1] and "--year 2025" in recs["ts_anchor"][1]
    assert "up to 60 s early" in store.sources()[0].time_anchor


def test_container_output_keeps_indentation_and_a_traceback_is_one_record() -> None:
    """kubectl/docker logs --timestamps: the message is the line as written (a traceback's indentation kept), and
    the traceback's lines, one per runtime stamp, are one record, so the scheduler's exception is named."""
    recs = parse_text((SAMPLES / "container.log").read_text(), path="c.log").sort("line")
    tb = recs.filter(pl.col("message").str.contains("Scheduler hit an exception"))
    assert tb.height == 1 and (tb["line"][0], tb["line_end"][0]) == (6, 12)   # the empty line after it too
    assert '\n  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py"' in tb["message"][0]
    assert "\ntorch.OutOfMemoryError: CUDA out of memory." in tb["message"][0] and tb["rank"][0] == "TP0"
    cri = parse_text((SAMPLES / "container-cri.log").read_text(), path="c.log").sort("line")
    assert cri["message"][0].startswith("[2025-05-25 20:10:11] server_args=") and set(cri["format"]) == {"container"}
    assert cri.filter(pl.col("message").str.contains("Scheduler hit")).select("line", "line_end").row(0) == (5, 8)


def test_syslog_rfc5424_fields() -> None:
    """RFC 5424: `-` is no value (host, identifier, pid, time), the structured data is not the message, a BOM at the
    message's head is taken off, the level is PRI mod 8, and a kernel line keeps rsyslog's kernel stamp as `mono`."""
    recs = parse_text((SAMPLES / "syslog-rfc5424.log").read_text(), path="r.log").sort("line")
    assert set(recs["format"]) == {"syslog-rfc5424"}
    assert recs.select("host", "ident", "pid", "level").row(2) == ("gpu-node-1", "kernel", None, "err")
    assert recs["message"][2].startswith("Memory cgroup out of memory: Killed process 48213") and recs["mono"][2] == 8123.357798
    assert recs["message"][3] == "sglang.service: A process of this unit has been killed by the OOM killer."
    assert recs["message"][4] == "sglang.service: Main process exited, code=killed, status=9/KILL"
    assert recs["message"][5] == "sglang.service: Failed with result 'oom-kill'."
    assert recs["ts"][5].isoformat() == "2025-05-25T20:17:19.418877+00:00" and recs["ts_source"][5] == "exact"
    assert recs.select("ts", "host", "ident", "message").row(6) == (None, None, "logger", "a line sent with no time and no host")


def test_c10_log_prefix_with_an_unpadded_month() -> None:
    """PyTorch's own c10 logger (its wheels are built without glog) prints the month unpadded: `[E525 ...]` on May
    25, `[E1225 ...]` on December 25; glog pads it (`E0525`). Each is a record of its own with its own time: an
    NCCL watchdog line in an SGLang log was glued to the SGLang record before it, at that record's time."""
    text = ("[2025-05-25 20:17:00 TP0] Load weight begin. avail mem=78.53 GB\n"
            "[rank1]:[E525 20:17:19.061727749 ProcessGroupNCCL.cpp:683] [Rank 1] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=78, OpType=BROADCAST, NumelIn=80, NumelOut=80, "
            "Timeout(ms)=600000) ran for 600096 milliseconds before timing out.\n"
            "[rank7]:[E0525 20:17:20.000000 ProcessGroupNCCL.cpp:1414] glog padded\n"
            "[E1225 23:59:59.000000001 ProcessGroupNCCL.cpp:10] december\n")
    recs = parse_text(text, year=2025)
    assert recs["format"].to_list() == ["sglang", "glog", "glog", "glog"]
    assert [t.strftime("%m-%d %H:%M:%S") for t in recs["ts"]] == ["05-25 20:17:00", "05-25 20:17:19",
                                                                   "05-25 20:17:20", "12-25 23:59:59"]
    assert recs["rank"].to_list()[1:3] == ["1", "7"]


def test_systemctl_show_inside_a_terminal_paste_still_gives_its_events() -> None:
    """A pasted terminal session holding `systemctl show -p Result -p ExecStart` among other output: the properties
    are unit-file lines there (untimed), and the show rules still read how the unit's last run ended."""
    from forensics.rulepacks import load_rules
    from forensics.match import match_records

    text = ("$ systemctl is-active sglang.service\nfailed\n$ systemctl show sglang.service -p Result -p ExecStart\n"
            "Result=oom-kill\nExecStart={ path=/usr/bin/python3 ; argv[]=/usr/bin/python3 -m sglang.launch_server ; "
            "ignore_errors=no ; start_time=[Sun 2025-05-25 20:10:02 UTC] ; stop_time=[Sun 2025-05-25 20:17:19 UTC] ; "
            "pid=48213 ; code=killed ; status=9/KILL }\n"
            "May 25 20:17:19 gpu-node-1 systemd[1]: sglang.service: Failed with result 'oom-kill'.\n")
    recs = parse_text(text, path="session.txt", year=2025)
    assert recs.filter(pl.col("line") == 4)["format"].item() == "unit-file"
    ev = match_records(recs, load_rules(env={})).sort("line", "rule")
    got = [(r["line"], r["kind"], r["rule"]) for r in ev.iter_rows(named=True)]
    assert (4, "service_failed", "systemd.show_result") in got
    assert (5, "service_killed", "systemd.show_exec_killed") in got
    assert ev.filter(pl.col("rule") == "systemd.show_exec_killed")["pid"].item() == 48213


def _vllm_records(tmp_path: Path, monkeypatch, batch: int | None) -> tuple[pl.DataFrame, pl.DataFrame]:  # noqa: ANN001
    import forensics.pipeline as pipeline
    from forensics.store import Store

    if batch is not None:
        monkeypatch.setattr(pipeline, "BATCH_BYTES", batch)
    store = Store(tmp_path / "s")
    pipeline.ingest(store, [str(SAMPLES / "vllm.log")], pipeline.IngestOptions(year=2025))
    return store.records().sort("line").collect(), store.events().sort("line", "rule").collect()


def test_vllm_messages_and_their_tracebacks_are_one_record(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """vLLM repeats its whole prefix on every line of a message: `EngineCore encountered a fatal error.` and the
    traceback under it are one record (its identifier and pid from the process prefix when there is one), while
    lines of one prefix that each start a message (`Route: ...` in a loop) stay records. Cut into batches of any
    size, the file gives the same records and events."""
    recs, ev = _vllm_records(tmp_path / "whole", monkeypatch, None)
    fatal = recs.filter(pl.col("line") == 21).row(0, named=True)
    assert fatal["line_end"] == 27 and fatal["message"].startswith("EngineCore encountered a fatal error.\nTraceback")
    assert fatal["message"].endswith("78.17 GiB memory in use.") and "] " not in fatal["message"]
    assert recs.filter(pl.col("line").is_in([14, 15]))["line_end"].to_list() == [14, 15]
    worker = recs.filter(pl.col("line") == 28).row(0, named=True)
    assert (worker["ident"], worker["pid"]) == ("VllmWorker", 48292)
    assert recs.filter(pl.col("line") == 2)["ident"].item() == "vllm"
    kinds = {(r["line"], r["kind"], r["title"]) for r in ev.iter_rows(named=True)}
    assert (21, "scheduler_exception", "vLLM EngineCore encountered a fatal error: torch.OutOfMemoryError") in kinds
    assert (21, "cuda_oom", "CUDA out of memory: tried to allocate 2.00 GiB (GPU 0: 1.00 GiB free of 79.19 GiB)") in kinds
    assert {k for _, k, _ in kinds} >= {"server_start", "server_config", "server_ready", "python_traceback"}
    cols = ["line", "line_end", "message", "ts", "ident", "pid"]
    for batch in (700, 2000, 2600, 3100):
        r2, e2 = _vllm_records(tmp_path / str(batch), monkeypatch, batch)
        assert r2.select(cols).equals(recs.select(cols)), batch
        assert e2.select("line", "rule", "title").equals(ev.select("line", "rule", "title")), batch


def test_a_paste_mostly_of_systemctl_show_but_with_status_output_is_read_line_by_line() -> None:
    """A terminal session whose lines are mostly `systemctl show` properties but which also holds a `systemctl
    status` block: not read as systemctl-show (whose other lines would be text), so the status block's journal
    lines still give their events."""
    show = (SAMPLES / "systemctl-show.log").read_text().split("\n")[:60]
    status = (SAMPLES / "systemctl-status.log").read_text()
    text = "\n".join(["$ systemctl show sglang.service", *show, "$ systemctl status sglang.service"]) + "\n" + status
    assert detect(pl.Series(text.split("\n"))).primary != "systemctl-show"
    from forensics.match import match_records
    from forensics.rulepacks import load_rules

    ev = match_records(parse_text(text, path="session.txt", year=2025), load_rules(env={}))
    rules = set(ev["rule"].to_list())
    assert {"systemd.unit_oom_killed", "systemd.main_killed", "systemd.show_result", "systemd.show_exec_killed"} <= rules
