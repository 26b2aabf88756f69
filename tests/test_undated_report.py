"""A raw dmesg copied off a box with no journal: its OOM kills have kernel seconds and no wall-clock time. The
report still says whose process died, what the commands' time placeholders stand for and how to find the time."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main
from forensics.render.view import unfilled_note

BOOT = ["[    0.000000] Linux version 6.8.0-60-generic (buildd@lcy02-amd64-098) #63-Ubuntu SMP PREEMPT_DYNAMIC",
        "[    5.304120] systemd[1]: Hostname set to <gpu-f51>."]


def _oom(at: str, pid: int, cgroup: str) -> list[str]:
    return [f"[{at}] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
            "oom_score_adj=0",
            f"[{at}] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,"
            f"global_oom,task_memcg={cgroup},task=python3,pid={pid},uid=1000",
            f"[{at}] Out of memory: Killed process {pid} (python3) total-vm:717969587kB, anon-rss:600206201kB, "
            "file-rss:155353kB, shmem-rss:298010kB, UID:1000 pgtables:142010kB oom_score_adj:0"]


def _report(tmp: Path, lines: list[str], *extra: str) -> str:
    p = tmp / "dmesg.log"
    p.write_text("".join(x + "\n" for x in lines))
    store = str(tmp / "store")
    r = CliRunner().invoke(main, ["--store", store, "ingest", "-q", str(p)])
    assert r.exit_code == 0, r.output
    out = tmp / "r.md"
    r = CliRunner().invoke(main, ["--store", store, "report", *extra, "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out.read_text()


def test_a_service_oom_kill_without_a_journal(tmp_path: Path) -> None:
    md = _report(tmp_path, BOOT + _oom("17893.292639", 41700, "/system.slice/sglang-deepseek-v3.service"),
                 "--incident", "undated-gpu-f51-sglang-deepseek-v3")
    # the headline names the unit whose process died; the summary says the date is unknown
    assert md.startswith("# kernel OOM killer killed pid 41700 (python3) on gpu-f51 "
                         "(in sglang-deepseek-v3.service)\n"), md[:200]
    assert "On an unknown date, on `gpu-f51`: " in md
    # no outage can be shown, but the loss is said and the question left open, with how to answer it
    assert "No service went down in the logs of this incident." in md
    assert ("`sglang-deepseek-v3.service` lost pid 41700 (python3) to the kernel OOM killer (" in md
            and "no journal of gpu-f51 was ingested" in md
            and "(`journalctl -u sglang-deepseek-v3.service`)" in md), md
    # the kernel seconds of the first line, and how to turn them into a wall-clock time
    assert "is at 17893.29 s (4 h 58 min) after its boot: its wall-clock time is that boot's start" in md
    assert "journalctl --list-boots   # on gpu-f51: when each boot began" in md
    # the commands keep {since} and {until}, and the report says why
    assert '--since "{since}" --until "{until}"' in md
    assert ("Left for you to fill in the commands: `{since}` and `{until}`, as the incident has no wall-clock "
            "time: what the logs do not show says how to find it.") in md


def test_a_session_process_names_its_scope(tmp_path: Path) -> None:
    # a login session's process: the headline says so; no service lost anything
    md = _report(tmp_path, BOOT + _oom("843.067209", 2362, "/user.slice/user-1000.slice/session-2362.scope"),
                 "--incident", "undated-gpu-f51-session-2362")
    assert md.startswith("# kernel OOM killer killed pid 2362 (python3) on gpu-f51 (in session-2362.scope)\n")
    assert "lost pid" not in md


def test_unfilled_note_names_only_placeholders() -> None:
    assert unfilled_note(["awk '{print $1}' f", "journalctl -u x --since \"2025-05-25 20:15\""], True) == ""
    assert unfilled_note(['ssh {host} journalctl -k --since "{since}"'], True) == (
        "Left for you to fill in the commands: `{since}`, as the line they are about has no wall-clock time; "
        "`{host}`, as no ingested line names the host.")
    assert "`{killed.unit}`, as the logs do not give it" in unfilled_note(["journalctl -u {killed.unit}"], True)


def test_undated_selects_every_undated_incident(tmp_path: Path) -> None:
    other = [x.replace("gpu-f51", "gpu-g08") for x in BOOT]     # a second machine's boot in the same dmesg
    lines = (BOOT + _oom("843.067209", 2362, "/user.slice/user-1000.slice/session-2362.scope")
             + other + _oom("17893.292639", 41700, "/system.slice/sglang-deepseek-v3.service"))
    md = _report(tmp_path, lines, "--incident", "undated")
    assert md.startswith("# 2 incidents, undated\n"), md[:100]
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "store"), "report", "--incident", "undated-gpu"])
    assert r.exit_code != 0 and "(or `undated` for every undated incident)" in r.output, r.output
    r = CliRunner().invoke(main, ["--store", str(tmp_path / "store"), "incidents", "undated"])
    assert [x.split("\t")[0] for x in r.output.splitlines()] == ["undated-gpu-f51-session-2362",
                                                                 "undated-gpu-g08-sglang-deepseek-v3"], r.output


def test_a_containers_scope_is_named_by_its_short_id(tmp_path: Path) -> None:
    cid = "8cfee7de8229361708802a421b47604b18aa21e7f39adba9dc3f4b156ca2c566"
    md = _report(tmp_path, BOOT + _oom("843.067209", 41813, f"/system.slice/docker-{cid}.scope"),
                 "--incident", "undated")
    assert md.startswith("# kernel OOM killer killed pid 41813 (python3) on gpu-f51 (in container 8cfee7de8229)\n")
    assert f"docker-{cid}.scope" in md        # the timeline and the evidence keep the unit whole
    from forensics.correlate import unit_label
    assert [unit_label(u) for u in (f"cri-containerd-{cid}.scope", f"libpod-{cid}.scope", "sglang.service",
                                    f"docker-{cid[:12]}.scope")] == [
        "container 8cfee7de8229", "container 8cfee7de8229", "sglang.service", f"docker-{cid[:12]}.scope"]
