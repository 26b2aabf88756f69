"""A multi-node SGLang server (`--nnodes 2 --node-rank R --dist-init-addr ADDR` on two hosts): node 1's GPU falls off
the bus and its server dies; node 0's ranks wait in a collective until their NCCL watchdog gives up 10 minutes later.
Each host's incident names the other (which failed first); a node whose logs were not ingested is what the logs do
not show; another server (another address, or a launch of another run) is no node of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main
from forensics.incidents import build_incidents, find_incidents
from forensics.pipeline import IngestOptions, ingest
from forensics.store import Store

ADDR = "10.0.0.1:5000"
UNIT = "sglang-ds.service"


def _args(rank: int, nnodes: int = 2, addr: str | None = ADDR) -> str:
    a = f"'{addr}'" if addr else "None"
    return (f"server_args=ServerArgs(model_path='/models/DeepSeek-V3', tp_size=16, nnodes={nnodes}, "
            f"node_rank={rank}, dist_init_addr={a}, mem_fraction_static=0.85, port=30000)")


def node_a(nnodes: int = 2, addr: str | None = ADDR, launched: str = "09:40") -> str:
    """Node 0: launched, ready, then rank 3's NCCL watchdog times out (600012 ms) and SGLang kills itself."""
    return "\n".join([
        f"2025-05-26T{launched}:11+0000 node-a systemd[1]: Started {UNIT} - SGLang DeepSeek-V3.",
        f"2025-05-26T{launched}:14+0000 node-a python3[51200]: [2025-05-26 {launched}:14] {_args(0, nnodes, addr)}",
        "2025-05-26T09:52:40+0000 node-a python3[51200]: [2025-05-26 09:52:40] The server is fired up and ready to roll!",
        "2025-05-26T10:10:01+0000 node-a python3[51200]: [rank3]:[E526 10:10:01.123456789 ProcessGroupNCCL.cpp:632] "
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=81234, OpType=ALLREDUCE, "
        "NumelIn=14680064, NumelOut=14680064, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
        "2025-05-26T10:10:02+0000 node-a python3[51200]: [2025-05-26 10:10:02] Received sigquit from a child process. "
        "It usually means the child failed.",
        f"2025-05-26T10:10:02+0000 node-a systemd[1]: {UNIT}: Main process exited, code=killed, status=9/KILL",
        f"2025-05-26T10:10:02+0000 node-a systemd[1]: {UNIT}: Failed with result 'signal'.", ""])


def node_b(rank: int = 1, nnodes: int = 2, addr: str | None = ADDR, host: str = "node-b") -> str:
    """Node 1: launched with node 0; at 10:00:00 its GPU falls off the bus and its server dies."""
    return "\n".join([
        f"2025-05-26T09:40:12+0000 {host} systemd[1]: Started {UNIT} - SGLang DeepSeek-V3.",
        f"2025-05-26T09:40:15+0000 {host} python3[41200]: [2025-05-26 09:40:15] {_args(rank, nnodes, addr)}",
        f"2025-05-26T10:00:00+0000 {host} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=41234, name=python3, GPU has "
        "fallen off the bus.",
        f"2025-05-26T10:00:00+0000 {host} kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
        f"2025-05-26T10:00:03+0000 {host} systemd[1]: {UNIT}: Main process exited, code=killed, status=9/KILL",
        f"2025-05-26T10:00:03+0000 {host} systemd[1]: {UNIT}: Failed with result 'signal'.", ""])


def _store(tmp: Path, **files: str) -> Store:
    paths = []
    for name, text in files.items():
        p = tmp / f"{name}.journal.log"
        p.write_text(text)
        paths.append(str(p))
    store = Store(tmp / "store")
    ingest(store, paths, IngestOptions())
    return store


def _summary(tmp: Path, spec: str, fmt: str = "md") -> str:
    r = CliRunner().invoke(main, ["--store", str(tmp / "store"), "report", "--incident", spec, "--format", fmt])
    assert r.exit_code == 0, r.output
    return r.output


def test_the_node_that_failed_first_is_named_in_the_other_nodes_report(tmp_path: Path) -> None:
    store = _store(tmp_path, **{"node-a": node_a(), "node-b": node_b()})
    a, b = sorted(build_incidents(store), key=lambda i: i.hosts)
    assert (a.id, b.id) == ("2025-05-26-node-a-sglang-ds", "2025-05-26-node-b-sglang-ds")
    assert a.nodes is not None and a.nodes.node_rank == 0 and a.nodes.nnodes == 2 and a.nodes.missing == ()
    (peer,) = a.nodes.nodes
    assert (peer.host, peer.node_rank, peer.incident, peer.start, peer.kind) == (
        "node-b", 1, b.id, "2025-05-26T10:00:00.000000Z", "gpu_fallen_off_bus")
    assert peer.first is not None and Path(peer.first.path).name == "node-b.journal.log" and peer.first.line == 3
    assert b.headline.startswith("GPU 0000:3b:00 fell off the bus")
    (back,) = b.nodes.nodes
    assert (back.host, back.node_rank, back.incident) == ("node-a", 0, a.id)
    # one incident asked for alone (only its host's events are read for it) gives the same
    (alone,) = find_incidents(store, [a.id])
    assert alone.nodes == a.nodes
    out = _summary(tmp_path, a.id)
    assert ("**The first node to fail was `node-b` (node 1), not this one.** This host is node 0 of a 2-node server "
            f"(`--dist-init-addr {ADDR}`). `node-b` failed at 10:00:00 UTC, 10 min 1 s before this host's first sign "
            f"(incident `{b.id}`, `node-b.journal.log:3`): {b.headline}. The collective this "
            "host's rank waited on began at 10:00:00.988 UTC, 1 s after that; a rank waits in a collective for every "
            "rank of every node, so this host's NCCL timeout is most likely a consequence of node-b's failure, and "
            "the root cause is there.") in out, out
    assert f"1. `forensics report --incident {b.id}` (`node-b`)" in out
    out = _summary(tmp_path, b.id)
    assert ("**Other nodes of this server went down after this one.** This host is node 1 of a 2-node server "
            f"(`--dist-init-addr {ADDR}`): `node-a` (node 0) at 10:10:01 UTC, 10 min 1 s after this began (incident "
            f"`{a.id}`, `node-a.journal.log:4`): {a.headline}. Their ranks waited in collectives for this node's "
            "ranks, which had stopped, until their NCCL watchdog gave up: their failures are this one's "
            "consequence.") in out, out
    doc = json.loads(_summary(tmp_path, a.id, "json"))["incidents"][0]
    assert doc["nodes"]["address"] == ADDR and doc["nodes"]["nodes"][0]["incident"] == b.id


def test_a_node_whose_logs_are_missing_is_what_the_logs_do_not_show(tmp_path: Path) -> None:
    store = _store(tmp_path, **{"node-a": node_a(nnodes=3), "node-b": node_b(nnodes=3)})
    a = next(i for i in build_incidents(store) if i.hosts == ("node-a",))
    assert a.nodes is not None and a.nodes.missing == (2,)
    gap = next(g for g in a.gaps if g.what == "The logs of node 2 of this 3-node server")
    assert "`--node-rank 2`" in gap.why
    assert gap.commands[0] == (f'journalctl -u {UNIT} --since "2025-05-26 09:40" --until "2025-05-26 10:45" '
                               "-o short-iso-precise --no-pager > node-2.journal.log")
    # node 1 failed first and is in the logs: the summary names it, not the missing node
    assert "The logs of node 2 are missing" not in _summary(tmp_path, a.id)


def test_only_this_nodes_logs(tmp_path: Path) -> None:
    store = _store(tmp_path, **{"node-a": node_a()})
    (a,) = build_incidents(store)
    assert a.nodes is not None and a.nodes.nodes == () and a.nodes.missing == (1,)
    out = _summary(tmp_path, a.id)
    assert ("**The logs of node 1 are missing.** This host is node 0 of a 2-node server "
            f"(`--dist-init-addr {ADDR}`), and no ingested log holds the launch of node 1.") in out, out
    assert "### The logs of node 1 of this 2-node server" in out


def test_a_node_that_did_not_fail(tmp_path: Path) -> None:
    quiet = "\n".join(node_b(rank=2, nnodes=3, host="node-c").splitlines()[:2]) + "\n"
    store = _store(tmp_path, **{"node-a": node_a(nnodes=3), "node-b": node_b(nnodes=3), "node-c": quiet})
    a = next(i for i in build_incidents(store) if i.hosts == ("node-a",))
    assert [(n.host, n.node_rank, n.incident) for n in a.nodes.nodes] == [
        ("node-b", 1, "2025-05-26-node-b-sglang-ds"), ("node-c", 2, None)]
    assert a.nodes.missing == ()
    assert ("The ingested logs of `node-c` (node 2) end at 09:40:15 UTC, before this incident began: what it did "
            "then cannot be seen.") in _summary(tmp_path, a.id)


def test_other_servers_are_no_nodes_of_it(tmp_path: Path) -> None:
    # another rendezvous address; a single-node server; and this address launched by a run of hours before
    store = _store(tmp_path, **{"node-a": node_a(), "node-b": node_b(addr="10.0.0.9:5000")})
    a = next(i for i in build_incidents(store) if i.hosts == ("node-a",))
    assert a.nodes is not None and a.nodes.nodes == () and a.nodes.missing == (1,)
    shutil.rmtree(tmp_path / "store")
    store = _store(tmp_path, **{"node-a": node_a(nnodes=1), "node-b": node_b(nnodes=1)})
    assert all(i.nodes is None for i in build_incidents(store))
    assert "node-b" not in _summary(tmp_path, "2025-05-26-node-a")
    shutil.rmtree(tmp_path / "store")
    store = _store(tmp_path, **{"node-a": node_a(launched="07:40"), "node-b": node_b()})
    a = next(i for i in build_incidents(store) if i.hosts == ("node-a",))
    assert a.nodes is not None and a.nodes.nodes == ()


def test_nodes_of_sglang_logs_that_name_no_host(tmp_path: Path) -> None:
    # each node's own SGLang log, no host in either: each file is its own `unknown host (<file>)`, and a node
    node0 = "\n".join([f"[2025-05-26 09:40:14] {_args(0)}",
                       "[2025-05-26 09:52:40] The server is fired up and ready to roll!",
                       node_a().splitlines()[3].split("python3[51200]: ", 1)[1],
                       "[2025-05-26 10:10:02] Received sigquit from a child process. It usually means the child failed.",
                       ""])
    node1 = "\n".join([f"[2025-05-26 09:40:15] {_args(1)}",
                       "[2025-05-26 10:00:02 TP9] Scheduler hit an exception: Traceback (most recent call last):",
                       '  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 2400, in '
                       "run_scheduler_process",
                       "    scheduler.event_loop_overlap()",
                       "RuntimeError: CUDA error: unspecified launch failure",
                       "[2025-05-26 10:00:03] Received sigquit from a child process. It usually means the child failed.",
                       ""])
    for name, text in (("node0-sglang.log", node0), ("node1-sglang.log", node1)):
        (tmp_path / name).write_text(text)
    store = Store(tmp_path / "store")
    ingest(store, [str(tmp_path / "node0-sglang.log"), str(tmp_path / "node1-sglang.log")], IngestOptions())
    one, zero = build_incidents(store)
    assert zero.hosts == ("unknown host (node0-sglang.log)",) and zero.root_cause.kind == "nccl_timeout"
    (peer,) = zero.nodes.nodes
    assert (peer.host, peer.node_rank, peer.incident) == ("unknown host (node1-sglang.log)", 1, one.id)
    # neither file names a host: said so, not "the store holds 0 hosts"
    gap = next(g for g in zero.gaps if g.what.startswith("Which host"))
    assert gap.why == (f"{tmp_path / 'node0-sglang.log'} names no host, and no other file of the store names one: its "
                       "events are kept apart as `unknown host (node0-sglang.log)` and cannot be joined with another "
                       "file's (give each file its machine's name).")


def test_another_nodes_unrelated_incident_is_not_its_failure(tmp_path: Path) -> None:
    # node 1's server keeps running; a user's python3 in a session scope is OOM-killed there 5 min before node 0's
    # NCCL timeout: that is no failure of the server's node
    session_oom = "\n".join([
        "2025-05-26T10:05:00+0000 node-b kernel: python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE"
        "|__GFP_COMP), order=0, oom_score_adj=0",
        "2025-05-26T10:05:00+0000 node-b kernel: oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,"
        "mems_allowed=0-1,global_oom,task_memcg=/user.slice/user-1000.slice/session-123.scope,task=python3,pid=7001,"
        "uid=1000",
        "2025-05-26T10:05:00+0000 node-b kernel: Out of memory: Killed process 7001 (python3) total-vm:98712344kB, "
        "anon-rss:95373824kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:421376kB oom_score_adj:0",
        "2025-05-26T10:30:00+0000 node-b CRON[7100]: (root) CMD (command -v debian-sa1 > /dev/null && debian-sa1 1 1)",
        ""])
    quiet_b = "\n".join(node_b().splitlines()[:2]) + "\n" + session_oom
    store = _store(tmp_path, **{"node-a": node_a(), "node-b": quiet_b})
    incs = build_incidents(store)
    assert any(i.hosts == ("node-b",) and "session-123" in i.id for i in incs)
    a = next(i for i in incs if i.hosts == ("node-a",))
    (peer,) = a.nodes.nodes
    assert (peer.host, peer.incident) == ("node-b", None)
    out = _summary(tmp_path, a.id)
    assert "The first node to fail" not in out
    assert ("**No other node failed in the logs.** This host is node 0 of a 2-node server (`--dist-init-addr "
            f"{ADDR}`). `node-b` (node 1) logged no failure from 09:40:14 to the end of its ingested logs, 10:30:00 "
            "UTC.") in out, out
