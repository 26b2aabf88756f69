"""A server in a Kubernetes pod killed by the kubelet: its liveness probe failed (a server still loading its model
answers no probe, refused connections), the kubelet's own line is the cause, the container's death and the
crash-loop back-off its consequences; the pod is down until it is ready again, and a crash loop is told once."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from forensics.cli import main
from forensics.match import CASTS

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
    actions = report.split("## Recommended actions", 1)[1].split("## Appendix")[0]
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
    assert "pod batch/" not in report.split("## Impact")[1].split("## Timeline")[0]


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
