"""Time normalisation: year inference, rollover, Feb 29, offsets, zone names, --tz, reverse order, dmesg."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

from forensics.parse import parse_text
from helpers import ingest_text, iso, records


def test_dec_jan_rollover_moves_earlier_lines_to_previous_year(tmp_path: Path) -> None:
    text = ("Dec 31 23:59:58 h cron[1]: a\nDec 31 23:59:59 h cron[1]: b\n"
            "Jan  1 00:00:01 h cron[1]: c\nJan  1 00:00:02 h cron[1]: d\n")
    store, rep = ingest_text(tmp_path, "j.log", text, year=2026)
    assert iso(records(store)) == ["2025-12-31T23:59:58.000000", "2025-12-31T23:59:59.000000",
                                   "2026-01-01T00:00:01.000000", "2026-01-01T00:00:02.000000"]
    assert set(records(store)["ts_source"]) == {"year_inferred"}
    assert "--year 2026" in records(store)["ts_anchor"][0]


def test_rollover_from_mtime_anchor(tmp_path: Path) -> None:
    text = "Dec 31 23:59:59 h cron[1]: a\nJan  1 00:00:01 h cron[1]: b\n"
    path = tmp_path / "j.log"
    path.write_text(text)
    jan5 = 1767571200  # 2026-01-05T00:00:00Z
    os.utime(path, (jan5, jan5))
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    store = Store(tmp_path / "s")
    ingest(store, [str(path)], IngestOptions())
    df = records(store)
    assert iso(df) == ["2025-12-31T23:59:59.000000", "2026-01-01T00:00:01.000000"]
    assert "modification time" in df["ts_anchor"][0]


def test_feb_29_in_a_leap_year(tmp_path: Path) -> None:
    store, _ = ingest_text(tmp_path, "j.log", "Feb 29 12:00:00 h k[1]: leap\n", year=2024)
    assert iso(records(store)) == ["2024-02-29T12:00:00.000000"]


def test_feb_29_in_a_common_year_keeps_the_record_without_time(tmp_path: Path) -> None:
    store, _ = ingest_text(tmp_path, "j.log", "Feb 29 12:00:00 h k[1]: impossible\n", year=2025)
    df = records(store)
    assert df.height == 1 and df["ts"][0] is None and df["message"][0] == "impossible"


def test_a_provisional_stamp_takes_its_year_as_the_calendar_says() -> None:
    """`_final_ts` moves provisional-year (2000) stamps to their year by arithmetic: the same instant as Python's
    calendar gives for every day of the provisional year, in common, leap and century years (a leap day in a
    common year has no time); and the days to 1 January are `pl.date`'s for every year 1-9999."""
    from forensics.timefix import INFERRED, _final_ts, _jan1

    days = [datetime(2000, 1, 1) + timedelta(days=d, hours=d % 24, microseconds=d) for d in range(366)]
    years = [1, 1600, 1900, 1970, 1999, 2000, 2023, 2024, 2025, 2100, 2400, 9999]
    frame = pl.DataFrame({"ts": [d for _ in years for d in days], "y": [y for y in years for _ in days],
                          "ts_source": INFERRED}).with_columns(pl.col("ts").dt.replace_time_zone("UTC"))
    got = frame.select(_final_ts(pl.col("y"), "UTC").alias("ts"))["ts"].to_list()
    want = []
    for y in years:
        for d in days:
            try:
                want.append(d.replace(year=y, tzinfo=timezone.utc))
            except ValueError:   # 29 February of a common year
                want.append(None)
    assert sum(w is None for w in want) == 8   # the common years
    assert [(w, g) for w, g in zip(want, got) if w != g] == []
    ys = pl.DataFrame({"y": range(1, 10000)}, schema={"y": pl.Int64})
    jan1 = ys.select(_jan1(pl.col("y")).alias("a"), pl.date(pl.col("y"), 1, 1).cast(pl.Int64).alias("b"))
    assert jan1.filter(pl.col("a") != pl.col("b")).height == 0 and jan1.height == 9999


def test_iso_offsets_with_and_without_colon_are_the_same_instant() -> None:
    a = parse_text("2025-05-25T22:17:19+02:00 h systemd[1]: x")
    b = parse_text("2025-05-25T22:17:19+0200 h systemd[1]: x")
    assert iso(a) == iso(b) == ["2025-05-25T20:17:19.000000"]
    assert a["ts_source"][0] == "exact"


def test_zone_names_in_short_full() -> None:
    df = parse_text("Sun 2025-05-25 22:17:19 CEST h systemd[1]: x\nSun 2025-05-25 20:17:19 UTC h systemd[1]: y")
    assert iso(df) == ["2025-05-25T20:17:19.000000", "2025-05-25T20:17:19.000000"]
    assert df["ts_source"].to_list() == ["exact", "exact"]


def test_tz_option_for_zoneless_stamps() -> None:
    df = parse_text("[2025-05-25 22:17:19 TP0] Load weight begin. avail mem=78.53 GB", tz="Europe/Berlin")
    assert iso(df) == ["2025-05-25T20:17:19.000000"]
    assert df["ts_source"][0] == "zone_assumed"


def test_unknown_zone_abbreviation_falls_back_to_tz_and_says_so() -> None:
    df = parse_text("Sun 2025-05-25 20:17:19 XYZT h systemd[1]: x")
    assert df["ts_source"][0] == "zone_assumed"


def test_reverse_journal_is_detected(tmp_path: Path) -> None:
    text = ("2025-05-25T20:17:21+00:00 h a[1]: c\n2025-05-25T20:17:20+00:00 h a[1]: b\n"
            "2025-05-25T20:17:19+00:00 h a[1]: a\n")
    store, rep = ingest_text(tmp_path, "r.log", text)
    assert rep.results[0].entry.reversed
    from forensics.query import timeline_frame

    assert timeline_frame(store)["message"].to_list() == ["a", "b", "c"]


def test_reverse_journal_rollover_with_year(tmp_path: Path) -> None:
    text = "Jan  1 00:00:01 h cron[1]: b\nDec 31 23:59:59 h cron[1]: a\nDec 31 23:59:58 h cron[1]: z\n"
    store, _ = ingest_text(tmp_path, "j.log", text, year=2026)
    assert iso(records(store)) == ["2026-01-01T00:00:01.000000", "2025-12-31T23:59:59.000000",
                                   "2025-12-31T23:59:58.000000"]


def test_year_from_sglang_stamps_inside_journal_lines(tmp_path: Path) -> None:
    text = "May 25 20:17:19 h python3[7]: [2023-05-25 20:17:19 TP0] Decode batch. #running-req: 1\n"
    store, _ = ingest_text(tmp_path, "j.log", text)
    df = records(store)
    assert iso(df) == ["2023-05-25T20:17:19.000000"] and df["rank"][0] == "TP0"


def test_year_from_systemctl_status_active_since(tmp_path: Path) -> None:
    text = ("\u00d7 x.service - X\n     Active: failed (Result: signal) since Sun 2023-05-21 20:17:19 UTC; 1min ago\n"
            "\nMay 21 20:17:19 h systemd[1]: x.service: Main process exited, code=killed, status=9/KILL\n")
    store, _ = ingest_text(tmp_path, "status.txt", text)
    df = records(store).filter(pl.col("message").str.contains("Main process"))
    assert iso(df) == ["2023-05-21T20:17:19.000000"]


def test_year_from_another_source_of_the_same_host(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text("2022-03-04T05:06:07+00:00 box sshd[1]: hello\n")
    (tmp_path / "b.log").write_text("Mar 04 06:00:00 box sshd[1]: later\n")
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    store = Store(tmp_path / "s")
    ingest(store, [str(tmp_path / "b.log"), str(tmp_path / "a.log")], IngestOptions())
    df = records(store).filter(pl.col("message") == "later")
    assert iso(df) == ["2022-03-04T06:00:00.000000"]
    assert "for host box" in df["ts_anchor"][0]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_larger_year_less_source_still_waits_for_the_dated_one(tmp_path: Path, workers: int,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Sources run largest first: the year-less one starts before the dated one and, at its end, takes the year
    from it (running it itself when no other worker has); a second year-less source never anchors the first."""
    import forensics.pipeline as pipeline
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    monkeypatch.setattr(pipeline, "WORKERS", workers)
    (tmp_path / "a.log").write_text("2022-03-04T05:06:07+00:00 box sshd[1]: hello\n")
    (tmp_path / "b.log").write_text("".join(f"Mar 04 06:00:{i % 60:02d} box sshd[1]: line {i}\n" for i in range(5000)))
    (tmp_path / "c.log").write_text("Mar 04 07:00:00 other sshd[1]: there\nx\n" * 3000)
    store = Store(tmp_path / "s")
    rep = ingest(store, [str(tmp_path / p) for p in ("c.log", "b.log", "a.log")], IngestOptions())
    assert [r.path for r in rep.results] == [str(tmp_path / p) for p in ("a.log", "c.log", "b.log")]
    df = records(store).filter(pl.col("message") == "line 4999")
    assert iso(df) == ["2022-03-04T06:00:19.000000"] and "for host box" in df["ts_anchor"][0]
    other = records(store).filter(pl.col("message") == "there")
    assert "for host" not in other["ts_anchor"][0]


_DEC_2026 = 1796083200  # 2026-12-01T00:00:00Z: logs copied off the box long after the incident


def _kernel_journal(path: Path, n: int = 4000) -> Path:
    """A journal of kernel lines only (`journalctl -k`, short): nothing in it says the year; its mtime is late."""
    path.write_text("".join(f"May 25 20:{i // 60 % 60:02d}:{i % 60:02d} box kernel: tick {i}\n" for i in range(n)))
    os.utime(path, (_DEC_2026, _DEC_2026))
    return path


def _sglang_journal(path: Path) -> Path:
    """A unit's journal (short): its python3 lines carry SGLang's own dated stamps, so it dates itself (2025)."""
    path.write_text("May 25 20:10:00 box systemd[1]: Started sglang.service - SGLang.\n"
                    "May 25 20:10:01 box python3[7]: [2025-05-25 20:10:01] server_args=ServerArgs(port=30000)\n"
                    "May 25 20:16:00 box python3[7]: [2025-05-25 20:16:00] The server is fired up and ready to roll!\n")
    os.utime(path, (_DEC_2026, _DEC_2026))
    return path


def _entry(store, name: str):  # noqa: ANN001, ANN202
    (e,) = [x for x in store.sources() if x.path.endswith(name)]
    return e


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("order", [("k.log", "s.log"), ("s.log", "k.log")])
def test_a_year_less_source_takes_the_year_a_sibling_found_in_its_own_lines(
        tmp_path: Path, workers: int, order: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed's case with no ISO journal: a `journalctl -k` copy, whose only year would be its modification
    time (a year and a half late), and the unit's journal, dated by SGLang's stamps inside it. The kernel lines
    take the year the unit's journal found in its own lines, whichever starts or ends first, and say so."""
    import forensics.pipeline as pipeline
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    monkeypatch.setattr(pipeline, "WORKERS", workers)
    _kernel_journal(tmp_path / "k.log")           # the larger: it starts first, and waits at its end
    _sglang_journal(tmp_path / "s.log")
    store = Store(tmp_path / "st")
    ingest(store, [str(tmp_path / n) for n in order], IngestOptions())
    k, sg = _entry(store, "k.log"), _entry(store, "s.log")
    assert sg.year_from == "file" and k.year_from == "host"
    assert k.first_ts.startswith("2025-05-25T20:00:00") and k.last_ts.startswith("2025-05-25")
    assert f"the year inferred for {tmp_path / 's.log'} from the SGLang stamps" in k.time_anchor
    assert "for host box" in k.time_anchor
    ts = records(store).filter(pl.col("path").str.ends_with("k.log"))
    assert ts["ts"].dt.year().unique().to_list() == [2025] and set(ts["ts_source"]) == {"year_inferred"}
    assert "the year inferred for" in ts["ts_anchor"][0]


def test_the_year_of_a_sibling_in_the_store_anchors_a_later_run(tmp_path: Path) -> None:
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    store = Store(tmp_path / "st")
    ingest(store, [str(_sglang_journal(tmp_path / "s.log"))], IngestOptions())
    ingest(store, [str(_kernel_journal(tmp_path / "k.log"))], IngestOptions())
    k = _entry(store, "k.log")
    assert k.year_from == "host" and k.first_ts.startswith("2025-05-25") and "the year inferred for" in k.time_anchor


def test_full_dates_anchor_before_a_siblings_inferred_year(tmp_path: Path) -> None:
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    (tmp_path / "d.log").write_text("2024-05-25T20:00:00+00:00 box sshd[1]: dated\n")
    store = Store(tmp_path / "st")
    ingest(store, [str(_kernel_journal(tmp_path / "k.log")), str(_sglang_journal(tmp_path / "s.log")),
                   str(tmp_path / "d.log")], IngestOptions())
    k = _entry(store, "k.log")
    assert k.first_ts.startswith("2024-05-25") and f"the dates in {tmp_path / 'd.log'}" in k.time_anchor


@pytest.mark.parametrize("workers", [1, 2])
def test_year_less_sources_without_a_year_of_their_own_do_not_anchor_each_other(
        tmp_path: Path, workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two copies with no year in them, of different ages: each keeps its own modification time's year (one
    taken from a file's age is no better than another's), and both wait together, never on each other."""
    import forensics.pipeline as pipeline
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    monkeypatch.setattr(pipeline, "WORKERS", workers)
    a, b = _kernel_journal(tmp_path / "a.log", 3000), _kernel_journal(tmp_path / "b.log", 2000)
    june_2023 = 1686009600  # 2023-06-06
    os.utime(a, (june_2023, june_2023))
    store = Store(tmp_path / "st")
    ingest(store, [str(a), str(b)], IngestOptions())
    ea, eb = _entry(store, "a.log"), _entry(store, "b.log")
    assert (ea.year_from, eb.year_from) == ("mtime", "mtime")
    assert ea.first_ts.startswith("2023-05-25") and eb.first_ts.startswith("2026-05-25")


def test_unanchored_dmesg_is_marked_monotonic_only(tmp_path: Path) -> None:
    store, rep = ingest_text(tmp_path, "dmesg.txt", "[    0.000000] Linux version 6.8.0\n[   12.500000] hello\n")
    df = records(store)
    assert df["ts_source"].to_list() == ["monotonic_only"] * 2
    assert df["ts"].null_count() == 2 and df["mono"].to_list() == [0.0, 12.5]


def test_boot_time_option_anchors_dmesg(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    store, _ = ingest_text(tmp_path, "dmesg.txt", "[   12.500000] hello\n",
                           boot_time=datetime(2025, 5, 25, 8, 0, tzinfo=timezone.utc))
    df = records(store)
    assert iso(df) == ["2025-05-25T08:00:12.500000"] and df["ts_source"][0] == "boot_anchored"


def test_dmesg_anchored_by_the_boot_time_systemctl_show_prints(tmp_path: Path) -> None:
    """A raw dmesg of one boot and `systemctl show -p KernelTimestamp` copied with it (no journal to pair with):
    the dmesg is anchored at that boot time, and says so; in either order of ingest. Two `systemctl show` outputs
    naming two boot times anchor nothing (which boot the dmesg is of is not known)."""
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    (tmp_path / "dmesg.txt").write_text("[    0.000000] Linux version 6.8.0\n[ 8123.356789] hello\n")
    (tmp_path / "boot.txt").write_text("KernelTimestamp=Sun 2025-05-25 18:02:05 UTC\nKernelTimestampMonotonic=0\n")
    for order in (["dmesg.txt", "boot.txt"], ["boot.txt", "dmesg.txt"]):
        store = Store(tmp_path / f"s-{order[0]}")
        for name in order:   # one ingest each: the anchor is found whichever came first
            ingest(store, [str(tmp_path / name)], IngestOptions())
        df = records(store).filter(pl.col("path").str.ends_with("dmesg.txt"))
        assert iso(df) == ["2025-05-25T18:02:05.000000", "2025-05-25T20:17:28.356789"], order
        assert set(df["ts_source"]) == {"boot_anchored"} and "KernelTimestamp=" in df["ts_anchor"][0]
    (tmp_path / "boot2.txt").write_text("KernelTimestamp=Mon 2025-05-26 07:00:00 UTC\n")
    store = Store(tmp_path / "two")
    ingest(store, [str(tmp_path / n) for n in ("dmesg.txt", "boot.txt", "boot2.txt")], IngestOptions())
    df = records(store).filter(pl.col("path").str.ends_with("dmesg.txt"))
    assert set(df["ts_source"]) == {"monotonic_only"}


def test_dmesg_anchored_by_pairing_with_the_journal(tmp_path: Path) -> None:
    msgs = [(100.25, "NVRM: loading NVIDIA UNIX Open Kernel Module  575.57.08"), (2000.5, "EXT4-fs (nvme0n1p2): mounted"),
            (44238.512345, "Out of memory: Killed process 48213 (python3) total-vm:1kB, anon-rss:1kB")]
    boot = 1748160000  # 2025-05-25T08:00:00Z
    dmesg = "".join(f"[{m:12.6f}] {t}\n" for m, t in msgs)
    from datetime import datetime, timezone

    journal = "".join(
        datetime.fromtimestamp(int(boot + m), timezone.utc).strftime("%b %d %H:%M:%S") + f" gpu1 kernel: {t}\n"
        for m, t in msgs)
    (tmp_path / "dmesg.txt").write_text(dmesg)
    (tmp_path / "journal.txt").write_text(journal)
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    store = Store(tmp_path / "s")
    rep = ingest(store, [str(tmp_path / "dmesg.txt"), str(tmp_path / "journal.txt")], IngestOptions(year=2025))
    assert len(rep.anchors) == 1
    assert abs(rep.anchors[0].boot_time.timestamp() - boot) <= 1.0
    d = records(store).filter(pl.col("path").str.ends_with("dmesg.txt"))
    assert set(d["ts_source"]) == {"boot_anchored"} and set(d["host"]) == {"gpu1"}
    assert abs(d["ts"][2].timestamp() - (boot + 44238.512345)) <= 1.0


@pytest.mark.parametrize("host, anchored", [("gpu1", True), ("gpu2", False)])
def test_a_dmesg_of_a_named_host_pairs_only_with_that_hosts_journal(tmp_path: Path, host: str,
                                                                    anchored: bool) -> None:
    """`ingest --host gpu2 dmesg.txt` says whose kernel it is: the same kernel lines in gpu1's journal (the
    same driver load, the same mount on a fleet of one image) do not give gpu2's boot time."""
    msgs = [(100.25, "NVRM: loading NVIDIA UNIX Open Kernel Module  575.57.08"), (2000.5, "EXT4-fs (nvme0n1p2): mounted"),
            (44238.512345, "Out of memory: Killed process 48213 (python3) total-vm:1kB, anon-rss:1kB")]
    boot = 1748160000  # 2025-05-25T08:00:00Z
    from datetime import datetime, timezone

    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    (tmp_path / "dmesg.txt").write_text("".join(f"[{m:12.6f}] {t}\n" for m, t in msgs))
    (tmp_path / "journal.txt").write_text("".join(
        datetime.fromtimestamp(int(boot + m), timezone.utc).strftime("%b %d %H:%M:%S") + f" gpu1 kernel: {t}\n"
        for m, t in msgs))
    store = Store(tmp_path / "s")
    ingest(store, [str(tmp_path / "journal.txt")], IngestOptions(year=2025))
    rep = ingest(store, [str(tmp_path / "dmesg.txt")], IngestOptions(host=host))
    d = records(store).filter(pl.col("path").str.ends_with("dmesg.txt"))
    assert set(d["host"]) == {host}
    if anchored:
        assert len(rep.anchors) == 1 and abs(rep.anchors[0].boot_time.timestamp() - boot) <= 1.0
        assert set(d["ts_source"]) == {"boot_anchored"}
    else:
        assert rep.anchors == [] and set(d["ts_source"]) == {"monotonic_only"}


def test_kern_log_kernel_stamps_are_read_and_anchor_dmesg(tmp_path: Path) -> None:
    """/var/log/kern.log as rsyslog writes it keeps the kernel's own stamp in the message (`kernel: [ 8123.356789]
    NVRM: ...`): the stamp is the record's `mono`, the message is the kernel's, so the kernel rules match it (a
    GPU off the bus, the OOM kill) and a raw dmesg of the same boot is anchored by pairing with it."""
    from datetime import datetime, timezone

    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    boot = 1748160000  # 2025-05-25T08:00:00Z
    msgs = [(100.25, "NVRM: loading NVIDIA UNIX Open Kernel Module  575.57.08"), (2000.5, "EXT4-fs (nvme0n1p2): mounted"),
            (44238.512345, "Out of memory: Killed process 48213 (python3) total-vm:1000kB, anon-rss:900kB, "
                           "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:8kB oom_score_adj:0"),
            (44240.000001, "NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python3, GPU has fallen off the bus.")]
    stamp = lambda m: datetime.fromtimestamp(int(boot + m), timezone.utc).strftime("%b %d %H:%M:%S")  # noqa: E731
    (tmp_path / "kern.log").write_text("".join(f"{stamp(m)} gpu1 kernel: [{m:12.6f}] {t}\n" for m, t in msgs))
    (tmp_path / "dmesg.txt").write_text("".join(f"[{m:12.6f}] {t}\n" for m, t in msgs))
    store = Store(tmp_path / "s")
    rep = ingest(store, [str(tmp_path / "dmesg.txt"), str(tmp_path / "kern.log")], IngestOptions(year=2025))
    k = records(store).filter(pl.col("path").str.ends_with("kern.log")).sort("line")
    assert k["message"].to_list() == [t for _, t in msgs] and k["mono"].to_list() == [m for m, _ in msgs]
    kinds = set(pl.read_parquet(store.events_file(store.sources()[0].source_id)).get_column("kind").to_list()
                + pl.read_parquet(store.events_file(store.sources()[1].source_id)).get_column("kind").to_list())
    assert {"oom_kill", "gpu_fallen_off_bus"} <= kinds
    assert len(rep.anchors) == 1 and abs(rep.anchors[0].boot_time.timestamp() - boot) <= 1.0
    d = records(store).filter(pl.col("path").str.ends_with("dmesg.txt"))
    assert set(d["ts_source"]) == {"boot_anchored"} and set(d["host"]) == {"gpu1"}
    # a kernel message that only starts with a bracket keeps it
    assert parse_text("May 25 08:00:00 gpu1 kernel: [drm] Initialized nvidia-drm 0.0.0\n", path="k.log",
                      year=2025)["message"][0] == "[drm] Initialized nvidia-drm 0.0.0"


def test_anchored_dmesg_events_take_the_host_of_their_records(tmp_path: Path) -> None:
    """Pairing a raw dmesg (no host) with gpu1's journal names gpu1 as its records' host; its events, matched before
    that, take it too: in a store of two hosts its OOM kill is gpu1's incident, not an `unknown host`'s (whose
    statement printed `on {host}`)."""
    from datetime import datetime, timezone

    from forensics.incidents import find_incidents
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    boot = 1748160000  # 2025-05-25T08:00:00Z
    msgs = [(100.25, "NVRM: loading NVIDIA UNIX Open Kernel Module  575.57.08"), (2000.5, "EXT4-fs (nvme0n1p2): mounted"),
            (3000.75, "usb 1-1: new high-speed USB device number 2 using xhci_hcd"),
            (44238.4, "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
                      "oom_score_adj=0"),
            (44238.512345, "Out of memory: Killed process 48213 (python3) total-vm:1000kB, anon-rss:900kB, "
                           "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:8kB oom_score_adj:0")]
    stamp = lambda m: datetime.fromtimestamp(int(boot + m), timezone.utc).strftime("%b %d %H:%M:%S")  # noqa: E731
    (tmp_path / "dmesg.txt").write_text("".join(f"[{m:12.6f}] {t}\n" for m, t in msgs))
    (tmp_path / "journal.txt").write_text("".join(f"{stamp(m)} gpu1 kernel: {t}\n" for m, t in msgs[:3]))
    (tmp_path / "other.txt").write_text(f"{stamp(3000)} gpu2 app[7]: hello\n")
    store = Store(tmp_path / "s")
    ingest(store, [str(tmp_path / f) for f in ("dmesg.txt", "journal.txt", "other.txt")], IngestOptions(year=2025))
    ev = store.events().filter(pl.col("path").str.ends_with("dmesg.txt")).collect()
    assert ev.height and set(ev["host"]) == {"gpu1"}, ev.select("kind", "host")
    oom = [i for i in find_incidents(store, []) if any(c.kind == "oom_kill" for c in i.conclusions)]
    assert [i.hosts for i in oom] == [("gpu1",)]
    assert all("{host}" not in c.statement and "gpu1" in c.statement for c in oom[0].conclusions
               if c.kind == "oom_kill")


@pytest.mark.parametrize("carried", [True, False])
def test_events_take_their_records_final_times_over_many_spilled_parts(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      carried: bool) -> None:
    """Year-less stamps are fixed only once the whole source is read; the events matched before that, spilled
    in many parts, are given their records' final times one part at a time: the same events, in the same order,
    as when they all fit in one part, each at its record's time. The events carry the record columns the fix
    reads, and the fix is applied to them (the records file is not read for their times); events matched without
    those columns are given their records' times from the records file."""
    import forensics.pipeline as pipeline
    from forensics import match
    from forensics.store import Store
    from forensics.timefix import EXTRA

    import forensics.landed as landed

    read_back = []
    real_final = landed.final_times
    monkeypatch.setattr(landed, "final_times", lambda *a: read_back.append(1) or real_final(*a))

    lines = []
    for i in range(3000):
        stamp = f"Dec 31 23:{(i // 60) % 60:02d}:{i % 60:02d}" if i < 1800 else f"Jan  1 00:{(i // 60) % 60:02d}:00"
        msg = ("Out of memory: Killed process 4242 (python3) total-vm:1000kB, anon-rss:900kB, file-rss:0kB, "
               "shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0" if i % 37 == 0 else f"tick {i}")
        lines.append(f"{stamp} node kernel: {msg}")
    src = tmp_path / "syslog"
    src.write_text("\n".join(lines) + "\n")
    opts = pipeline.IngestOptions(year=2024)

    def events(store: Store) -> tuple[pl.DataFrame, pl.DataFrame]:
        (e,) = store.sources()
        return store.events_of(e).collect(), store.records_of(e).collect()

    whole = Store(tmp_path / "whole")
    pipeline.ingest(whole, [str(src)], opts)
    one, _ = events(whole)
    parts = []
    real = pipeline.final_events
    monkeypatch.setattr(pipeline, "final_events", lambda ps, *a, **k: parts.append(len(ps)) or real(ps, *a, **k))
    monkeypatch.setattr(pipeline, "BATCH_BYTES", 8 << 10)
    monkeypatch.setattr(pipeline, "_matcher", lambda rules, budget=None: match.Matcher(
        rules, flush_rows=5, budget=budget, carry=EXTRA if carried else ()))
    read_back.clear()
    split = Store(tmp_path / "split")
    pipeline.ingest(split, [str(src)], opts)
    many, recs = events(split)
    assert parts and parts[0] > 10
    assert read_back == ([] if carried else [1])
    assert one.height == many.height > 50
    assert one.drop("source_id").equals(many.drop("source_id"))
    at = many.join(recs.select("line", pl.col("ts").alias("rec_ts"), pl.col("ts_source").alias("rec_src")),
                   on="line", how="left")
    assert (at["ts"] == at["rec_ts"]).all() and (at["ts_source"] == at["rec_src"]).all()
    assert at["ts"].dt.year().unique().sort().to_list() == [2023, 2024]  # --year is the last line's: a wrap before it


_OOM = ("Out of memory: Killed process 4242 (python3) total-vm:1000kB, anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, "
        "UID:0 pgtables:4kB oom_score_adj:0")


def _spilled(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Ingest with tiny batches and flushes (many spilled events parts); whether the times of each source's
    events move (a fix of them, or their records' times read)."""
    import forensics.pipeline as pipeline
    from forensics import match

    from forensics.timefix import EXTRA

    seen: list[bool] = []
    real = pipeline.final_events
    monkeypatch.setattr(pipeline, "final_events", lambda ps, f, sid, times: seen.append(times is None or
                                                                                         bool(times)) or
                        real(ps, f, sid, times))
    monkeypatch.setattr(pipeline, "BATCH_BYTES", 8 << 10)
    monkeypatch.setattr(pipeline, "_matcher", lambda rules, budget=None: match.Matcher(rules, flush_rows=5,
                                                                                        budget=budget, carry=EXTRA))
    return seen


def _event_times_are_record_times(store) -> pl.DataFrame:
    (e,) = store.sources()
    ev, recs = store.events_of(e).collect(), store.records_of(e).collect()
    at = ev.join(recs.select("line", pl.col("ts").alias("rec_ts"), pl.col("ts_source").alias("rec_src")),
                 on="line", how="left")
    assert at.height > 20 and at["source_id"].unique().to_list() == [e.source_id]
    assert (at["ts"] == at["rec_ts"]).all() and (at["ts_source"] == at["rec_src"]).all()
    return at


def test_exact_times_leave_the_events_times_as_matched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A source whose stamps carry their date and zone has its final times when read: its events are given
    only the source id, the records file is not read for their times, and each is still at its record's time."""
    import forensics.landed as landed
    import forensics.pipeline as pipeline
    from forensics.store import Store

    lines = [f"2025-05-25T{10 + i // 3600:02d}:{(i // 60) % 60:02d}:{i % 60:02d}.000000+02:00 node kernel: "
             f"{_OOM if i % 37 == 0 else f'tick {i}'}" for i in range(3000)]
    src = tmp_path / "journal-iso.log"
    src.write_text("\n".join(lines) + "\n")
    seen = _spilled(monkeypatch)
    monkeypatch.setattr(landed, "final_times", lambda *a: pytest.fail("exact times were read back"))
    store = Store(tmp_path / "s")
    pipeline.ingest(store, [str(src)], pipeline.IngestOptions())
    assert seen == [False]
    at = _event_times_are_record_times(store)
    assert set(at["ts_source"]) == {"exact"} and at["ts"].min().hour == 8  # +02:00 -> UTC


def test_events_of_a_year_taken_from_another_source_are_fixed_with_their_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A year-less journal takes its year from a full-date source of the same host (a host anchor, known only
    once that one has landed): its events, matched long before, get the same final times as their records,
    computed from the columns they carry."""
    import forensics.landed as landed
    import forensics.pipeline as pipeline
    from forensics.store import Store

    dated = tmp_path / "iso.log"
    dated.write_text("".join(f"2024-12-31T23:5{i}:00+00:00 node app[1]: dated {i}\n" for i in range(10)))
    yearless = tmp_path / "short.log"
    yearless.write_text("".join(f"Dec 31 23:{i // 60:02d}:{i % 60:02d} node kernel: "
                                f"{_OOM if i % 37 == 0 else f'tick {i}'}\n" for i in range(3000)))
    seen = _spilled(monkeypatch)
    monkeypatch.setattr(landed, "final_times", lambda *a: pytest.fail("the records file was read for times"))
    store = Store(tmp_path / "s")
    pipeline.ingest(store, [str(yearless), str(dated)], pipeline.IngestOptions())
    (e,) = [x for x in store.sources() if x.path.endswith("short.log")]
    assert "for host node" in e.time_anchor and True in seen
    ev, recs = store.events_of(e).collect(), store.records_of(e).collect()
    at = ev.join(recs.select("line", pl.col("ts").alias("rec_ts")), on="line", how="left")
    assert at.height > 50 and (at["ts"] == at["rec_ts"]).all()
    assert at["ts"].dt.year().unique().to_list() == [2024] and set(at["ts_source"]) == {"year_inferred"}


def test_boot_time_anchor_moves_the_events_with_their_records(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`--boot-time` anchors a dmesg's monotonic seconds while its records are written: its events, matched
    without a time, are given their records' anchored times."""
    from datetime import datetime, timezone

    import forensics.pipeline as pipeline
    from forensics.store import Store

    src = tmp_path / "dmesg.txt"
    src.write_text("".join(f"[{100 + i:8d}.000000] {_OOM if i % 37 == 0 else f'tick {i}'}\n" for i in range(3000)))
    seen = _spilled(monkeypatch)
    store = Store(tmp_path / "s")
    pipeline.ingest(store, [str(src)], pipeline.IngestOptions(
        boot_time=datetime(2025, 5, 25, 8, 0, tzinfo=timezone.utc)))
    assert seen == [True]
    at = _event_times_are_record_times(store)
    assert set(at["ts_source"]) == {"boot_anchored"} and at["ts"].null_count() == 0


def test_final_events_of_unlike_parts_are_retimed_from_the_records_file(tmp_path: Path) -> None:
    """Spilled parts that do not all carry the fix's columns cannot be read by one scan: each is given its
    records' times from the records file instead, and every output has the events' columns only."""
    from datetime import datetime, timezone

    import forensics.pipeline as pipeline
    from forensics.schema import EVENT_SCHEMA, empty_events
    from forensics.timefix import EXTRA

    t0, t1 = (datetime(2025, 5, 25, h, tzinfo=timezone.utc) for h in (1, 2))
    records_file = tmp_path / "records.parquet"
    pl.DataFrame({"line": [1, 2], "ts": [t0, t1], "ts_source": ["exact", "exact"],
                  "host": ["h1", None]}).write_parquet(records_file)

    def event(line: int) -> pl.DataFrame:
        return pl.concat([empty_events(), pl.DataFrame({"line": [line], "kind": ["k"], "source_id": ["tmp"]})],
                         how="diagonal_relaxed").cast(EVENT_SCHEMA)

    a, b = tmp_path / "events-0.parquet", tmp_path / "events-1.parquet"
    event(1).with_columns(pl.lit(3, dtype=pl.Int32).alias(EXTRA[0])).write_parquet(a)
    event(2).write_parquet(b)
    out = pipeline.final_events([a, b], records_file, "sid", []).collect()
    assert out.columns == list(EVENT_SCHEMA)
    assert out["line"].to_list() == [1, 2] and out["ts"].to_list() == [t0, t1]
    assert out["source_id"].to_list() == ["sid", "sid"] and out["host"].to_list() == ["h1", None]


def test_a_file_of_zone_less_stamps_with_year_less_ones_says_the_zone_once(tmp_path: Path) -> None:
    """An SGLang log holding a few glog lines (PyTorch's NCCL watchdog prints `[E0525 ...]`, no year): the
    year-less ones take the year of the dated lines around them, all print no zone. The time note says how
    the year was found, and that the zone was assumed, once, with the hint to change it."""
    text = ("[2025-05-25 20:17:18 TP0] Load weight begin. avail mem=78.53 GB\n"
            "[rank1]:[E0525 20:17:19.059515605 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective\n"
            "[2025-05-25 20:17:20 TP0] Load weight end.\n")
    store, _ = ingest_text(tmp_path, "sglang.log", text)
    (e,) = store.sources()
    assert e.time_anchor.count("zone assumed UTC") == 1, e.time_anchor
    assert e.time_anchor.startswith("year inferred: the dated lines around them in the same file; zone assumed UTC "
                                    "(the stamps print no zone; pass --tz to change)"), e.time_anchor
    assert set(records(store)["ts_source"]) == {"year_inferred", "zone_assumed"}


@pytest.mark.parametrize("stamp,expected", [
    ("Sun May 25 20:31:02 UTC 2025", "2025-05-25T20:17:03.000000"),           # `date` in a terminal session
    ("Sun May 25 20:31:05 2025", "2025-05-25T20:17:03.000000"),               # nvidia-smi's table head
    ("Timestamp                                 : Sun May 25 20:31:05 2025", "2025-05-25T20:17:03.000000"),
    ("Date: Thu Jan  1 00:10:00 CET 2026", "2025-05-25T20:17:03.000000"),     # taken in the next year
])
def test_year_from_a_date_stamp_printed_in_the_file(tmp_path: Path, stamp: str, expected: str) -> None:
    text = f"{stamp}\nMay 25 20:17:03 gpu-a07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    path = tmp_path / "capture.txt"
    path.write_text(text)
    y2030 = 1893456000
    os.utime(path, (y2030, y2030))
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    store = Store(tmp_path / "s")
    ingest(store, [str(path)], IngestOptions())
    df = records(store).filter(pl.col("ts").is_not_null())
    assert iso(df) == [expected]
    assert "the date printed when the file was captured" in df["ts_anchor"][0]


def test_a_date_stamp_inside_a_message_is_no_capture_date(tmp_path: Path) -> None:
    text = ("May 25 20:17:03 h app[1]: Sun May 25 20:31:05 2019\n")
    path = tmp_path / "j.log"
    path.write_text(text)
    os.utime(path, (1748200000, 1748200000))  # 2025-05-25
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    store = Store(tmp_path / "s")
    ingest(store, [str(path)], IngestOptions())
    assert iso(records(store)) == ["2025-05-25T20:17:03.000000"]


@pytest.mark.parametrize("workers", [1, 2])
def test_many_year_less_sources_wait_together_without_nesting(tmp_path: Path, workers: int,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Forty kernel journals with no year of their own and one unit journal that dates itself: each waits at its
    end on a thread of its own (a waiting source never runs another on its stack: forty deep would be forty
    sources' state at once, and past Python's recursion limit with more), and all take the unit journal's year."""
    import threading

    import forensics.pipeline as pipeline
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    monkeypatch.setattr(pipeline, "WORKERS", workers)
    paths = [_kernel_journal(tmp_path / f"k{i:02d}.log", 50 + i) for i in range(40)]
    paths.append(_sglang_journal(tmp_path / "s.log"))
    depth: list[int] = []
    real = pipeline._Schedule.wait_anchors

    def watched(self, p):  # noqa: ANN001, ANN202
        import inspect

        depth.append(sum(1 for f in inspect.stack(0) if f.function == "watched"))
        return real(self, p)

    monkeypatch.setattr(pipeline._Schedule, "wait_anchors", watched)
    store = Store(tmp_path / "st")
    rep = ingest(store, [str(p) for p in paths], IngestOptions())
    assert len([r for r in rep.results if r.status == "ingested"]) == 41
    assert len(depth) == 40 and max(depth) == 1        # never one waiting source inside another
    entries = [e for e in store.sources() if e.path.endswith(".log") and "/k" in e.path]
    assert len(entries) == 40 and {e.year_from for e in entries} == {"host"}
    assert {e.first_ts[:4] for e in entries} == {"2025"}
    assert not [t for t in threading.enumerate() if t.name.startswith("ingest-")]  # every worker has ended


def test_a_year_from_the_files_age_is_a_gap_of_the_report(tmp_path: Path) -> None:
    """A kernel journal copied with nothing in it to date it: its incident says that the year is the file's
    modification time's, what that can get wrong, and how to give the year."""
    from forensics.incidents import build_incidents
    from forensics.pipeline import IngestOptions, ingest
    from forensics.store import Store

    incident = Path(__file__).resolve().parent.parent / "samples" / "incident" / "journal-eagle3.log"
    k = tmp_path / "k.log"
    k.write_text("".join(x for x in incident.read_text().splitlines(keepends=True) if " kernel: " in x))
    os.utime(k, (_DEC_2026, _DEC_2026))
    store = Store(tmp_path / "st")
    ingest(store, [str(k)], IngestOptions())
    (inc,) = build_incidents(store)
    assert inc.id.startswith("2026-05-25")                 # the wrong year, as the file's age gives it
    (gap,) = [g for g in inc.gaps if g.what == f"The exact times of {k}"]
    assert "the file's modification time (2026-12-01" in gap.why and "in the wrong year" in gap.why
    assert f"forensics ingest --force --year YYYY {k}" in gap.commands
    # given the year, the same lines are 2025's and the gap says nothing of a guess
    ingest(store, [str(k)], IngestOptions(year=2025))
    (inc,) = build_incidents(store)
    assert inc.id.startswith("2025-05-25")
    (gap,) = [g for g in inc.gaps if g.what == f"The exact times of {k}"]
    assert "--year 2025" in gap.why and "wrong year" not in gap.why and gap.commands == ()
