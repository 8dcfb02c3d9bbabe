"""Workspaces end to end, proved with real files: a service writes into its owner's home through the
simulated container's file endpoint, is cancelled, and a later batch job of the same user reads the file
back; a teammate's job sees the team's shared space but not the other's home."""

from __future__ import annotations

import socket

import pytest
import requests
from kubernetes import client as k8s

from jobs.models import State, Workspace
from jobs.services.cancel import workload_cancel
from jobs.services.logs.container_logs import workload_logs
from tests.cluster.helpers import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.celery]


@pytest.fixture
def workspaces_on(settings):
    # The engine's worker takes the class from the workload (stored at submit), so the test process's
    # setting is enough.
    settings.WORKSPACE_STORAGE_CLASS = "gpuportal-local"
    settings.WORKSPACE_HOME_GIB = 2


def _pod_ip(kube_api, workload) -> str:
    pods = k8s.CoreV1Api(kube_api).list_namespaced_pod(
        workload.namespace, label_selector=f"gpuportal.dev/workload={workload.uid}"
    )
    running = [p for p in pods.items if p.status.phase == "Running" and p.status.pod_ip]
    return running[0].status.pod_ip if running else ""


def _closed(ip: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((ip, port)) != 0


def test_home_outlives_a_service_and_teammates_share_only_team(engine, kube_api, workspaces_on):
    owner, mate = engine.owner.get_username(), engine.teammate.get_username()
    service = engine.submit(kind="service", port=8888, gpu_type="k2", gpu_count=1)
    assert [(m["kind"], m["mount_path"]) for m in service.mounts] == [("home", f"/home/{owner}"), ("team", "/team")]
    engine.wait_for(service, State.RUNNING, timeout=90)
    ip = wait_for(lambda: _pod_ip(kube_api, service), what="the service pod's IP")

    put = requests.put(f"http://{ip}:8888/_files/home/{owner}/notes.txt", data=b"remember the milk", timeout=10)
    assert put.status_code == 201, put.text
    put = requests.put(f"http://{ip}:8888/_files/team/plan.txt", data=b"team plan", timeout=10)
    assert put.status_code == 201, put.text
    # The claims exist in the team namespace, bound, and the portal recorded them.
    claims = {c.metadata.name: c for c in k8s.CoreV1Api(kube_api).list_namespaced_persistent_volume_claim(
        service.namespace).items}  # fmt: skip
    assert {m["claim"] for m in service.mounts} <= set(claims)
    assert {c.status.phase for c in claims.values()} == {"Bound"}
    assert Workspace.objects.filter(team=engine.team).count() == 2

    workload_cancel(workload=service, by=engine.owner)
    wait_for(lambda: _closed(ip, 8888), timeout=30, what="the cancelled service's port to close")

    again = engine.submit(env={"SIM_READ_FILE": f"/home/{owner}/notes.txt", "SIM_RUN_SECONDS": "1"})
    engine.wait_for(again, State.SUCCEEDED, timeout=90)
    assert f"read /home/{owner}/notes.txt: remember the milk" in workload_logs(again)

    # A teammate: the team space is shared, the owner's home is not mounted in the teammate's pods.
    shared = engine.submit(user=engine.teammate, env={"SIM_READ_FILE": "/team/plan.txt", "SIM_RUN_SECONDS": "1"})
    peek = engine.submit(
        user=engine.teammate, env={"SIM_READ_FILE": f"/home/{owner}/notes.txt", "SIM_RUN_SECONDS": "1"}
    )
    assert [m["mount_path"] for m in peek.mounts] == [f"/home/{mate}", "/team"]
    engine.wait_for(shared, State.SUCCEEDED, timeout=90)
    assert "read /team/plan.txt: team plan" in workload_logs(shared)
    engine.wait_for(peek, State.FAILED, timeout=90)
    assert peek.exit_code == 1  # the simulated program could not open the file: no such file there
    # The same seen from inside a teammate's running service: /team is there, the owner's home is not.
    theirs = engine.submit(user=engine.teammate, kind="service", port=8888, gpu_type="k2", gpu_count=1)
    engine.wait_for(theirs, State.RUNNING, timeout=90)
    their_ip = wait_for(lambda: _pod_ip(kube_api, theirs), what="the teammate's service pod IP")
    team_file = requests.get(f"http://{their_ip}:8888/_files/team/plan.txt", timeout=10)
    assert (team_file.status_code, team_file.content) == (200, b"team plan")
    other_home = requests.get(f"http://{their_ip}:8888/_files/home/{owner}/notes.txt", timeout=10)
    assert other_home.status_code == 404
    assert "no such file" in other_home.text
    assert Workspace.objects.filter(team=engine.team).count() == 3
    workload_cancel(workload=theirs, by=engine.teammate)


def test_a_dataset_is_mounted_read_only_and_only_for_allowed_teams(engine, kube_api, tmp_path):
    from jobs.models import Dataset
    from jobs.services.validation import SubmissionInvalid

    # An NFS export on this machine: the simulated kubelet mounts 127.0.0.1:<path> as that directory.
    (tmp_path / "labels.csv").write_text("cat,dog\n")
    dataset = Dataset.objects.create(name="pets", nfs_server="127.0.0.1", nfs_path=str(tmp_path))
    with pytest.raises(SubmissionInvalid) as refused:
        engine.submit(kind="service", port=8888, gpu_type="k2", gpu_count=1, datasets=["pets"])
    assert list(refused.value.errors) == ["datasets"]
    assert engine.team.workloads.count() == 0  # refused before anything was stored or created

    dataset.teams.add(engine.team)
    service = engine.submit(kind="service", port=8888, gpu_type="k2", gpu_count=1, datasets=["pets"])
    assert [(m["kind"], m["mount_path"], m["read_only"]) for m in service.mounts] == [
        ("dataset", "/datasets/pets", True)
    ]
    engine.wait_for(service, State.RUNNING, timeout=90)
    ip = wait_for(lambda: _pod_ip(kube_api, service), what="the service pod's IP")
    read = requests.get(f"http://{ip}:8888/_files/datasets/pets/labels.csv", timeout=10)
    assert (read.status_code, read.text) == (200, "cat,dog\n")
    write = requests.put(f"http://{ip}:8888/_files/datasets/pets/new.csv", data=b"x", timeout=10)
    assert write.status_code == 403
    assert "Read-only file system" in write.text
    assert not (tmp_path / "new.csv").exists()
    workload_cancel(workload=service, by=engine.owner)


def test_an_admin_deletes_a_workspace_through_the_engine(engine, kube_api, workspaces_on):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from jobs.models import WorkspaceDeletion

    job = engine.submit(env={"SIM_RUN_SECONDS": "1"})
    engine.wait_for(job, State.SUCCEEDED, timeout=90)
    home = Workspace.objects.get(team=engine.team, owner=engine.owner)
    core = k8s.CoreV1Api(kube_api)

    def claims() -> set[str]:
        """Claims not being deleted (one still mounted by a finished pod waits for it: pvc-protection)."""
        listed = core.list_namespaced_persistent_volume_claim(home.namespace).items
        return {c.metadata.name for c in listed if c.metadata.deletion_timestamp is None}

    assert home.claim_name in claims()

    admin_user = get_user_model().objects.create_superuser("ws-admin", "ws-admin@example.org", "pw-for-the-test")
    browser = Client()
    browser.force_login(admin_user)
    response = browser.post(
        "/admin/jobs/workspace/", {"action": "delete_data", "_selected_action": [str(home.pk)]}, follow=True
    )
    assert response.status_code == 200
    assert "will be deleted by the engine" in response.content.decode()

    wait_for(lambda: home.claim_name not in claims(), timeout=60, what="the claim to be deleted by the engine")
    record = wait_for(lambda: WorkspaceDeletion.objects.filter(claim_name=home.claim_name).first(), timeout=30)
    assert (record.deleted_by, record.namespace) == (admin_user, home.namespace)
    assert not Workspace.objects.filter(pk=home.pk).exists()
