"""Kubernetes pods in cgroup paths. The kubelet lays its pods out as `kubepods[/<qos>]/pod<uid>/<container>`,
with the systemd cgroup driver as slices (`/kubepods.slice/kubepods-burstable.slice/
kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope`) and with cgroupfs as plain directories
(`/kubepods/burstable/pod<uid>/<id>`); a Guaranteed pod sits right under `kubepods`. The kernel's OOM report
names such paths (`oom_memcg=`, `task_memcg=`), which this module reads back into the pod's uid, its QoS class,
the container's id (the 64 hex digits the kubelet's `ContainerDied` prints) and the level the limit was at."""

from __future__ import annotations

import re
from dataclasses import dataclass

QOS_CLASSES = {"burstable": "Burstable", "besteffort": "BestEffort", "": "Guaranteed"}

_POD = re.compile(r"(?:^|kubepods-(?:(?P<qos>burstable|besteffort)-)?)pod(?P<uid>[0-9a-f]{8}[-_][0-9a-f]{4}[-_]"
                  r"[0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$")
_QOS = re.compile(r"(?:^|-)(burstable|besteffort)(?:\.slice)?$")
# a container's cgroup: the runtime's scope (`cri-containerd-`, `crio-`, `docker-`, podman's `libpod-`) or the bare
# id (cgroupfs); CRI-O with cgroup v2 may nest the process one level deeper (`crio-<id>.scope/container`)
_CONTAINER = re.compile(r"(?:(?:cri-containerd|crio|docker|libpod)-)?(?P<id>[0-9a-f]{64})(?:\.scope)?")
_SCOPE = re.compile(r"(?:cri-containerd|crio|docker|libpod)-(?P<id>[0-9a-f]{64})\.scope")


@dataclass(frozen=True)
class KubeCgroup:
    """Where in the kubelet's tree a cgroup path points."""
    pod_uid: str                  # `93e17ecc-ab55-461a-b526-29248d2554ad`, as the kubelet prints it
    qos_class: str                # Guaranteed, Burstable, BestEffort
    container_id: str | None      # None: the pod's own cgroup (its limit is the sum of its containers')

    @property
    def level(self) -> str:
        return "pod" if self.container_id is None else "container"


def parse(path: object) -> KubeCgroup | None:
    """The pod (and container) a cgroup path names, or None when it is not under the kubelet's `kubepods`."""
    if not path:
        return None
    parts = str(path).strip().strip("/").split("/")
    start = next((i for i, p in enumerate(parts) if "kubepods" in p), None)   # kind nests it: kubelet-kubepods.slice
    if start is None:
        return None
    qos = ""
    for i in range(start, len(parts)):
        m = _POD.search(parts[i])
        if m:
            qos = m.group("qos") or qos
            cid = next((c.group("id") for c in map(_CONTAINER.fullmatch, parts[i + 1:i + 3]) if c), None)
            return KubeCgroup(m.group("uid").replace("_", "-"), QOS_CLASSES[qos], cid)
        q = _QOS.search(parts[i])
        if q:
            qos = q.group(1)
    return None


def scope_id(unit: object) -> str | None:
    """The container id of a container's systemd scope (`cri-containerd-<64 hex>.scope`), None for any other unit."""
    m = _SCOPE.fullmatch(unit) if isinstance(unit, str) and unit.endswith(".scope") else None
    return m.group("id") if m else None


def container_id_of(name: object) -> str | None:
    """The container id in a kubepods cgroup path or in a container's scope (`cri-containerd-<id>.scope`)."""
    if not name:
        return None
    s = str(name)
    if "/" not in s:
        return scope_id(s)
    kc = parse(s) if "kubepods" in s else None
    return kc.container_id if kc else None
