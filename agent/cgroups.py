"""Which pod and container a process belongs to, from its /proc/<pid>/cgroup.

NVML reports GPU processes by host PID. The kubelet puts every container in a cgroup whose path names
the pod UID and the container ID, so reading the process's cgroup file attributes it to a pod without
asking the API server or the kubelet. The path's shape varies with the setup; all of these occur:

cgroup v2, systemd driver (containerd, cri-o, docker via cri-dockerd):
    0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/
       cri-containerd-<id>.scope            (crio-<id>.scope, docker-<id>.scope)
    Guaranteed pods sit directly under kubepods.slice: kubepods-pod<uid>.slice.
cgroup v2 or v1, cgroupfs driver:
    /kubepods/besteffort/pod<uid-with-dashes>/<id>      (guaranteed: /kubepods/pod<uid>/<id>)
cgroup v1: one line per controller hierarchy ("4:memory:/kubepods/..."), normally all alike.
A kubelet with a custom cgroup root (kind, some distributions) nests the same shape deeper, e.g.
    /kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/...
Static pods have a 32-hex-digit UID (a hash of their manifest) instead of a UUID.

Read from inside a container with its own cgroup namespace (the default on cgroup v2, and Kubernetes
has no field to turn it off), another process's path is shown relative to the agent's own cgroup:
    0::/../../kubepods-besteffort-pod<uid>.slice/cri-containerd-<id>.scope
    0::/../../pod<uid>/<id>
so ".." segments are accepted in place of the kubepods prefix. A process in the reader's own cgroup
shows as "0::/", which attributes nothing; the agent's own container holds no GPU process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_UUID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# The pod segment: "pod<uid>" (cgroupfs) or "<prefix>-pod<uid>.slice" (systemd); requiring a start or
# a separator before "pod" keeps it from matching inside another word.
_POD_SEGMENT = re.compile(rf"(?:^|[-_])pod(?P<uid>{_UUID}|[0-9a-f]{{32}})(?:\.slice)?$")
# The container segment under the pod: a bare 64-hex id (cgroupfs) or "<runtime>-<id>.scope" (systemd).
_CONTAINER_SEGMENT = re.compile(
    r"^(?:(?P<prefix>cri-containerd|containerd|crio|docker)-)?(?P<id>[0-9a-f]{64})(?:\.scope)?$"
)
_RUNTIMES = {"cri-containerd": "containerd", "containerd": "containerd", "crio": "cri-o", "docker": "docker"}


@dataclass(frozen=True)
class PodRef:
    pod_uid: str
    # None when the process sits in the pod's cgroup itself rather than in one of its containers.
    container_id: str | None = None
    # "containerd", "cri-o" or "docker" when the path says so (systemd driver); None for cgroupfs.
    runtime: str | None = None
    qos: str | None = None  # "guaranteed", "burstable" or "besteffort"


def parse_cgroup(text: str) -> PodRef | None:
    """The pod a process belongs to, from the text of its cgroup file; None if it is not in a pod."""
    found: PodRef | None = None
    for line in text.splitlines():
        # "hierarchy-id:controllers:path"; the path itself may contain colons, hence maxsplit.
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        ref = parse_cgroup_path(parts[2])
        if ref is None:
            continue
        if ref.container_id is not None:
            return ref
        found = found or ref
    return found


def _container_of(after_pod: list[str]) -> tuple[str | None, str | None]:
    """(container id, runtime) named by the segment after the pod's, if there is one."""
    container = _CONTAINER_SEGMENT.match(after_pod[0]) if after_pod else None
    if container is None:
        return None, None
    return container.group("id"), _RUNTIMES.get(container.group("prefix") or "")


def parse_cgroup_path(path: str) -> PodRef | None:
    segments = [s for s in path.split("/") if s]
    for position, segment in enumerate(segments):
        pod = _POD_SEGMENT.search(segment)
        if pod is None:
            continue
        relative = ".." in segments
        if not relative and not any("kubepods" in s for s in segments[: position + 1]):
            # A "pod..." directory outside the kubelet's tree is not a Kubernetes pod.
            continue
        uid = pod.group("uid").replace("_", "-")
        container_id, runtime = _container_of(segments[position + 1 : position + 2])
        return PodRef(
            pod_uid=uid,
            container_id=container_id,
            runtime=runtime,
            qos=_qos([*segments[:position], segment[: pod.start()]]),
        )
    return None


def _qos(parents: list[str]) -> str | None:
    # Burstable and best-effort pods get their own parent cgroup; guaranteed ones sit under kubepods.
    # `parents` ends with the pod segment's own prefix, which names the class too with systemd
    # ("kubepods-besteffort-pod<uid>.slice"), the only hint left in a namespaced relative path.
    joined = "/".join(parents)
    if "besteffort" in joined:
        return "besteffort"
    if "burstable" in joined:
        return "burstable"
    if "kubepods" in joined:
        return "guaranteed"
    return None  # a relative path that does not reach up to kubepods: cannot tell


def resolve_pid(pid: int, host_proc: Path) -> PodRef | None:
    """The pod of a host PID; None when the process is not in a pod or has already gone."""
    try:
        text = (host_proc / str(pid) / "cgroup").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        # The process ended between NVML listing it and us reading it, or /proc is not the host's.
        return None
    return parse_cgroup(text)
