"""A raw dmesg prints no host, but systemd names it a few seconds into each boot (`systemd[1]: Hostname set to
<gpu-a07>.`, older systemd `Set hostname to <...>.`): each boot's records and events take that host, so a kernel OOM
kill in a dmesg of several machines put together is an incident of the right machine."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from click.testing import CliRunner

from forensics.cli import main
from forensics.incidents import build_incidents
from forensics.pipeline import IngestOptions, ingest
from forensics.store import Store


def _boot(host_line: str | None, pid: int, name: str) -> list[str]:
    out = ["[    0.000000] Linux version 6.8.0-60-generic (buildd@lcy02-amd64-098) #63-Ubuntu SMP PREEMPT_DYNAMIC",
           "[    0.000000] Command line: BOOT_IMAGE=/vmlinuz-6.8.0-60-generic ro"]
    if host_line:
        out.append(f"[    5.304120] systemd[1]: {host_line}")
    out += ["[  843.067209] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
            "oom_score_adj=0",
            f"[  843.070001] Out of memory: Killed process {pid} ({name}) total-vm:500000000kB, anon-rss:440000000kB, "
            "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:900000kB oom_score_adj:0"]
    return out


def _dmesg(tmp: Path) -> Path:
    lines = (_boot("Hostname set to <gpu-a07>.", 41650, "python3") + _boot(None, 41700, "python3")
             + _boot("Set hostname to <gpu-b02>.", 41711, "python3"))
    p = tmp / "dmesg.log"
    p.write_text("".join(x + "\n" for x in lines))
    return p


def test_each_boot_of_a_dmesg_takes_the_host_it_names(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    (res,) = ingest(store, [str(_dmesg(tmp_path))], IngestOptions()).results
    recs = store.records().select("line", "host").collect()
    hosts = dict(zip(recs["line"].to_list(), recs["host"].to_list()))
    assert [hosts[n] for n in (1, 3, 5)] == ["gpu-a07"] * 3            # the first boot: lines 1-5
    assert [hosts[n] for n in (6, 7, 8, 9)] == [None] * 4              # the second names none
    assert [hosts[n] for n in (10, 12, 14)] == ["gpu-b02"] * 3         # the third, in older systemd's words
    ev = store.events().filter(pl.col("kind") == "oom_kill").select("line", "host").collect()
    assert ev.rows() == [(4, "gpu-a07"), (8, None), (13, "gpu-b02")]   # from `invoked oom-killer`
    entry = res.entry
    assert entry.host in ("gpu-a07", "gpu-b02")
    assert ("host from systemd's `Hostname set to <...>` line of each boot: gpu-a07 (line 3), gpu-b02 (line 12); "
            "4 record(s) of boots that name none keep no host") in entry.notes
    # the store holds two hosts, so the boot that names none stays apart, as a file's hostless lines do
    incs = build_incidents(store)
    assert sorted((i.id, i.hosts) for i in incs) == [
        ("undated-dmesg-log-oom-kill", ("unknown host (dmesg.log)",)), ("undated-gpu-a07-oom-kill", ("gpu-a07",)),
        ("undated-gpu-b02-oom-kill", ("gpu-b02",))]
    (apart,) = [i for i in incs if i.id == "undated-dmesg-log-oom-kill"]
    assert any(g.what.startswith("Which host the records of") and "names 2 hosts (gpu-a07, gpu-b02)" in g.why
               for g in apart.gaps), apart.gaps


def test_a_host_given_or_printed_wins(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    ingest(store, [str(_dmesg(tmp_path))], IngestOptions(host="given-box"))
    assert store.records().select(pl.col("host").unique()).collect().to_series().to_list() == ["given-box"]
    # a journal prints its host on every line: the line naming another changes nothing
    j = tmp_path / "journal.log"
    j.write_text("2025-05-25T08:00:05+00:00 real-box systemd[1]: Hostname set to <other-box>.\n"
                 "2025-05-25T08:00:06+00:00 real-box systemd[1]: Started cron.service - Regular background program.\n")
    store2 = Store(tmp_path / "store2")
    (res,) = ingest(store2, [str(j)], IngestOptions()).results
    assert store2.records().select(pl.col("host").unique()).collect().to_series().to_list() == ["real-box"]
    assert not [n for n in res.entry.notes if "Hostname set to" in n]


def test_the_sources_json_says_where_the_host_came_from(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    r = CliRunner().invoke(main, ["--store", store, "ingest", "-q", str(_dmesg(tmp_path))])
    assert r.exit_code == 0, r.output
    (src,) = json.loads(CliRunner().invoke(main, ["--store", store, "sources", "--json"]).stdout)
    assert any(n.startswith("host from systemd's `Hostname set to <...>` line") for n in src["notes"])


def test_a_boot_named_short_pairs_with_its_hosts_journal_named_in_full(tmp_path: Path) -> None:
    # the boot says `gpu-a07`, the journal prints `gpu-a07.example.net`: one host; the dmesg is anchored to that
    # journal's clock and takes its spelling; another host's journal with the same kernel lines is not its clock
    from datetime import datetime, timedelta, timezone
    boot = datetime(2025, 5, 25, 8, 0, 0, tzinfo=timezone.utc)
    kernel = [(1.5, "ACPI: PCI Root Bridge [PCI0] (domain 0000 [bus 00-7e])"),
              (5.304120, "systemd[1]: Hostname set to <gpu-a07>."),
              (300.25, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.133.20"),
              (843.067209, "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
                           "oom_score_adj=0"),
              (843.070001, "Out of memory: Killed process 41650 (python3) total-vm:500000000kB, anon-rss:440000000kB, "
                           "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:900000kB oom_score_adj:0")]
    (tmp_path / "dmesg.log").write_text("".join(f"[{m:>12.6f}] {t}\n" for m, t in kernel))
    j = "".join(f"{(boot + timedelta(seconds=m)).isoformat(timespec='microseconds')} gpu-a07.example.net kernel: {t}\n"
                for m, t in kernel)
    (tmp_path / "journal.log").write_text(j)
    # another host booted 2 h later prints the same generic lines (not the pid's): it must not anchor this dmesg
    other = boot + timedelta(hours=2)
    (tmp_path / "other.log").write_text("".join(
        f"{(other + timedelta(seconds=m)).isoformat(timespec='microseconds')} gpu-b02 kernel: {t}\n"
        for m, t in kernel[:3]))
    store = Store(tmp_path / "store")
    rep = ingest(store, [str(tmp_path / x) for x in ("dmesg.log", "journal.log", "other.log")], IngestOptions())
    (anchor,) = rep.anchors
    assert anchor.host == "gpu-a07.example.net" and abs((anchor.boot_time - boot).total_seconds()) < 0.01
    recs = store.records().filter(pl.col("path").str.ends_with("dmesg.log")).select("host", "ts_source").collect()
    assert set(recs["host"].to_list()) == {"gpu-a07.example.net"} and set(recs["ts_source"]) == {"boot_anchored"}


def test_a_boot_named_localhost_names_no_host(tmp_path: Path) -> None:
    p = tmp_path / "dmesg.log"
    p.write_text("".join(x + "\n" for x in _boot("Hostname set to <localhost>.", 41650, "python3")))
    store = Store(tmp_path / "store")
    (res,) = ingest(store, [str(p)], IngestOptions()).results
    assert store.records().select(pl.col("host").unique()).collect().to_series().to_list() == [None]
    assert not [n for n in res.entry.notes if "Hostname set to" in n]
