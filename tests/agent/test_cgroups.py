"""Process -> pod mapping from real cgroup files written under a temporary HOST_PROC."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cgroups import PodRef, parse_cgroup, resolve_pid

UID = "5f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f"
UID_SYSTEMD = UID.replace("-", "_")
CID = "9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
STATIC_UID = "3b0e5b4b2b0d4d8f8a1e6c7d9f0a1b2c"

# cgroup v1 as a docker-era kubelet with the cgroupfs driver wrote it: one line per hierarchy.
V1_CGROUPFS_DOCKER_BESTEFFORT = f"""\
12:pids:/kubepods/besteffort/pod{UID}/{CID}
11:memory:/kubepods/besteffort/pod{UID}/{CID}
10:devices:/kubepods/besteffort/pod{UID}/{CID}
9:cpu,cpuacct:/kubepods/besteffort/pod{UID}/{CID}
4:hugetlb:/kubepods/besteffort/pod{UID}/{CID}
1:name=systemd:/kubepods/besteffort/pod{UID}/{CID}
0::/
"""

# cgroup v1 with the systemd driver and containerd (e.g. Ubuntu 20.04 nodes).
V1_SYSTEMD_CONTAINERD_BURSTABLE = f"""\
12:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope
11:devices:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope
1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope
"""

# cgroup v2, systemd driver, containerd, guaranteed QoS (sits directly under kubepods.slice).
V2_SYSTEMD_CONTAINERD_GUARANTEED = f"0::/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope\n"

# cgroup v2, systemd driver, CRI-O (OpenShift and friends).
V2_SYSTEMD_CRIO_BURSTABLE = (
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/crio-{CID}.scope\n"
)

# cgroup v2, cgroupfs driver (k3s's default).
V2_CGROUPFS_BESTEFFORT = f"0::/kubepods/besteffort/pod{UID}/{CID}\n"

# cgroup v2 under cri-dockerd with systemd: docker-<id>.scope.
V2_SYSTEMD_DOCKER = (
    f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_SYSTEMD}.slice/docker-{CID}.scope\n"
)

# A kubelet with its own cgroup root (kind nodes nest kubepods under kubelet.slice).
V2_KIND_NESTED = (
    "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
    f"kubelet-kubepods-besteffort-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope\n"
)

# A static pod (its UID is a hash of the manifest, 32 hex digits).
V2_STATIC_POD = (
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_UID}.slice/cri-containerd-{CID}.scope\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            V1_CGROUPFS_DOCKER_BESTEFFORT,
            PodRef(pod_uid=UID, container_id=CID, runtime=None, qos="besteffort"),
            id="v1-cgroupfs-besteffort",
        ),
        pytest.param(
            V1_SYSTEMD_CONTAINERD_BURSTABLE,
            PodRef(pod_uid=UID, container_id=CID, runtime="containerd", qos="burstable"),
            id="v1-systemd-containerd-burstable",
        ),
        pytest.param(
            V2_SYSTEMD_CONTAINERD_GUARANTEED,
            PodRef(pod_uid=UID, container_id=CID, runtime="containerd", qos="guaranteed"),
            id="v2-systemd-containerd-guaranteed",
        ),
        pytest.param(
            V2_SYSTEMD_CRIO_BURSTABLE,
            PodRef(pod_uid=UID, container_id=CID, runtime="cri-o", qos="burstable"),
            id="v2-systemd-crio-burstable",
        ),
        pytest.param(
            V2_CGROUPFS_BESTEFFORT,
            PodRef(pod_uid=UID, container_id=CID, runtime=None, qos="besteffort"),
            id="v2-cgroupfs-besteffort",
        ),
        pytest.param(
            V2_SYSTEMD_DOCKER,
            PodRef(pod_uid=UID, container_id=CID, runtime="docker", qos="besteffort"),
            id="v2-systemd-docker",
        ),
        pytest.param(
            V2_KIND_NESTED,
            PodRef(pod_uid=UID, container_id=CID, runtime="containerd", qos="besteffort"),
            id="v2-kind-nested-root",
        ),
        pytest.param(
            V2_STATIC_POD,
            PodRef(pod_uid=STATIC_UID, container_id=CID, runtime="containerd", qos="burstable"),
            id="v2-static-pod",
        ),
        pytest.param(
            # Read from a container with its own cgroup namespace: relative to the agent's cgroup.
            f"0::/../../kubepods-besteffort-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope\n",
            PodRef(pod_uid=UID, container_id=CID, runtime="containerd", qos="besteffort"),
            id="v2-namespaced-relative-systemd",
        ),
        pytest.param(
            f"0::/../../pod{UID}/{CID}\n",
            PodRef(pod_uid=UID, container_id=CID, runtime=None, qos=None),
            id="v2-namespaced-relative-cgroupfs-same-qos",
        ),
    ],
)
def test_resolves_pod_and_container_from_real_cgroup_files(tmp_path: Path, text: str, expected: PodRef):
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(text)
    assert resolve_pid(4242, tmp_path) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("0::/system.slice/sshd.service\n", id="host-service"),
        pytest.param("0::/user.slice/user-1000.slice/session-3.scope\n", id="login-session"),
        pytest.param(f"0::/system.slice/docker-{CID}.scope\n", id="plain-docker-container"),
        pytest.param("0::/\n", id="private-cgroup-namespace"),
        pytest.param(f"0::/machine.slice/pod{UID}/{CID}\n", id="pod-named-dir-outside-kubepods"),
        pytest.param("", id="empty"),
    ],
)
def test_processes_outside_pods_resolve_to_none(tmp_path: Path, text: str):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text(text)
    assert resolve_pid(7, tmp_path) is None


def test_process_that_has_exited_resolves_to_none(tmp_path: Path):
    # NVML listed it, then it ended before we read /proc: no file, no crash.
    assert resolve_pid(99999, tmp_path) is None


def test_pod_level_cgroup_without_container_keeps_pod():
    text = f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice\n"
    assert parse_cgroup(text) == PodRef(pod_uid=UID, container_id=None, runtime=None, qos="burstable")


def test_crio_conmon_scope_is_not_taken_for_the_container():
    text = (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_SYSTEMD}.slice/crio-conmon-{CID}.scope\n"
    )
    assert parse_cgroup(text) == PodRef(pod_uid=UID, container_id=None, runtime=None, qos="burstable")


def test_v1_line_with_container_wins_over_a_pod_only_line():
    text = f"3:cpuset:/kubepods/burstable/pod{UID}\n2:memory:/kubepods/burstable/pod{UID}/{CID}\n"
    assert parse_cgroup(text) == PodRef(pod_uid=UID, container_id=CID, runtime=None, qos="burstable")


def test_reads_the_real_cgroup_file_of_this_process():
    # Whatever this machine is, reading our own cgroup through the real /proc must not fail.
    import os

    result = resolve_pid(os.getpid(), Path("/proc"))
    assert result is None or isinstance(result, PodRef)
