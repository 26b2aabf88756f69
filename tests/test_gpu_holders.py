"""A CUDA out-of-memory error whose GPU other processes held: PyTorch's list of the GPU's processes names them,
and the report says who they were (their lines, the kernel's OOM report that lists them, how their unit ended)
instead of telling the user to lower the server's memory flags."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main
from forensics.gpuholders import GpuProcess, others_fields, others_of, processes

ROOT = Path(__file__).resolve().parents[1]
EAGLE3 = ROOT / "samples" / "incident" / "journal-eagle3.log"

SELF = "Including non-PyTorch memory, this process has 19.68 GiB memory in use. "
TAIL = ("Of the allocated memory 18.90 GiB is allocated by PyTorch, and 212.00 MiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


def _oom(procs: str) -> str:
    return ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a total capacity of "
            f"94.97 GiB of which 1.06 GiB is free. {procs}{TAIL}")


def _k26(procs: str, start: str = "20:19:40") -> str:
    j = "2025-05-25T{t}+00:00 dflash-train {who}: {msg}\n"
    out = j.format(t=start, who="systemd[1]", msg="Started sglang-k26.service - SGLang Kimi K2.6.")
    out += j.format(t="20:19:41", who="python3[51877]", msg="[2025-05-25 20:19:41] server_args=ServerArgs("
                    "model_path='/root/models/Kimi-K2.6', mem_fraction_static=0.9, tp_size=8, port=30001)")
    for ln in ["[2025-05-25 20:21:55 TP0] Scheduler hit an exception: Traceback (most recent call last):",
               '  File "/root/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 2405, in '
               "run_scheduler_process",
               "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank)",
               _oom(procs)]:
        out += j.format(t="20:21:55", who="python3[51877]", msg=ln)
    out += j.format(t="20:21:55", who="python3[51877]", msg="[2025-05-25 20:21:55] Received sigquit from a child "
                    "process. It usually means the child failed.")
    out += j.format(t="20:21:56", who="systemd[1]", msg="sglang-k26.service: Main process exited, code=killed, "
                    "status=9/KILL")
    out += j.format(t="20:21:56", who="systemd[1]", msg="sglang-k26.service: Failed with result 'signal'.")
    return out


def _run(tmp: Path, files: dict[str, str]) -> dict:
    paths = []
    for name, text in files.items():
        (tmp / name).write_text(text)
        paths.append(str(tmp / name))
    store = str(tmp / "store")
    r = CliRunner().invoke(main, ["--store", store, "ingest", *paths])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["--store", store, "incidents", "--json"])
    assert r.exit_code == 0, r.output
    incidents = json.loads(r.output)
    return next(i for i in incidents if "sglang-k26.service" in i["units"])


def _k26_conclusion(incident: dict) -> dict:
    return next(c for c in incident["conclusions"] if c["unit"] == "sglang-k26.service")


def _beside(tmp: Path, name: str, text: str) -> str:
    """The CUDA OOM's statement when pid 7001, which `text` (file `name`) shows, held 70 GiB of the GPU."""
    inc = _run(tmp, {name: text, "journal-k26.log": _k26("Process 7001 has 70.00 GiB memory in use. " + SELF)})
    return _k26_conclusion(inc)["statement"]


def test_the_list_is_read_only_when_it_marks_this_process() -> None:
    assert processes("Process 48391 has 74.21 GiB memory in use. " + SELF) == [
        GpuProcess(48391, int(74.21 * 2**30)), GpuProcess(None, int(19.68 * 2**30))]
    # in a container NVML reports the host's pids: no entry is marked, any may be this process
    assert others_of({"procs": "Process 731904 has 78.40 GiB memory in use. "}) == []
    assert others_of({"procs": "Process 2 has 1.00 GiB memory in use. Process 1 has 3.00 GiB memory in use. "
                               + SELF}) == [GpuProcess(1, 3 * 2**30), GpuProcess(2, 2**30)]


def test_others_are_the_cause_only_when_the_allocation_would_have_fit_and_they_held_a_share() -> None:
    gib = 2**30
    base = {"tried_bytes": 2 * gib, "free_bytes": gib // 2, "total_bytes": 80 * gib}
    big = others_fields({**base, "procs": "Process 7 has 20.00 GiB memory in use. " + SELF})
    assert big["held_by_others"] == "yes" and big["others_text"] == "pid 7 had 20.0 GiB in use"
    # would have fit without it, but 1 GiB of 80 is no share to blame: the server's own sizing stays the cause
    small = others_fields({**base, "procs": "Process 7 has 1.60 GiB memory in use. " + SELF})
    assert "held_by_others" not in small and small["others_pids"] == "7"
    # a large other process, and still no fit: 1 GiB free + 5 GiB < 8 GiB tried
    nofit = others_fields({**base, "tried_bytes": 8 * gib, "free_bytes": gib,
                           "procs": "Process 7 has 5.00 GiB memory in use. " + SELF})
    assert "held_by_others" not in nofit
    many = others_fields({**base, "procs": "".join(f"Process {p} has {p}.00 GiB memory in use. "
                                                   for p in (3, 4, 5, 6)) + SELF})
    assert many["others_text"] == "pids 6 (6.0 GiB), 5 (5.0 GiB), 4 (4.0 GiB) and 1 more had 18.0 GiB in use"
    assert many["others_pids"] == "6,5,4"


def test_a_killed_servers_leftover_scheduler_is_named(tmp_path: Path) -> None:
    inc = _run(tmp_path, {"journal-eagle3.log": EAGLE3.read_text(),
                          "journal-k26.log": _k26("Process 48391 has 74.21 GiB memory in use. " + SELF)})
    c = _k26_conclusion(inc)
    s = c["statement"]
    assert "because other processes held most of it" in s
    assert "pid 48391 had 74.2 GiB in use, this process 19.68 GiB" in s
    assert ("is listed as `sglang::schedul` in the kernel's OOM report at 20:17:18 (`journal-eagle3.log:71-172`), "
            "the report in which the OOM killer killed pid 48213 of sglang-k26-eagle3.service") in s
    assert ("sglang-k26-eagle3.service ended at 20:17:19 (main process killed by signal KILL, "
            "`journal-eagle3.log:173`) and systemd failed to kill the rest of its control group "
            "(`journal-eagle3.log:174`: Invalid argument): if pid 48391 was one of its processes (nothing in the logs "
            "names its unit), it outlived its unit and still held its GPU memory 4 min 36 s later.") in s
    assert "Lower --mem-fraction-static" not in s      # the sizing advice is not given
    assert "ps -o pid,ppid,stat,lstart,cgroup,args -p 48391" in c["next_steps"]


def test_a_pid_whose_lines_name_its_unit(tmp_path: Path) -> None:
    # `journalctl -u old-server.service`: its lines are that unit's; it ended cleanly, and its process stayed
    j = "2025-05-25T{t}+00:00 dflash-train {who}: {msg}\n"
    old = (j.format(t="19:00:00", who="systemd[1]", msg="Started old-server.service - Old server.")
           + j.format(t="19:00:05", who="python3[7001]", msg="INFO:     Uvicorn running on http://0.0.0.0:30000")
           + j.format(t="20:10:00", who="systemd[1]", msg="Stopping old-server.service - Old server...")
           + j.format(t="20:10:02", who="systemd[1]", msg="old-server.service: Deactivated successfully.")
           + j.format(t="20:10:02", who="systemd[1]", msg="Stopped old-server.service - Old server."))
    s = _beside(tmp_path, "old.log", old)
    assert "Process 7001 (70.0 GiB) logged as old-server.service's until 19:00:05 UTC (`old.log:2`)." in s
    assert ("old-server.service ended at 20:10:02 (stopped Old server, `old.log:5`): pid 7001 still held GPU "
            "memory 11 min 53 s later, so it outlived its unit (a process that left the unit's control group") in s


def test_a_cgroup_oom_reports_tasks_are_its_units(tmp_path: Path) -> None:
    # a memory-cgroup OOM lists the tasks of that cgroup only: pid 48391 is the unit's, no "if" about it
    memcg = (EAGLE3.read_text()
             .replace("global_oom,task_memcg=", "oom_memcg=/system.slice/sglang-k26-eagle3.service,task_memcg=")
             .replace("constraint=CONSTRAINT_NONE", "constraint=CONSTRAINT_MEMCG")
             .replace("Out of memory: Killed process", "Memory cgroup out of memory: Killed process"))
    inc = _run(tmp_path, {"journal-eagle3.log": memcg,
                          "journal-k26.log": _k26("Process 48391 has 74.21 GiB memory in use. " + SELF)})
    s = _k26_conclusion(inc)["statement"]
    assert ("is listed as `sglang::schedul` in the kernel's OOM report at 20:17:18 (`journal-eagle3.log:71-172`), "
            "among the tasks of sglang-k26-eagle3.service's memory cgroup.") in s
    assert ("and systemd failed to kill the rest of its control group (`journal-eagle3.log:174`: Invalid argument): "
            "pid 48391 outlived its unit and still held its GPU memory 4 min 36 s later.") in s


def test_a_server_still_running_beside(tmp_path: Path) -> None:
    j = "2025-05-25T{t}+00:00 dflash-train {who}: {msg}\n"
    other = (j.format(t="19:00:00", who="systemd[1]", msg="notebook.service: Referenced but unset environment "
                      "variable evaluates to an empty string: OPTS")
             + j.format(t="19:00:00", who="systemd[1]", msg="Started notebook.service - Jupyter.")
             + j.format(t="20:21:00", who="python3[7001]", msg="[I 20:21:00.120 NotebookApp] Saving file at /x.ipynb"))
    s = _beside(tmp_path, "other.log", other)
    assert "Process 7001 (70.0 GiB) logged as notebook.service's until 20:21:00 UTC (`other.log:3`)." in s
    assert "Nothing in the logs shows notebook.service ending: two servers shared the GPU." in s


def test_a_pid_no_log_names(tmp_path: Path) -> None:
    inc = _run(tmp_path, {"journal-k26.log": _k26("Process 424242 has 70.00 GiB memory in use. " + SELF)})
    s = _k26_conclusion(inc)["statement"]
    assert "Process 424242 (70.0 GiB) is in none of the ingested logs of dflash-train" in s
    assert "because other processes held most of it" in s


def test_in_a_container_the_sizing_reading_stays(tmp_path: Path) -> None:
    unit = ("[Service]\nExecStart=/root/venv/bin/python -m sglang.launch_server --model-path /m --port 30001 "
            "--tp-size 8 --mem-fraction-static 0.90\n")
    inc = _run(tmp_path, {"journal-k26.log": _k26("Process 731904 has 92.60 GiB memory in use. "),
                          "sglang-k26.service": unit})
    s = _k26_conclusion(inc)["statement"]
    assert "other processes" not in s and "Lower --mem-fraction-static" in s


def test_a_server_that_finds_its_gpus_taken_at_start(tmp_path: Path) -> None:
    j = "2025-05-25T{t}+00:00 dflash-train {who}: {msg}\n"
    text = (j.format(t="20:19:40", who="systemd[1]", msg="Started sglang-k26.service - SGLang Kimi K2.6.")
            + "".join(j.format(t="20:19:58", who="python3[51877]", msg=m) for m in [
                "Traceback (most recent call last):",
                '  File "/root/venv/lib/python3.12/site-packages/sglang/srt/model_executor/model_runner.py", '
                "line 402, in init_torch_distributed",
                "    raise ValueError(",
                "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                "min_per_gpu_memory=20.71, local_gpu_memory=93.61, local_gpu_memory * 0.9=84.249"])
            + j.format(t="20:19:59", who="systemd[1]", msg="sglang-k26.service: Main process exited, code=exited, "
                       "status=1/FAILURE")
            + j.format(t="20:19:59", who="systemd[1]", msg="sglang-k26.service: Failed with result 'exit-code'."))
    inc = _run(tmp_path, {"journal.log": text})
    assert inc["root_cause"]["kind"] == "gpu_memory_occupied"
    assert "already taken by other processes and refused to start" in inc["root_cause"]["statement"]
    assert ("nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"
            in inc["root_cause"]["next_steps"])
