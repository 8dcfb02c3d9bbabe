"""The simulated kubelet's view of a pod's volumes and its file rules, as pure functions."""

from __future__ import annotations

from localcluster.backend import Mount
from localcluster.storage import VolumeMountPlan, file_rules, mount_plans, run_file_rules


def _pod() -> dict:
    return {
        "spec": {
            "volumes": [
                {"name": "home", "persistentVolumeClaim": {"claimName": "home-a"}},
                {"name": "ds", "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True}},
                {"name": "nfs", "nfs": {"server": "127.0.0.1", "path": "/srv/x", "readOnly": True}},
                {"name": "far", "nfs": {"server": "10.0.0.5", "path": "/srv/y"}},
                {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            ],
            "containers": [
                {
                    "name": "main",
                    "env": [{"name": "SIM_READ_FILE", "value": "/home/a/n.txt"}],
                    "volumeMounts": [
                        {"name": "home", "mountPath": "/home/a"},
                        {"name": "ds", "mountPath": "/datasets/imagenet"},
                        {"name": "nfs", "mountPath": "/datasets/x"},
                        {"name": "far", "mountPath": "/datasets/y"},
                        {"name": "dshm", "mountPath": "/dev/shm"},
                    ],
                }
            ],
        }
    }


def test_mount_plans_cover_claims_and_local_nfs_with_read_only_from_either_side():
    assert mount_plans(_pod()) == (
        VolumeMountPlan("/home/a", ("pvc", "home-a"), False),
        VolumeMountPlan("/datasets/imagenet", ("pvc", "imagenet"), True),
        VolumeMountPlan("/datasets/x", ("host", "/srv/x"), True),
    )
    assert file_rules(_pod()) == ("/home/a/n.txt", None, "")


def test_secret_and_projected_volumes_become_read_only_secret_files():
    pod = {
        "spec": {
            "volumes": [
                {"name": "s", "projected": {"sources": [
                    {"secret": {"name": "secret-team-hf", "items": [{"key": "value", "path": "hf"}]}},
                ]}},
                {"name": "plain", "secret": {"secretName": "tls"}},
            ],
            "containers": [{"name": "main", "volumeMounts": [
                {"name": "s", "mountPath": "/var/run/secrets/gpuportal"}, {"name": "plain", "mountPath": "/tls"},
            ]}],
        }
    }  # fmt: skip
    assert mount_plans(pod) == (
        VolumeMountPlan("/var/run/secrets/gpuportal", ("secrets", '[["secret-team-hf", "value", "hf"]]'), True),
        VolumeMountPlan("/tls", ("secrets", '[["tls", "*", ""]]'), True),
    )


def test_file_rules_write_then_read_and_fail_on_read_only(tmp_path):
    mounts = (Mount("/home/a", str(tmp_path / "h")), Mount("/datasets/x", str(tmp_path / "d"), True))
    lines, ok = run_file_rules(mounts, ("/home/a/n.txt", "/home/a/n.txt", "hello"))
    assert ok
    assert lines == ["[simulated] wrote 5 bytes to /home/a/n.txt", "[simulated] read /home/a/n.txt: hello"]
    lines, ok = run_file_rules(mounts, (None, "/datasets/x/new.txt", "no"))
    assert not ok
    assert "Read-only file system" in lines[0]
    lines, ok = run_file_rules(mounts, ("/home/b/n.txt", None, ""))
    assert not ok
    assert "only mounted volumes" in lines[0]
