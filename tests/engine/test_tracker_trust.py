"""The tracker trusts only the portal's own objects: in the workload's team namespace, wearing this
instance's labels. A look-alike anywhere else changes nothing and is logged once."""

from __future__ import annotations

import logging

import pytest
from django.utils import timezone

from jobs.kube import names
from jobs.models import State, Workload
from jobs.services.cluster import watch_loop
from jobs.services.cluster.watch_loop import ClusterView, reap_finished, sync_workloads
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory


@pytest.fixture
def running_service(db, settings):
    team = TeamFactory(slug="lab")
    owner = MembershipFactory(team=team).user
    return Workload.objects.create(
        team=team, owner=owner, name="notebook", kind="service", image="jupyter", port=8888,
        gpu_type=GpuTypeFactory(slug="k2"), gpu_count=1, time_limit_seconds=86400, state=State.RUNNING,
        namespace=team.namespace, k8s_name="notebook-x", started_at=timezone.now(), submitted_at=timezone.now(),
        pod_uid="real-pod",
    )  # fmt: skip


def failed_pod(workload: Workload, *, namespace: str, name: str, labels: dict | None = None) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "creationTimestamp": "2030-01-01T00:00:00Z",  # newer than anything: it would speak for the workload
            "labels": labels
            if labels is not None
            else {
                names.LABEL_MANAGED_BY: names.MANAGED_BY,
                names.LABEL_INSTANCE: names.label_value("default"),
                names.LABEL_WORKLOAD: workload.uid,
            },
        },
        "spec": {"nodeName": "k2-0"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "main",
                    "state": {
                        "terminated": {
                            "exitCode": 1,
                            "startedAt": "2030-01-01T00:00:01Z",
                            "finishedAt": "2030-01-01T00:00:02Z",
                        }
                    },
                }
            ],
        },
    }


def test_a_look_alike_in_another_namespace_is_ignored_and_logged_once(running_service, settings, caplog):
    settings.PORTAL_INSTANCE = "default"
    watch_loop._reported_strangers.clear()
    view = ClusterView()
    impostor = failed_pod(running_service, namespace="default", name="impostor")
    with caplog.at_level(logging.WARNING, logger="jobs.services.cluster.watch_loop"):
        for _ in range(3):  # every watch event and relist sees it again
            assert view.put("Pod", impostor) == running_service.uid
            sync_workloads(view, {running_service.uid}, full=False)
    running_service.refresh_from_db()
    assert (running_service.state, running_service.pod_uid) == (State.RUNNING, "real-pod")
    assert [r.getMessage() for r in caplog.records].count(
        f"ignoring Pod default/impostor: it wears workload {running_service.uid}'s labels but is outside "
        f"that workload's namespace {running_service.namespace}"
    ) == 1


def test_another_teams_namespace_is_no_better(running_service, settings):
    settings.PORTAL_INSTANCE = "default"
    view = ClusterView()
    view.put("Pod", failed_pod(running_service, namespace=f"{settings.KUBE_NAMESPACE_PREFIX}other", name="x"))
    sync_workloads(view, {running_service.uid}, full=False)
    running_service.refresh_from_db()
    assert running_service.state == State.RUNNING


def test_objects_without_this_instances_labels_are_not_even_kept(running_service, settings):
    settings.PORTAL_INSTANCE = "default"
    view = ClusterView()
    labels = {names.LABEL_WORKLOAD: running_service.uid}  # only the workload label, in the right namespace
    assert (
        view.put("Pod", failed_pod(running_service, namespace=running_service.namespace, name="p", labels=labels))
        is None
    )
    sync_workloads(view, {running_service.uid}, full=False)
    running_service.refresh_from_db()
    assert running_service.state == State.RUNNING


def test_its_own_pod_still_ends_it(running_service, settings):
    settings.PORTAL_INSTANCE = "default"
    view = ClusterView()
    view.put("Pod", failed_pod(running_service, namespace=running_service.namespace, name="real"))
    sync_workloads(view, {running_service.uid}, full=False)
    running_service.refresh_from_db()
    assert (running_service.state, running_service.exit_code) == (State.FAILED, 1)


def test_the_reaper_ignores_look_alikes_of_finished_workloads(running_service, settings):
    settings.PORTAL_INSTANCE = "default"
    Workload.objects.filter(id=running_service.id).update(state=State.CANCELLED, finished_at=timezone.now())
    view = ClusterView()
    impostor = failed_pod(running_service, namespace="default", name="still-running")
    impostor["status"] = {"phase": "Running"}
    view.put("Pod", impostor)
    assert reap_finished(view) == 0


def test_a_requeued_jobs_previous_attempt_is_reaped_and_never_speaks_for_it(
    running_service, settings, django_capture_on_commit_callbacks
):
    """Preempted and requeued (attempt 1): pods of attempt 0 that still run are deleted again (a lost
    request), and their end never changes the workload waiting for its next run."""
    settings.PORTAL_INSTANCE = "default"
    Workload.objects.filter(id=running_service.id).update(kind="batch", state=State.SUBMITTING, attempt=1, k8s_name="")
    running_service.refresh_from_db()
    old_name = names.attempt_name(running_service.name, running_service.uid, 0)
    labels = {
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_INSTANCE: names.label_value("default"),
        names.LABEL_WORKLOAD: running_service.uid,
        "job-name": old_name,
    }
    old = failed_pod(running_service, namespace=running_service.namespace, name=f"{old_name}-abc", labels=labels)
    view = ClusterView()
    view.put("Pod", old)
    sync_workloads(view, {running_service.uid}, full=False)
    running_service.refresh_from_db()
    assert running_service.state == State.SUBMITTING  # the old attempt's failure is not this run's
    old["status"] = {"phase": "Running"}
    view.put("Pod", old)
    with django_capture_on_commit_callbacks() as sends:
        assert reap_finished(view) == 1
    assert len(sends) == 1  # one delete request (with the preemption grace) for the old attempt
    # The current attempt's own pods are never reaped this way.
    labels["job-name"] = names.attempt_name(running_service.name, running_service.uid, 1)
    view = ClusterView()
    view.put("Pod", old)
    assert reap_finished(view) == 0
