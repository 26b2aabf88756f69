"""A server in a Kubernetes pod killed by the kubelet: its liveness probe failed (a server still loading its model
answers no probe, refused connections), the kubelet's own line is the cause, the container's death and the
crash-loop back-off its consequences; the pod is down until it is ready again, and a crash loop is told once."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main
from forensics.casts import CASTS

UID = "93e17ecc-ab55-461a-b526-29248d2554ad"
C1 = "05657a9c673d612aedd955a65136ccca36b82ba987831de7844cdc0238f1d707"
C2 = "c6f825e51b97cba5742a8a857c789ed287ecd4bec7775e92473559d56026ef09"
POD = 'pod="inference/sglang-llama-0"'
REFUSED = ('output="Get \\"http://10.244.0.14:30000/health\\": dial tcp 10.244.0.14:30000: connect: '
           'connection refused"')
TIMEOUT = 'output="Get \\"http://10.244.0.14:30000/health\\": context deadline exceeded"'


def _k(hms: str, src: str, msg: str) -> str:
    return f"May 25 {hms} gpu-node-3 kubelet[4052]: I0525 {hms}.100000    4052 {src}] {msg}"


def _pleg(hms: str, what: str, cid: str) -> str:
    return _k(hms, "kubelet.go:2439", f'"SyncLoop (PLEG): event for pod" {POD} '
              f'event={{"ID":"{UID}","Type":"{what}","Data":"{cid}"}}')


def _probe(hms: str, output: str = REFUSED) -> str:
    return _k(hms, "prober.go:107", f'"Probe failed" probeType="Liveness" {POD} podUID="{UID}" containerName="sglang" '
              f'probeResult="failure" {output}')


def _kill(hms: str, cid: str) -> list[str]:
    return [_k(hms, "kuberuntime_manager.go:1027", f'"Message for Container of pod" containerName="sglang" '
               f'containerStatusID={{"Type":"containerd","ID":"{cid}"}} {POD} '
               f'containerMessage="Container sglang failed liveness probe, will be restarted"'),
            _k(hms, "kuberuntime_container.go:808", f'"Killing container with a grace period" {POD} podUID="{UID}" '
               f'containerName="sglang" containerID="containerd://{cid}" gracePeriod=30')]


def _ready(hms: str) -> str:
    return _k(hms, "kubelet.go:2542", f'"SyncLoop (probe)" probe="readiness" status="ready" {POD}')


BACKOFF = ('May 25 20:16:00 gpu-node-3 kubelet[4052]: E0525 20:16:00.412207    4052 pod_workers.go:1301] "Error syncing '
           'pod, skipping" err="failed to \\"StartContainer\\" for \\"sglang\\" with CrashLoopBackOff: \\"back-off 10s '
           f'restarting failed container=sglang pod=sglang-llama-0_inference({UID})\\"" {POD} podUID="{UID}"')

LOADING = [_pleg("20:10:02", "ContainerStarted", C1),
           _probe("20:12:09"), _probe("20:12:19"), _probe("20:12:29"), *_kill("20:12:29", C1),
           _pleg("20:13:00", "ContainerDied", C1), _pleg("20:13:01", "ContainerStarted", C2),
           _probe("20:15:09"), _probe("20:15:19"), _probe("20:15:29"), *_kill("20:15:29", C2),
           _pleg("20:16:00", "ContainerDied", C2), BACKOFF]

SGLANG = """\
[2025-05-25 20:10:05] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-70B-Instruct', tp_size=4, port=30000)
[2025-05-25 20:10:19 TP0] Load weight begin. avail mem=78.50 GB
Loading safetensors checkpoint shards:  30% Completed | 9/30 [01:12<02:48,  8.02s/it]
"""


def _run(tmp_path: Path, files: dict[str, str], *args: str, code: int = 0) -> str:
    store = ["--store", str(tmp_path / "store")]
    if not (tmp_path / "store").exists():
        for name, text in files.items():
            (tmp_path / name).write_text(text)
        r = CliRunner().invoke(main, [*store, "ingest", "--year", "2025", *(str(tmp_path / n) for n in files)])
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, [*store, *args])
    assert r.exit_code == code, r.output
    return r.output


def _section(report: str, head: str, until: str) -> str:
    """The report's text from its `## head` section to the next `## until`."""
    return report.split(f"## {head}", 1)[1].split(f"## {until}")[0]


def test_a_server_killed_by_its_liveness_probe_while_it_loads(tmp_path: Path) -> None:
    files = {"journal.log": "\n".join(LOADING) + "\n", "sglang-llama-0.log": SGLANG}
    head = _run(tmp_path, files, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["confirmed", "container sglang of pod inference/sglang-llama-0 killed by the kubelet: its "
                        "liveness probe found nothing listening (the server was still loading), twice"]
    report = _run(tmp_path, files, "report", "--incident", "2025-05-25")
    assert "The kubelet killed container sglang of pod inference/sglang-llama-0 at 20:12:29 (`" in report
    assert ("journal.log:5`, `Container sglang failed liveness probe, will be restarted`) after 3 failed liveness probes from "
            "20:12:09, each refused a connection") in report
    assert "(the server on this host started loading at 20:10:19: SGLang starts loading weights" in report
    assert "The same happened once more: at 20:15:29." in report      # the crash loop told once
    assert "**Also" not in report
    assert "1 service failed on `gpu-node-3`: `pod inference/sglang-llama-0` at 20:13:00 UTC, and on its restart." in report
    # the pod is what went down: from its first container's death, never ready again in the logs
    assert ("| `pod inference/sglang-llama-0` | 20:13:00 UTC | a container of inference/sglang-llama-0 died | "
            "not within the logs | at least 3 min (until the logs end); restarted once, down again before it was "
            "ready |") in report
    # the probe's output is read as written, not as klog quotes it
    summary = report.split("## Impact")[0]
    assert 'refused a connection (`Get "http://10.244.0.14:30000/health": dial tcp' in summary
    actions = _section(report, "Recommended actions", "Appendix")
    assert "`kubectl -n inference get pod sglang-llama-0 -o yaml | grep -A8 -E \"livenessProbe|startupProbe\"`" in actions
    assert f"(`container {C1[:12]}`)" in actions and "cri-containerd-" not in actions


def test_a_pod_is_back_when_it_is_ready_again(tmp_path: Path) -> None:
    lines = [_pleg("20:00:02", "ContainerStarted", C1), _ready("20:06:40"),
             _probe("20:30:09", TIMEOUT), _probe("20:30:19", TIMEOUT), _probe("20:30:29", TIMEOUT),
             *_kill("20:30:29", C1), _pleg("20:31:00", "ContainerDied", C1), _pleg("20:31:01", "ContainerStarted", C2),
             # another workload's job container finishing in the window: no outage of this incident
             _pleg("20:31:30", "ContainerDied", C2[::-1]).replace(POD, 'pod="batch/nightly-eval-29kq7"'),
             _ready("20:37:31")]
    files = {"journal.log": "\n".join(lines) + "\n"}
    head = _run(tmp_path, files, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["confirmed", "container sglang of pod inference/sglang-llama-0 killed by the kubelet: its "
                        "liveness probe failed"]
    report = _run(tmp_path, files, "report", "--incident", "2025-05-25")
    assert ("after its liveness probe failed failureThreshold times in a row (3 failures logged from 20:30:09, the "
            "last: `Get \"http://10.244.0.14:30000/health\": context deadline exceeded`)") in report
    assert "found nothing listening" not in report           # a timed-out probe is no server still loading
    assert ("| `pod inference/sglang-llama-0` | 20:31:00 UTC | a container of inference/sglang-llama-0 died | "
            "20:37:31 UTC | 6 min 31 s |") in report
    assert "pod batch/" not in _section(report, "Impact", "Timeline")


def test_a_readiness_probe_alone_kills_nothing(tmp_path: Path) -> None:
    line = _probe("20:12:09").replace('probeType="Liveness"', 'probeType="Readiness"')
    out = _run(tmp_path, {"journal.log": line + "\n"}, "incidents", "--date", "2025-05-25", code=1)
    assert "no incident" in out


def test_the_scope_of_a_container_the_kubelet_names() -> None:
    cast = CASTS["container_unit"]
    assert cast(f"containerd://{C1}") == f"cri-containerd-{C1}.scope"
    assert cast(f'{{"Type":"containerd","ID":"{C1}"}}') == f"cri-containerd-{C1}.scope"
    assert cast(f'{{"Type":"cri-o","ID":"{C1}"}}') == f"crio-{C1}.scope"
    assert cast(f"docker://{C1}") == f"docker-{C1}.scope"
    assert cast(f"rkt://{C1}") is None and cast("containerd://abc") is None
    assert CASTS["unquote"]('Get \\"http://x\\": a \\\\ b') == 'Get "http://x": a \\ b'


# ----------------------------------------------------------------------------------------------------------
# a container the kernel OOM killer killed: the kernel names its cgroup, the kubelet its pod

PODSLICE = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice"


def _kernel(hms: str, msg: str) -> str:
    return f"May 25 {hms} gpu-node-3 kernel: {msg}"


def _oom_report(hms: str, cid: str, *, node: bool = False) -> list[str]:
    """The kernel's OOM report of pid 18811 in container `cid`: the pod's limit reached, or (`node`) the node out
    of memory."""
    limit = "global_oom" if node else f"oom_memcg={PODSLICE}"
    return [_kernel(hms, "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=936"),
            _kernel(hms, "CPU: 12 PID: 18811 Comm: python3 Not tainted 5.15.0-105-generic #115-Ubuntu"),
            *([] if node else [_kernel(hms, "memory: usage 67108864kB, limit 67108864kB, failcnt 1234"),
                               _kernel(hms, f"Memory cgroup stats for {PODSLICE}:")]),
            _kernel(hms, "Tasks state (memory values in pages):"),
            _kernel(hms, "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name"),
            _kernel(hms, "[  18811]     0 18811 20000000 16700000 140000000        0           936 python3"),
            _kernel(hms, f"oom-kill:constraint=CONSTRAINT_{'NONE' if node else 'MEMCG'},nodemask=(null),"
                         f"cpuset=cri-containerd-{cid}.scope,mems_allowed=0-1,{limit},task_memcg={PODSLICE}/"
                         f"cri-containerd-{cid}.scope,task=python3,pid=18811,uid=0"),
            _kernel(hms, f"{'Out of memory' if node else 'Memory cgroup out of memory'}: Killed process 18811 "
                         "(python3) total-vm:80000000kB, anon-rss:66800000kB, file-rss:0kB, shmem-rss:0kB, UID:0 "
                         "pgtables:136718kB oom_score_adj:936"),
            f"May 25 {hms} gpu-node-3 systemd[1]: cri-containerd-{cid}.scope: A process of this unit has been killed "
            "by the OOM killer."]


def _oom_lines(node: bool = False) -> list[str]:
    return [_pleg("20:10:02", "ContainerStarted", C1), _ready("20:12:40"), *_oom_report("20:14:02", C1, node=node),
            _pleg("20:14:03", "ContainerDied", C1), _pleg("20:14:04", "ContainerStarted", C2), _ready("20:17:31")]


def test_a_container_that_reached_its_pods_memory_limit(tmp_path: Path) -> None:
    files = {"journal.log": "\n".join(_oom_lines()) + "\n", "sglang-llama-0.log": SGLANG}
    head = _run(tmp_path, files, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["confirmed", "a container of pod inference/sglang-llama-0 killed by the kernel OOM killer: "
                        "it reached the pod's memory limit, 64.0 GiB"]
    report = _run(tmp_path, files, "report", "--incident", "2025-05-25")
    assert (f"The kernel OOM killer killed pid 18811 (python3) in container {C1[:12]} of pod inference/sglang-llama-0 "
            "at 20:14:02 (`") in report
    assert ("journal.log:3`): it reached the pod's memory limit, 64.0 GiB (memory cgroup /kubepods.slice/"
            "kubepods-burstable.slice/kubepods-burstable-pod93e17ecc\\_ab55") in report
    assert "journal.log:13`); Kubernetes reports it as `OOMKilled`" in report
    # the pod is what went down, not the container's scope systemd names; it is back once ready again
    impact = _section(report, "Impact", "Timeline")
    assert ("| `pod inference/sglang-llama-0` | 20:14:03 UTC | a container of inference/sglang-llama-0 died | "
            "20:17:31 UTC | 3 min 28 s |") in impact
    assert "cri-containerd-" not in impact
    assert "1 service failed on `gpu-node-3`: `pod inference/sglang-llama-0` at 20:14:03 UTC." in report
    # systemd's note on the scope is told with the kill, not as a cause of its own
    assert "It explains: cri-containerd-" in report and "**Also" not in report
    # the scope is gone with the container: the commands are kubectl's, not systemctl's on the scope
    actions = _section(report, "Recommended actions", "Appendix")
    assert actions.startswith('\n\n1. `kubectl -n inference describe pod sglang-llama-0 | grep -A8 "Last State"`')
    assert "systemctl show cri-containerd" not in actions and "journalctl -u cri-containerd" not in actions
    # a journal whose systemd lines name a container's scope alone is no `journalctl -u` export of it
    timeline = _section(report, "Timeline", "What the key lines reveal")
    assert "| `journal.log:1` |  | a container of inference/sglang-llama-0 started |" in timeline


def test_a_container_killed_when_the_node_ran_out_of_memory(tmp_path: Path) -> None:
    files = {"journal.log": "\n".join(_oom_lines(node=True)) + "\n"}
    head = _run(tmp_path, files, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["confirmed", "a container of pod inference/sglang-llama-0 killed by the kernel OOM killer: "
                        "the node ran out of memory"]
    report = _run(tmp_path, files, "report", "--incident", "2025-05-25")
    assert "journal.log:3`; a Burstable pod, oom\\_score\\_adj 936)" in report
    assert "kubectl describe node gpu-node-3" in report


def test_a_kernel_oom_kill_of_another_pods_container_explains_no_death(tmp_path: Path) -> None:
    lines = [*_oom_report("20:14:02", C2), _pleg("20:14:03", "ContainerDied", C1)]
    head = _run(tmp_path, {"journal.log": "\n".join(lines) + "\n"}, "incidents").rstrip("\n").split("\t")
    assert head[4] == f"kernel OOM killer killed pid 18811 (python3) on gpu-node-3 (in container {C2[:12]})"


def test_the_pod_and_container_a_cgroup_path_names() -> None:
    from forensics.kubepods import container_id_of, parse

    uid = "eded8c65-6e8e-4c6e-a889-3e427565c740"
    sliced = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
    k = parse(f"/kubepods.slice/kubepods-burstable.slice/{sliced}/cri-containerd-{C1}.scope")
    assert (k.pod_uid, k.qos_class, k.container_id, k.level) == (uid, "Burstable", C1, "container")
    k = parse(f"/kubepods.slice/kubepods-burstable.slice/{sliced}")
    assert (k.pod_uid, k.container_id, k.level) == (uid, None, "pod")
    # cgroupfs driver, a Guaranteed pod (right under kubepods), CRI-O's nested `container`, kind's nesting
    assert parse(f"/kubepods/pod{uid}/{C1}") == parse(f"/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/"
                                                     f"crio-{C1}.scope/container")
    assert parse(f"/kubepods/pod{uid}/{C1}").qos_class == "Guaranteed"
    assert parse(f"/kubepods/besteffort/pod{uid}/{C1}").qos_class == "BestEffort"
    assert parse(f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
                 f"kubelet-kubepods-besteffort-pod{uid.replace('-', '_')}.slice/cri-containerd-{C1}.scope") \
        .qos_class == "BestEffort"
    assert parse("/system.slice/sglang.service") is None and parse(f"/system.slice/docker-{C1}.scope") is None
    assert container_id_of(f"cri-containerd-{C1}.scope") == C1 and container_id_of("sglang.service") is None
    assert container_id_of(C1) is None    # a bare id is no scope: the kubelet's own field carries it


# ----------------------------------------------------------------------------------------------------------
# a pod the kubelet evicted: the node's disk or memory ran low


def _evm(hms: str, src: str, msg: str) -> str:
    return _k(hms, f"eviction_manager.go:{src}", msg)


def _eviction(resource: str) -> list[str]:
    reclaim = f'"Eviction manager: attempting to reclaim" resourceName="{resource}"'
    return [_pleg("20:10:02", "ContainerStarted", C1), _ready("20:12:40"),
            _evm("20:38:50", "369", reclaim), _evm("20:39:00", "369", reclaim), _evm("20:39:50", "369", reclaim),
            _evm("20:39:50", "378", f'"Eviction manager: must evict pod(s) to reclaim" resourceName="{resource}"'),
            _evm("20:39:50", "368", '"Eviction manager: pods ranked for eviction" pods=["inference/sglang-llama-0",'
                                    '"kube-system/kube-proxy-f94hx"]'),
            _k("20:39:50", "kuberuntime_container.go:808", f'"Killing container with a grace period" {POD} '
               f'podUID="{UID}" containerName="sglang" containerID="containerd://{C1}" gracePeriod=0'),
            _evm("20:39:51", "595", f'"Eviction manager: pod is evicted successfully" {POD}'),
            _pleg("20:39:52", "ContainerDied", C1),
            _evm("20:40:00", "369", reclaim)]


def test_a_pod_evicted_when_the_nodes_disk_ran_low(tmp_path: Path) -> None:
    files = {"journal.log": "\n".join(_eviction("ephemeral-storage")) + "\n"}
    head = _run(tmp_path, files, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["confirmed", "pod inference/sglang-llama-0 evicted by the kubelet: the node's disk ran low "
                        "(ephemeral-storage)"]
    report = _run(tmp_path, files, "report", "--incident", "2025-05-25")
    assert ("logged `must evict pod(s) to reclaim ephemeral-storage` at 20:39:50, after trying to reclaim it without "
            "evicting (unused images, dead containers) since 20:38:50 (3 passes logged)") in report
    assert "a 70B model is 140 GB in bf16" in report
    impact = _section(report, "Impact", "Timeline")
    assert ("| `pod inference/sglang-llama-0` | 20:39:52 UTC | a container of inference/sglang-llama-0 died | "
            "not within the logs |") in impact
    analysis = _section(report, "Analysis", "Recommended actions")
    assert 'kubectl -n inference describe pod sglang-llama-0 | grep -A3 -E "Reason|Message"' in analysis
    actions = _section(report, "Recommended actions", "Appendix")
    assert 'kubectl describe node gpu-node-3 | grep -A12 -E "Conditions|Allocated resources"' in actions


def test_a_pod_evicted_when_the_nodes_memory_ran_low(tmp_path: Path) -> None:
    files = {"journal.log": "\n".join(_eviction("memory")) + "\n"}
    head = _run(tmp_path, files, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["confirmed", "pod inference/sglang-llama-0 evicted by the kubelet: the node ran low on memory"]


def test_a_pod_evicted_for_its_own_limits(tmp_path: Path) -> None:
    lines = [ln for ln in _eviction("ephemeral-storage") if "Eviction manager: pod is" in ln or "PLEG" in ln]
    head = _run(tmp_path, {"journal.log": "\n".join(lines) + "\n"}, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["likely", "pod inference/sglang-llama-0 evicted by the kubelet"]


def test_the_eviction_managers_pressure_alone_is_no_incident(tmp_path: Path) -> None:
    """Image garbage collection freed enough: the kubelet logs `attempting to reclaim` and evicts nothing."""
    lines = [ln for ln in _eviction("ephemeral-storage") if "attempting to reclaim" in ln]
    out = _run(tmp_path, {"journal.log": "\n".join(lines) + "\n"}, "incidents", "--date", "2025-05-25", code=1)
    assert "no incident" in out


# ----------------------------------------------------------------------------------------------------------
# a GPU container that cannot start: the NVIDIA container runtime's hook fails on the host


def _hook_failure(hms: str, error: str) -> list[str]:
    """containerd's and the kubelet's lines for one start of the container failing in nvidia-container-cli."""
    hook = ("failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
            "failed: unable to start container process: error during container init: error running hook #0: error "
            "running hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'")
    return [f'May 25 {hms} gpu-node-3 containerd[1811]: time="2025-05-25T{hms}.801117Z" level=error '
            f'msg="StartContainer for \\"{C2[:12]}\\" failed" error="{hook}\\nnvidia-container-cli: {error}: unknown"',
            _k(hms, "pod_workers.go:1301", f'"Error syncing pod, skipping" err="failed to \\"StartContainer\\" for '
               f'\\"sglang\\" with RunContainerError: \\"{hook}\\\\\\nnvidia-container-cli: {error}: unknown\\"" '
               f'{POD} podUID="{UID}"')]


def test_a_gpu_container_the_nvidia_hook_cannot_start(tmp_path: Path) -> None:
    lines = [*_hook_failure("20:21:14", "initialization error: nvml error: driver not loaded"), BACKOFF.replace(
        "20:16:00", "20:21:26"), *_hook_failure("20:21:40", "initialization error: nvml error: driver not loaded")]
    head = _run(tmp_path, {"journal.log": "\n".join(lines) + "\n"}, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["confirmed", "a GPU container could not start on gpu-node-3 (pod inference/sglang-llama-0): "
                        "nvidia-container-cli initialization error: nvml error: driver not loaded"]
    report = _run(tmp_path, {}, "report", "--incident", "2025-05-25")
    assert ("`initialization error: nvml error: driver not loaded` (the NVIDIA kernel module is not loaded on the "
            "host: a kernel upgraded without the module rebuilt for it (DKMS)") in report
    assert "(3 more logged)" in report and "**Also" not in report


def test_a_gpu_container_started_after_a_driver_upgrade(tmp_path: Path) -> None:
    """The hook's `driver/library version mismatch` is the driver mismatch, its back-off a consequence."""
    lines = [*_hook_failure("20:21:14", "initialization error: nvml error: driver/library version mismatch"),
             BACKOFF.replace("20:16:00", "20:21:26")]
    head = _run(tmp_path, {"journal.log": "\n".join(lines) + "\n"}, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["confirmed", "NVIDIA driver libraries do not match the loaded kernel module"]
    report = _run(tmp_path, {}, "report", "--incident", "2025-05-25")
    assert ("It explains: NVML: driver/library version mismatch; kubelet backing off 10s before restarting container "
            "sglang of inference/sglang-llama-0 (CrashLoopBackOff).") in report


def test_a_gpu_container_given_a_gpu_that_fell_off_the_bus(tmp_path: Path) -> None:
    """The hook's `unknown device` after the GPU fell off the bus is the fall's consequence: one conclusion."""
    kernel = ["May 25 20:12:03 gpu-node-3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
              "GPU has fallen off the bus.",
              "May 25 20:12:03 gpu-node-3 kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."]
    device = "device error: GPU-6c1e3f1a-4d2b-8e9f-0a1b-2c3d4e5f6a7b: unknown device"
    lines = [*kernel, *_hook_failure("20:12:40", device), BACKOFF.replace("20:16:00", "20:12:52"),
             *_hook_failure("20:13:10", device)]
    head = _run(tmp_path, {"journal.log": "\n".join(lines) + "\n"}, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["confirmed", "GPU 0000:3b:00 fell off the bus"]
    report = _run(tmp_path, {}, "report", "--incident", "2025-05-25")
    assert ("A GPU container given it could not start: the NVIDIA container runtime's hook failed at 20:12:40 "
            f"(`{device}`, `") in report
    assert "**Also" not in report and "(CrashLoopBackOff)." in report.split("It explains: ", 1)[1].split("\n")[0]


CRASH = """\
[2025-05-25 20:10:05] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-70B-Instruct', tp_size=4, port=30000, mem_fraction_static=0.92)
[2025-05-25 20:10:19 TP0] Load weight begin. avail mem=78.50 GB
[2025-05-25 20:12:30] The server is fired up and ready to roll!
[2025-05-25 20:16:40 TP2] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2012, in run_scheduler_process
    scheduler.event_loop_overlap()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 2 has a total capacity of 79.19 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 78.06 GiB memory in use. Of the allocated memory 74.10 GiB is allocated by PyTorch, and 1.52 GiB is reserved by PyTorch but unallocated.

[2025-05-25 20:16:40] Received sigquit from a child process. It usually means the child failed.
"""


def test_a_pod_whose_server_crashed_is_told_with_the_crash(tmp_path: Path) -> None:
    """`kubectl logs` of the pod names no pod: its container's death two seconds after the server's crash, on the
    only host, is the crash's consequence (likely), told in the CUDA OOM's conclusion, and the pod is down."""
    lines = [_pleg("20:10:02", "ContainerStarted", C1), _ready("20:12:40"), _pleg("20:16:42", "ContainerDied", C1),
             _pleg("20:16:43", "ContainerStarted", C2), BACKOFF.replace("20:16:00", "20:17:10")]
    files = {"journal.log": "\n".join(lines) + "\n", "sglang-llama-0.log": CRASH}
    head = _run(tmp_path, files, "incidents").rstrip("\n").split("\t")
    assert head[4].startswith("CUDA out of memory")
    report = _run(tmp_path, files, "report", "--incident", "2025-05-25")
    assert ("The server ran in pod inference/sglang-llama-0 (likely: the host and the time tie them): its container "
            "died at 20:16:42 (`") in report
    assert "**Also" not in report
    impact = _section(report, "Impact", "Timeline")
    assert "| `pod inference/sglang-llama-0` | 20:16:42 UTC | a container of inference/sglang-llama-0 died |" in impact


def test_a_pod_that_died_long_after_a_crash_is_not_its_consequence(tmp_path: Path) -> None:
    lines = [_pleg("20:19:42", "ContainerDied", C1)]
    files = {"journal.log": "\n".join(lines) + "\n", "sglang-llama-0.log": CRASH}
    report = _run(tmp_path, files, "report", "--incident", "2025-05-25")
    assert "The server ran in pod" not in report


# -- a GPU the NVIDIA device plugin marks unhealthy, and the pods the kubelet then refuses

GPU_UUID = "GPU-6c1e3f1a-4d2b-8e9f-0a1b-2c3d4e5f6a7b"
PLUGIN = f"""\
I0525 20:02:11.100000       1 main.go:256] Starting NVIDIA Device Plugin
I0525 20:02:11.220000       1 server.go:125] Registered device plugin for 'nvidia.com/gpu' with Kubelet
I0525 20:17:03.512345       1 health.go:151] Processing event {{Device:{{Handle:0xc000212008}} EventType:8 EventData:79 GpuInstanceId:4294967295 ComputeInstanceId:4294967295}}
I0525 20:17:03.512400       1 health.go:159] XidCriticalError: Xid=79 on Device={GPU_UUID}; marking device as unhealthy.
I0525 20:17:03.512500       1 server.go:301] 'nvidia.com/gpu' device marked unhealthy: {GPU_UUID}
"""
XID79 = [_kernel("20:17:03", "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
         _kernel("20:17:03", "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.")]


def _refused(hms: str, pod: str, available: int) -> str:
    return _k(hms, "kubelet.go:2395", f'"Pod admission denied" podUID="5b0a2c8e-7d1f-4e8a-9c3b-2f6d8e1a4b7c" '
              f'pod="inference/{pod}" reason="UnexpectedAdmissionError" message="Allocate failed due to requested '
              f'number of devices unavailable for nvidia.com/gpu. Requested: 8, Available: {available}, which is '
              'unexpected"')


def test_a_gpu_the_device_plugin_marked_unhealthy_after_it_fell_off_the_bus(tmp_path: Path) -> None:
    journal = [_pleg("20:10:02", "ContainerStarted", C1), *XID79, _pleg("20:17:09", "ContainerDied", C1),
               _refused("20:25:12", "sglang-llama-1", 7)]
    files = {"journal.log": "\n".join(journal) + "\n", "nvidia-device-plugin.log": PLUGIN}
    head = _run(tmp_path, files, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["confirmed", "GPU 0000:3b:00 fell off the bus"]     # one incident: the Xid is the cause
    report = _run(tmp_path, files, "report", "--incident", "2025-05-25")
    summary = report.split("## Impact")[0]
    assert f"The NVIDIA device plugin marked the GPU ({GPU_UUID}) unhealthy at 20:17:03 (`" in summary
    assert "nvidia-device-plugin.log:4`, Xid 79): the kubelet no longer offers it to pods" in summary
    assert "The kubelet then refused pod inference/sglang-llama-1 at 20:25:12 (`" in summary
    assert ("journal.log:5`) for lack of nvidia.com/gpu (8 asked for, 7 healthy and free) "
            "(`UnexpectedAdmissionError`).") in summary
    assert "**Also" not in report
    # the plugin's `device marked unhealthy` line repeats the mark: no event of its own
    events = _run(tmp_path, files, "events", "--kind", "gpu_unhealthy")
    assert events.count("GPU marked unhealthy") == 1


def test_a_gpu_marked_unhealthy_when_no_kernel_log_was_copied(tmp_path: Path) -> None:
    journal = [_pleg("20:10:02", "ContainerStarted", C1), _refused("20:25:12", "sglang-llama-1", 7),
               _refused("20:26:40", "sglang-llama-2", 7)]
    files = {"journal.log": "\n".join(journal) + "\n", "nvidia-device-plugin.log": PLUGIN}
    head = _run(tmp_path, files, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["confirmed", f"{GPU_UUID} on gpu-node-3: Xid 79, marked unhealthy by the NVIDIA device plugin"]
    report = _run(tmp_path, files, "report", "--incident", "2025-05-25")
    summary = report.split("## Impact")[0]
    assert "GPU has fallen off the bus (PCIe link, power or hardware failure)" in summary   # the Xid's meaning
    assert "No kernel log covering the moment was ingested" in summary
    assert ("journal.log:2`) (and 1 more: sglang-llama-2) for lack of nvidia.com/gpu (8 asked for, 7 "
            "healthy and free)") in summary
    actions = _section(report, "Recommended actions", "Appendix")
    assert 'grep -E "NVRM: Xid"' in actions and f"nvidia-smi -q -i {GPU_UUID}" in actions


def test_a_pod_refused_its_gpus_with_nothing_to_say_why(tmp_path: Path) -> None:
    files = {"journal.log": _refused("20:25:12", "sglang-llama-1", 0) + "\n"}
    head = _run(tmp_path, files, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["likely", "pod inference/sglang-llama-1 refused by the kubelet on gpu-node-3: "
                                  "UnexpectedAdmissionError (nvidia.com/gpu)"]
    report = _run(tmp_path, files, "report", "--incident", "2025-05-25")
    assert "No line of the device plugin marking a GPU unhealthy was ingested" in report
    assert "kubectl -n gpu-operator logs -l app=nvidia-device-plugin-daemonset --timestamps" in report


def _exec_probe(hms: str) -> list[str]:
    """A liveness exec probe (`curl -f localhost:30000/health`) that failed: klog prints its output as a multi-line
    value, one journal entry a line."""
    return [_k(hms, "prober.go:107", f'"Probe failed" probeType="Liveness" {POD} podUID="{UID}" containerName="sglang" '
               'probeResult="failure" output=<'),
            f"May 25 {hms} gpu-node-3 kubelet[4052]: \tcurl: (7) Failed to connect to localhost port 30000 after 0 ms: "
            "Connection refused",
            f"May 25 {hms} gpu-node-3 kubelet[4052]:  >"]


def test_an_exec_probes_output_on_the_lines_after_it_is_read(tmp_path: Path) -> None:
    lines = [_pleg("20:10:02", "ContainerStarted", C1), *_exec_probe("20:12:09"), *_exec_probe("20:12:19"),
             *_exec_probe("20:12:29"), *_kill("20:12:29", C1), _pleg("20:13:00", "ContainerDied", C1)]
    files = {"journal.log": "\n".join(lines) + "\n", "sglang-llama-0.log": SGLANG}
    head = _run(tmp_path, files, "incidents").rstrip("\n").split("\t")
    assert head[3:] == ["confirmed", "container sglang of pod inference/sglang-llama-0 killed by the kubelet: its "
                        "liveness probe found nothing listening (the server was still loading)"]
    # one event a probe, its record the three lines, its output the curl's line
    events = _run(tmp_path, files, "events", "--kind", "health_check_failed")
    assert events.count("Liveness probe failed for sglang-llama-0 (sglang)") == 3
    assert "journal.log:2-4" in events and "connection refused" not in events.replace("Liveness", "")
    report = _run(tmp_path, files, "report", "--incident", "2025-05-25")
    assert ("after 3 failed liveness probes from 20:12:09, each refused a connection (`curl: (7) Failed to connect "
            "to localhost port 30000 after 0 ms: Connection refused`)") in report
