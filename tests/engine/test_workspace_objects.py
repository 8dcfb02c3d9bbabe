"""Workspaces and dataset volumes in the rendered pod, and the workspace claim, compared whole."""

from __future__ import annotations

from kubernetes.client import ApiClient

from jobs.kube import names, objects
from jobs.services.storage.workspaces import volume_specs
from tests.engine.test_objects import spec

MOUNTS = [
    {"kind": "home", "mount_path": "/home/alice", "claim": names.home_claim_name("alice", 7), "read_only": False,
     "size_gib": 10},
    {"kind": "team", "mount_path": "/team", "claim": "team-shared", "read_only": False, "size_gib": 50},
]  # fmt: skip


def as_dict(obj):
    return ApiClient().sanitize_for_serialization(obj)


def test_workspaces_become_claim_volumes_mounted_at_their_paths():
    pod = as_dict(objects.make_pod_template(spec(volumes=volume_specs(MOUNTS))))["spec"]
    home = names.home_claim_name("alice", 7)
    assert pod["volumes"][1:] == [
        {"name": "ws-home", "persistentVolumeClaim": {"claimName": home}},
        {"name": "ws-team", "persistentVolumeClaim": {"claimName": "team-shared"}},
    ]
    assert pod["containers"][0]["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "ws-home", "mountPath": "/home/alice"},
        {"name": "ws-team", "mountPath": "/team"},
    ]


def test_read_only_nfs_volume_is_read_only_in_both_places():
    volume = objects.VolumeSpec(
        name="ds-imagenet", mount_path="/datasets/imagenet", read_only=True, nfs_server="10.0.0.5", nfs_path="/x"
    )
    pod = as_dict(objects.make_pod_template(spec(volumes=(volume,))))["spec"]
    assert pod["volumes"][1] == {"name": "ds-imagenet", "nfs": {"server": "10.0.0.5", "path": "/x", "readOnly": True}}
    assert pod["containers"][0]["volumeMounts"][1] == {
        "name": "ds-imagenet",
        "mountPath": "/datasets/imagenet",
        "readOnly": True,
    }


def test_workspace_claim_renders_exactly():
    claim = objects.make_workspace_claim(
        namespace="gpuportal-vision", name="home-alice-x", size_gib=10, storage_class="fast",
        team_slug="vision", username="alice", instance="ci",
    )  # fmt: skip
    assert as_dict(claim) == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "home-alice-x",
            "namespace": "gpuportal-vision",
            "labels": {
                "app.kubernetes.io/managed-by": "gpuportal",
                "gpuportal.dev/instance": "ci",
                "gpuportal.dev/team": "vision",
                "gpuportal.dev/workspace": "home",
                "gpuportal.dev/user": "alice",
            },
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "fast",
            "resources": {"requests": {"storage": "10Gi"}},
        },
    }


def test_home_claim_names_are_valid_and_distinct():
    a, b = names.home_claim_name("Alice.Smith@lab", 1), names.home_claim_name("alice-smith-lab", 2)
    assert a != b
    assert names.home_claim_name("same", 1) != names.home_claim_name("same", 2)  # the id, not the username
    for name in (a, b, names.home_claim_name("x" * 150, 2**63 - 1)):
        assert len(name) <= 63
        assert names.dns_label(name) == name
