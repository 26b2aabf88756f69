"""PyTorch DataLoader workers: the main process's `DataLoader worker (pid P) is killed by signal: Killed.` after the
kernel OOM killer named that pid (confirmed), with no kernel log (suspected), and a worker's bus error when /dev/shm
is too small (`ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory
(shm).`). A job's stderr prints the report and its traceback with no time stamp: a correlation that binds them to
the timed lines puts them in that incident, not in an undated one of their own."""

from __future__ import annotations

from pathlib import Path

from helpers import cli_incidents, cli_ingest

KERNEL = """\
2025-05-25T09:31:12+00:00 gpu3 kernel: python3 invoked oom-killer: gfp_mask=0x140dca(GFP_HIGHUSER_MOVABLE|__GFP_COMP|__GFP_ZERO), order=0, oom_score_adj=0
2025-05-25T09:31:12+00:00 gpu3 kernel: oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/system.slice/train.service,task=pt_data_worker,pid=51207,uid=1000
2025-05-25T09:31:12+00:00 gpu3 kernel: Out of memory: Killed process 51207 (pt_data_worker) total-vm:83886080kB, anon-rss:41943040kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:90000kB oom_score_adj:0
"""
TRACE = [
    "Traceback (most recent call last):",
    '  File "/opt/train/train.py", line 210, in <module>',
    "    for batch in loader:",
    '  File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/_utils/signal_handling.py", line 73, in handler',
    "    _error_if_any_worker_fails()",
]
EXIT = "2025-05-25T09:31:17+00:00 gpu3 systemd[1]: train.service: Main process exited, code=exited, status=1/FAILURE\n"


def job(*lines: str) -> str:
    """A training job's journal: `lines` from its main process (python3[51000]) at 09:31:15, then its unit's exit."""
    return "".join(f"2025-05-25T09:31:15+00:00 gpu3 python3[51000]: {line}\n" for line in lines) + EXIT


JOB = job(*TRACE, "RuntimeError: DataLoader worker (pid 51207) is killed by signal: Killed.") + \
    "2025-05-25T09:31:17+00:00 gpu3 systemd[1]: train.service: Failed with result 'exit-code'.\n"
STDERR = "\n".join([
    "2025-05-25 09:31:14,101 INFO epoch 3 step 1200 loss 1.873",
    "RuntimeError: unable to write to file </torch_9931_3149260800_0>: No space left on device (28)",
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
    *TRACE,
    "RuntimeError: DataLoader worker (pid 9943) is killed by signal: Bus error. It is possible that dataloader's "
    "workers are out of shared memory. Please try to raise your shared memory limit.",
]) + "\n"


def test_a_worker_the_kernel_oom_killer_named(tmp_path: Path) -> None:
    [inc] = cli_incidents(cli_ingest(tmp_path, {"journal.log": KERNEL + JOB}))
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"], root["kind"]) == ("dataloader.worker_oom", "confirmed", "oom_kill")
    assert inc["headline"] == "DataLoader worker (pid 51207) killed by the kernel OOM killer"
    assert "reported that DataLoader worker killed by signal Killed 3 s later" in root["statement"]
    assert "held 40.0 GiB of resident anonymous memory" in root["statement"]
    assert {(s["kind"], s["explained_by"]) for s in inc["symptoms"]} >= {
        ("dataloader_worker_killed", "dataloader.worker_oom"), ("service_exited", "dataloader.worker_oom")}


def test_without_a_kernel_log_the_oom_kill_is_only_suspected(tmp_path: Path) -> None:
    [inc] = cli_incidents(cli_ingest(tmp_path, {"journal.log": JOB}))
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"]) == ("dataloader.worker_killed_unexplained", "possible")
    assert inc["headline"] == "DataLoader worker (pid 51207) killed by SIGKILL: OOM kill suspected, not confirmed"


def test_a_bus_error_in_shared_memory_and_the_untimed_report_in_one_incident(tmp_path: Path) -> None:
    [inc] = cli_incidents(cli_ingest(tmp_path, {"train.log": STDERR}))
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"], root["kind"]) == ("dataloader.shm", "confirmed", "shm_exhausted")
    assert inc["headline"] == "DataLoader workers out of shared memory: /dev/shm is too small for the batches"
    # the main process's report and traceback print no time: the correlation binds them to this incident
    assert {(s["kind"], s["explained_by"]) for s in inc["symptoms"]} == {
        ("dataloader_worker_killed", "dataloader.shm"), ("python_traceback", "dataloader.shm")}
    # libshm's ENOSPC is /dev/shm, not a full disk
    assert "disk_full" not in {e["kind"] for e in inc["events"]}


def test_a_worker_that_exited_is_not_said_to_be_killed() -> None:
    from click.testing import CliRunner

    from forensics.cli import main

    for line, title in [
        ("RuntimeError: DataLoader worker (pid 3120) exited unexpectedly with exit code 1. Details are lost due to "
         "multiprocessing.", "DataLoader worker (pid 3120) exited unexpectedly (exit code 1)"),
        ("RuntimeError: DataLoader worker (pid(s) 4024, 4025) exited unexpectedly",
         "DataLoader worker(s) (pid(s) 4024, 4025) exited unexpectedly"),
        ("RuntimeError: DataLoader worker (pid 19597) is killed by signal: Killed.",
         "DataLoader worker (pid 19597) killed by signal KILL"),
    ]:
        r = CliRunner().invoke(main, ["explain", line])
        assert r.exit_code == 0, r.output
        assert f"title:  {title}\n" in r.output


def test_a_worker_that_exited_on_its_own_error(tmp_path: Path) -> None:
    text = job(*TRACE, "RuntimeError: DataLoader worker (pid 3120) exited unexpectedly with exit code 1. Details are "
               "lost due to multiprocessing. Rerunning with num_workers=0 may give better error trace.")
    [inc] = cli_incidents(cli_ingest(tmp_path, {"journal.log": text}))
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"]) == ("dataloader.worker_exited", "inconclusive")
    assert inc["headline"] == ("DataLoader worker (pid 3120) exited unexpectedly (exit code 1): its error is not in the "
                               "logs")
    assert "Running the same loop with `num_workers=0` raises that error" in root["statement"]


def test_workers_found_dead_while_the_loop_waited_are_not_given_a_cause(tmp_path: Path) -> None:
    """`_try_get_data`'s `pid(s)` form names the dead workers, not how they ended: an inconclusive reading that
    names the usual ends (/dev/shm, the OOM killer) and how to tell them, not the exit-code reading (which would
    say the worker ended on an error of its own) nor a kill."""
    text = job("Traceback (most recent call last):",
               '  File "/usr/local/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1146, in '
               "_try_get_data",
               "    raise RuntimeError(f'DataLoader worker (pid(s) {pids_str}) exited unexpectedly') from e",
               "RuntimeError: DataLoader worker (pid(s) 4218, 4220) exited unexpectedly")
    [inc] = cli_incidents(cli_ingest(tmp_path, {"journal.log": text}))
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"]) == ("dataloader.workers_gone", "inconclusive")
    assert inc["headline"] == ("DataLoader worker(s) (pid(s) 4218, 4220) found dead while the loop waited for a "
                               "batch: how they ended is not in the logs")
    assert "/dev/shm" in root["statement"] and "OOM killer" in root["statement"]
    assert "raises that error in the main process" not in root["statement"]   # the exit-code reading's
    assert "does not say how they ended" in root["statement"]


GONE = "RuntimeError: DataLoader worker (pid(s) 51207) exited unexpectedly"


def test_workers_found_dead_after_the_kernel_oom_killer_named_one(tmp_path: Path) -> None:
    """The `pid(s)` form alone after an OOM kill of its (first) pid: confirmed, as the worker's own report is."""
    [inc] = cli_incidents(cli_ingest(tmp_path, {"journal.log": KERNEL + job(*TRACE, GONE)}))
    root = inc["root_cause"]
    assert (root["rule"], root["confidence"], root["kind"]) == ("dataloader.workers_gone_oom", "confirmed", "oom_kill")
    assert inc["headline"] == "DataLoader worker (pid 51207) killed by the kernel OOM killer"
    assert "3 s later the main process, waiting for a batch, found its DataLoader worker(s) (pid(s) 51207) dead" \
        in root["statement"]


def test_the_python_side_telling_a_reported_death_again_is_one_death(tmp_path: Path) -> None:
    """PyTorch raises the `pid(s)` form "from" the worker's own report: both lines in one traceback are one death,
    read once (not "killed twice", not "how they ended is not in the logs" beside the signal that says it)."""
    text = job(*TRACE, "RuntimeError: DataLoader worker (pid 51207) is killed by signal: Killed.", "",
               "The above exception was the direct cause of the following exception:", "",
               "Traceback (most recent call last):", GONE)
    for kernel, rule, headline in [
            (KERNEL, "dataloader.worker_oom", "DataLoader worker (pid 51207) killed by the kernel OOM killer"),
            ("", "dataloader.worker_killed_unexplained",
             "DataLoader worker (pid 51207) killed by SIGKILL: OOM kill suspected, not confirmed")]:
        (tmp_path / rule).mkdir()
        [inc] = cli_incidents(cli_ingest(tmp_path / rule, {"journal.log": kernel + text}))
        assert (inc["root_cause"]["rule"], inc["headline"]) == (rule, headline)
        # the Python side's report is a symptom that reading explains (the worker's own is its anchor)
        gone = [s for s in inc["symptoms"] if s["id"].endswith(":dataloader.workers_exited")]
        assert [s["explained_by"] for s in gone] == [rule]
