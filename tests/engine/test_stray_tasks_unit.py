"""Tasks that reached the wrong worker (issue 32: two portals shared a broker and ran each other's tasks by
row id) change nothing: each names what it acts on so a stranger's row does not match, and re-reads the
state before it deletes. Run in-process against the in-memory Kubernetes client (tests/engine/fake_kube.py);
tests/integration/test_stray_tasks.py sends them through the real worker."""

from __future__ import annotations

import logging

import pytest
from django.utils import timezone

from jobs import tasks
from jobs.kube import names
from jobs.models import Kind, SecretState, State, TeamSecret, Workload, Workspace, WorkspaceDeletion
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def service(fake_kube) -> Workload:
    team = TeamFactory(slug="vision")
    workload = Workload.objects.create(
        team=team, owner=MembershipFactory(team=team).user, name="notebook", kind=Kind.SERVICE, port=8888,
        image="docker.io/x:1", gpu_type=GpuTypeFactory(slug="p100"), gpu_count=1, time_limit_seconds=3600,
        state=State.RUNNING, namespace=team.namespace, submitted_at=timezone.now(),
    )  # fmt: skip
    workload.k8s_name = names.attempt_name(workload.name, workload.uid, 0)
    workload.save(update_fields=["k8s_name"])
    for kind in ("Deployment", "Service"):
        fake_kube.add(kind, {"metadata": {"name": workload.k8s_name, "namespace": team.namespace}})
    return workload


def test_a_delete_of_a_running_workload_is_refused_and_logged_with_its_origin(fake_kube, service, caplog):
    with caplog.at_level(logging.WARNING, logger="jobs.tasks"):
        assert tasks.delete_objects.apply(args=[service.uid]).get() is False
        assert tasks.delete_objects.apply(args=[service.id]).get() is False  # a row id: another portal's
        assert tasks.preempt_objects.apply(args=[service.uid, service.k8s_name]).get() is False
        assert tasks.preempt_objects.apply(args=[service.uid, "someone-elses-job"]).get() is False
    assert len(fake_kube.names("Deployment")) == 1
    assert len(fake_kube.names("Service")) == 1
    text = caplog.text
    assert f"refused to delete the objects of workload {service.uid} (notebook, RUNNING)" in text
    assert "the request came from" in text
    assert "not by uid" in text
    service.refresh_from_db()
    assert service.state == State.RUNNING


def test_a_delete_of_a_cancelled_workload_goes_ahead(fake_kube, service):
    Workload.objects.filter(id=service.id).update(state=State.CANCELLED)
    assert tasks.delete_objects.apply(args=[service.uid]).get() is True
    assert fake_kube.names("Deployment") == []


def test_a_submission_for_a_workload_unknown_here_creates_nothing(fake_kube, service, caplog):
    with caplog.at_level(logging.WARNING, logger="jobs.tasks"):
        assert tasks.submit_batch.apply(args=[["0123456789abcdef", service.id]]).get() == 0
    assert "0123456789abcdef unknown here" in caplog.text
    assert len(fake_kube.names("Deployment")) == 1  # nothing new


def test_secret_and_workspace_tasks_meant_for_another_portal_match_no_row_here(fake_kube, service):
    team = service.team
    secret = TeamSecret.objects.create(
        team=team, owner=service.owner, name="TOKEN", k8s_name="token-x", state=SecretState.DELETING, version=2,
        updated_at=timezone.now(),
    )  # fmt: skip
    assert tasks.remove_secret.apply(args=[secret.id, 2, "another-portals-secret"]).get() == "superseded"
    assert TeamSecret.objects.filter(id=secret.id).exists()
    workspace = Workspace.objects.create(
        team=team, owner=service.owner, namespace=team.namespace, claim_name="home-alice", mount_path="/home",
        size_gib=10, storage_class="local",
    )  # fmt: skip
    tasks.delete_workspace_data.apply(args=[workspace.id, service.owner.id, "other-ns/home-bob"]).get()
    assert Workspace.objects.filter(id=workspace.id).exists()
    assert not WorkspaceDeletion.objects.exists()
