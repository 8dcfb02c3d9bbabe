"""Measuring persistent volumes from the kubelet's pod directories (agent/volumes.py), on real directory
trees in a temporary directory, and the report's optional "volumes" field."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.loop import AgentLoop
from agent.metrics import LatestReport
from agent.readings import RawSample
from agent.report import MAX_VOLUMES, Report, ReportError, VolumeReading, build_report
from agent.stats import AgentStats
from agent.volumes import (
    TooLarge,
    VolumeMeter,
    directory_usage,
    kubelet_volume_dirs,
    measure,
    mount_roots,
    volume_usage,
)

KIB = 1024


def _write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def _blocks(*paths: Path) -> int:
    return sum(os.lstat(p).st_blocks * 512 for p in paths)


def test_a_directory_counts_the_blocks_its_files_occupy_like_du(tmp_path):
    volume = tmp_path / "vol"
    files = [_write(volume / "a.bin", 100 * KIB), _write(volume / "deep" / "er" / "b.bin", 300 * KIB)]

    usage = directory_usage(volume)

    dirs = [volume, volume / "deep", volume / "deep" / "er"]
    assert usage.used_bytes == _blocks(*files, *dirs)
    assert usage.used_bytes >= 400 * KIB
    assert usage.capacity_bytes is None  # a directory on a shared disk has no size of its own


def test_the_walk_never_follows_symlinks_out_of_the_volume_and_counts_hard_links_once(tmp_path):
    outside = _write(tmp_path / "outside" / "big.bin", 2048 * KIB)
    volume = tmp_path / "vol"
    inside = _write(volume / "data.bin", 64 * KIB)
    os.link(inside, volume / "same-data.bin")
    (volume / "to-big-file").symlink_to(outside)
    (volume / "to-outside-dir").symlink_to(outside.parent, target_is_directory=True)

    usage = directory_usage(volume)

    assert usage.used_bytes < 1024 * KIB  # the 2 MiB file outside is never counted
    links = [volume / "to-big-file", volume / "to-outside-dir"]
    assert usage.used_bytes == _blocks(volume, inside, *links)


def test_a_volume_too_big_to_walk_is_left_out_not_half_counted(tmp_path):
    for i in range(20):
        _write(tmp_path / "big" / f"{i}.txt", 1)
    _write(tmp_path / "small" / "one.txt", 1)

    _write(tmp_path / "deep" / "a" / "b" / "c" / "d" / "e.txt", 1)
    with pytest.raises(TooLarge):
        directory_usage(tmp_path / "big", max_entries=10)
    with pytest.raises(TooLarge):
        directory_usage(tmp_path / "deep", max_depth=3)
    assert directory_usage(tmp_path / "deep", max_depth=5).used_bytes > 0
    readings = measure({"pvc-big": tmp_path / "big", "pvc-small": tmp_path / "small"}, max_entries=10)

    assert [r.name for r in readings] == ["pvc-small"]


def test_kubelet_pod_directories_give_each_persistent_volume_once(tmp_path):
    pods = tmp_path / "kubelet" / "pods"
    csi = pods / "uid-1" / "volumes" / "kubernetes.io~csi" / "pvc-aaa"
    _write(csi / "vol_data.json", 10)
    _write(csi / "mount" / "notes.txt", 5)
    _write(pods / "uid-1" / "volumes" / "kubernetes.io~nfs" / "pvc-bbb" / "x", 1)
    _write(pods / "uid-2" / "volumes" / "kubernetes.io~nfs" / "pvc-bbb" / "x", 1)  # the same PV, another pod
    _write(pods / "uid-1" / "volumes" / "kubernetes.io~empty-dir" / "shm" / "x", 1)
    _write(pods / "uid-1" / "volumes" / "kubernetes.io~secret" / "token" / "x", 1)
    _write(pods / "uid-1" / "volumes" / "kubernetes.io~local-volume" / "Not_A_Name" / "x", 1)
    # A symlink where a pod or a volume directory should be is never followed.
    _write(tmp_path / "elsewhere" / "volumes" / "kubernetes.io~nfs" / "pvc-evil" / "x", 1)
    (pods / "uid-3").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (pods / "uid-1" / "volumes" / "kubernetes.io~nfs" / "pvc-link").symlink_to(tmp_path, target_is_directory=True)

    found = kubelet_volume_dirs(tmp_path / "kubelet")

    assert found == {
        "pvc-aaa": csi / "mount",
        "pvc-bbb": pods / "uid-1" / "volumes" / "kubernetes.io~nfs" / "pvc-bbb",
    }
    assert kubelet_volume_dirs(tmp_path / "no-kubelet-here") == {}


def test_mountinfo_says_which_mounts_are_whole_filesystems(tmp_path):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "90 22 0:50 / /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pvc-a/mount rw - ext4 /dev/rbd0 rw\n"
        "91 22 8:1 /srv/local/pvc-b /var/lib/kubelet/pods/u/volumes/kubernetes.io~local-volume/pvc-b rw - ext4 /dev/sda1\n"
        "92 22 0:51 / /mnt/with\\040space rw - nfs server:/export rw\n"
    )

    roots = mount_roots(mountinfo)

    assert roots["/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pvc-a/mount"] == "/"
    assert roots["/var/lib/kubelet/pods/u/volumes/kubernetes.io~local-volume/pvc-b"] == "/srv/local/pvc-b"
    assert roots["/mnt/with space"] == "/"
    assert mount_roots(tmp_path / "missing") == {}


def test_a_whole_filesystem_is_measured_by_statvfs_and_a_bind_mount_by_walking(tmp_path):
    _write(tmp_path / "vol" / "f", 10 * KIB)
    whole = volume_usage(tmp_path / "vol", {str(tmp_path / "vol"): "/"})
    info = os.statvfs(tmp_path / "vol")
    assert whole.capacity_bytes == info.f_blocks * info.f_frsize
    assert 0 < whole.used_bytes <= whole.capacity_bytes

    bound = volume_usage(tmp_path / "vol", {str(tmp_path / "vol"): "/srv/sub"})
    assert bound == directory_usage(tmp_path / "vol")


def test_the_meter_measures_every_interval_and_the_loop_reports_volumes_only_then(tmp_path):
    _write(tmp_path / "pods" / "u" / "volumes" / "kubernetes.io~nfs" / "pvc-x" / "f.txt", 3 * KIB)
    now = [100.0]
    meter = VolumeMeter(tmp_path, interval_seconds=60, mountinfo=tmp_path / "none", clock=lambda: now[0])

    class NoGpus:
        simulated = True

        def sample(self) -> RawSample:
            return RawSample(driver_version=None, cuda_driver_version=None, gpus=())

        def close(self) -> None:
            pass

    loop = AgentLoop(
        node_name="n", sampler=NoGpus(), interval_seconds=5, host_proc=tmp_path, latest=LatestReport(),
        stats=AgentStats(), volumes=meter,
    )  # fmt: skip
    first = loop.tick()
    now[0] += 5
    second = loop.tick()
    now[0] += 60
    third = loop.tick()

    assert [v.name for v in first.volumes] == ["pvc-x"]
    assert first.volumes[0].used_bytes >= 3 * KIB
    assert second.volumes == ()
    assert "volumes" not in second.to_dict()
    assert [v.name for v in third.volumes] == ["pvc-x"]


def _report(**fields) -> dict:
    raw = RawSample(driver_version=None, cuda_driver_version=None, gpus=())
    report = build_report(raw, node="n", simulated=False, timestamp=datetime.now(UTC), interval_seconds=5,
                          agent_version="0", volumes=[VolumeReading("pvc-b", 2), VolumeReading("pvc-a", 1, 10)])  # fmt: skip
    return {**report.to_dict(), **fields}


def test_volumes_round_trip_through_the_wire_format_sorted_by_name():
    body = _report()
    assert body["volumes"] == [
        {"name": "pvc-a", "used_bytes": 1, "capacity_bytes": 10},
        {"name": "pvc-b", "used_bytes": 2, "capacity_bytes": None},
    ]
    assert Report.from_dict(body).to_dict() == body
    without = {k: v for k, v in body.items() if k != "volumes"}
    assert Report.from_dict(without).volumes == ()


@pytest.mark.parametrize(
    ("volumes", "message"),
    [
        ({}, "volumes: expected a list"),
        ([{"name": f"v{i}", "used_bytes": 0} for i in range(MAX_VOLUMES + 1)], f"volumes: at most {MAX_VOLUMES}"),
        ([{"name": "v", "used_bytes": 0}] * 2, "volumes: the same volume name appears twice"),
        ([{"name": "V/../x", "used_bytes": 0}], "volumes[0].name: expected a PersistentVolume name"),
        ([{"name": "v", "used_bytes": -5}], "volumes[0].used_bytes: -5 is outside"),
        ([{"name": "v", "used_bytes": 6, "capacity_bytes": 5}], "volumes[0].used_bytes: 6 is more than"),
        ([{"name": "v", "used_bytes": 0, "capacity_bytes": 2**62 + 1}], "volumes[0].capacity_bytes:"),
    ],
)
def test_bad_volumes_raise_naming_the_field(volumes, message):
    with pytest.raises(ReportError) as raised:
        Report.from_dict(_report(volumes=volumes))
    assert str(raised.value).startswith(message)
