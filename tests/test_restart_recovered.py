"""A unit killed, restarted by systemd, ready again, then killed again more than the clustering gap (15 min) later:
two incidents when the restarted server served (its `python3[pid]` ready line is the unit's through the pid of its
configuration dump), one when it never became ready or died within UP_S of it (a fallback that dies too)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.cli import main
from forensics.clustering import UP_S
from forensics.incidents import build_incidents
from forensics.store import Store
from helpers import ingest_text

T0 = datetime(2025, 5, 27, 17, 40, 0, tzinfo=timezone.utc)
UNIT = "sglang-qwen25-72b.service"
ARGS = ("server_args=ServerArgs(model_path='Qwen/Qwen2.5-72B-Instruct', tp_size=4, mem_fraction_static=0.88, "
        "port=30000)")


def _line(t: datetime, ident: str, msg: str) -> str:
    return f"{t.strftime('%Y-%m-%dT%H:%M:%S')}+00:00 gpu-a07 {ident}: {msg}"


def _run(start: datetime, pid: int, ready_after: float | None) -> list[tuple[datetime, str]]:
    """systemd starts the unit; its process dumps its configuration and (unless None) is ready `ready_after` s on."""
    py = f"python3[{pid}]"
    out = [(start, _line(start, "systemd[1]", "Started SGLang server (Qwen/Qwen2.5-72B-Instruct).")),
           (start + timedelta(seconds=2), _line(start + timedelta(seconds=2), py, f"[{start:%Y-%m-%d %H:%M:%S}] {ARGS}"))]
    if ready_after is not None:
        t = start + timedelta(seconds=ready_after)
        out.append((t, _line(t, py, f"[{t:%Y-%m-%d %H:%M:%S}] The server is fired up and ready to roll!")))
    return out


def _killed(t: datetime, pid: int) -> list[tuple[datetime, str]]:
    """An unexplained SIGKILL of the unit's main process (no OOM kill in the kernel log), and systemd's restart."""
    r = t + timedelta(seconds=10)
    return [(t, _line(t, "kernel", "mlx5_core 0000:3b:00.0 ens1f0np0: Link up")),
            (t, _line(t, "systemd[1]", f"{UNIT}: Main process exited, code=killed, status=9/KILL")),
            (t, _line(t, "systemd[1]", f"{UNIT}: Failed with result 'signal'.")),
            (r, _line(r, "systemd[1]", f"{UNIT}: Scheduled restart job, restart counter is at 3."))]


def _oom(t: datetime, pid: int) -> list[tuple[datetime, str]]:
    """The kernel OOM killer kills the unit's process (global constraint) and systemd records it."""
    k = t.strftime("%Y-%m-%dT%H:%M:%S") + "+00:00 gpu-a07 kernel: "
    return [(t, k + "pt_main_thread invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
                    "oom_score_adj=0"),
            (t, k + f"oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,"
                    f"task_memcg=/system.slice/{UNIT},task=python3,pid={pid},uid=0"),
            (t, k + f"Out of memory: Killed process {pid} (python3) total-vm:698712344kB, anon-rss:215373824kB, "
                    "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:421376kB oom_score_adj:0"),
            (t, _line(t, "systemd[1]", f"{UNIT}: A process of this unit has been killed by the OOM killer.")),
            (t, _line(t, "systemd[1]", f"{UNIT}: Main process exited, code=killed, status=9/KILL")),
            (t, _line(t, "systemd[1]", f"{UNIT}: Failed with result 'oom-kill'."))]


def _store(tmp: Path, second_ready: float | None, second_fail: timedelta) -> Store:
    kill1 = T0 + timedelta(minutes=9, seconds=40)                    # 17:49:40
    restart = kill1 + timedelta(seconds=11)                           # 17:49:51, within the gap
    # systemd restarts the unit after the OOM kill too: that start (after the second death) does not tie the two
    lines = [*_run(T0, 1200, 10), *_killed(kill1, 1200), *_run(restart, 2457883, second_ready),
             *_oom(kill1 + second_fail, 2457883), *_run(kill1 + second_fail + timedelta(seconds=8), 2460001, 10)]
    lines.sort(key=lambda x: x[0])
    return ingest_text(tmp, "journal.log", "".join(text + "\n" for _, text in lines))[0]


@pytest.mark.parametrize("after, words", [("28 min 15 s", timedelta(minutes=28, seconds=15)),
                                          ("8 min", timedelta(minutes=8))])
def test_a_restarted_unit_that_served_then_died_otherwise_is_another_incident(tmp_path: Path, after: str,
                                                                              words: timedelta) -> None:
    # ready 10 s after the restart, killed by the OOM killer 28 min 15 s after the first kill (more than the gap,
    # less than twice it), or 8 min after it (within the gap: `recovered`, which reads the journal's ready line as
    # the unit's too): two incidents, each naming the other
    store = _store(tmp_path, 10, words)
    incs = build_incidents(store)
    assert [i.headline for i in incs] == [
        f"{UNIT} killed by SIGKILL: sender unknown (no OOM kill in the kernel log)",
        f"{UNIT} killed by the kernel OOM killer"]
    first, second = incs
    assert first.followed_by is not None and first.followed_by.incident == second.id
    assert second.follows is not None and second.follows.incident == first.id
    assert second.follows.ready == "2025-05-27T17:50:01.000000Z"
    out = CliRunner().invoke(main, ["--store", str(tmp_path / "store"), "report", "--incident", second.id]).output
    assert (f"This began {after} after incident `{first.id}` on the same host ended (17:49:40 UTC); the server "
            "was ready again at 17:50:01 UTC in between, so the two are told apart.") in out, out


@pytest.mark.parametrize("ready", [None, 28 * 60 + 15 - 11 - UP_S + 30])
def test_a_restarted_unit_that_never_served_is_the_same_incident(tmp_path: Path, ready: float | None) -> None:
    # never ready, or ready less than UP_S before it died: the restart's death is the same incident (a fallback
    # that dies too), as before
    incs = build_incidents(_store(tmp_path, ready, timedelta(minutes=28, seconds=15)))
    assert [i.headline for i in incs] == [
        f"{UNIT} killed by SIGKILL: sender unknown (no OOM kill in the kernel log); then {UNIT} killed by the "
        "kernel OOM killer"]
    assert incs[0].follows is None and incs[0].followed_by is None
