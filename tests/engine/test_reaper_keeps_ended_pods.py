"""The tracker's reaper asks again to delete the pods of a finished workload only while they still run
(a delete request lost with the broker). A failed job's pod that ended on its own stays: its log is what
the user reads next ("The container is gone" was what they saw when the reaper deleted it)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobs.kube import names
from jobs.models import State, Workload
from jobs.services.cluster.watch_loop import ClusterView, reap_finished, still_runs
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory


@pytest.fixture
def failed_job(db, settings):
    settings.PORTAL_INSTANCE = "default"
    team = TeamFactory(slug="lab")
    now = timezone.now()
    return Workload.objects.create(
        team=team, owner=MembershipFactory(team=team).user, name="train", kind="batch", image="python",
        gpu_type=GpuTypeFactory(slug="k2"), gpu_count=1, time_limit_seconds=3600, state=State.FAILED,
        namespace=team.namespace, k8s_name="train-x", submitted_at=now, started_at=now, finished_at=now,
        exit_code=3,
    )  # fmt: skip


def pod(workload: Workload, phase: str, *, deleting: bool = False) -> dict:
    metadata = {
        "name": "train-x-abcde",
        "namespace": workload.namespace,
        "uid": "pod-uid",
        "labels": {
            names.LABEL_MANAGED_BY: names.MANAGED_BY,
            names.LABEL_INSTANCE: names.label_value("default"),
            names.LABEL_WORKLOAD: workload.uid,
            "job-name": workload.k8s_name,
        },
    }
    if deleting:
        metadata["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"metadata": metadata, "spec": {"nodeName": "real-k2-1"}, "status": {"phase": phase}}


@pytest.mark.parametrize("phase", ["Failed", "Succeeded"])
def test_an_ended_pod_of_a_failed_job_is_left_for_its_log(failed_job, phase, django_capture_on_commit_callbacks):
    view = ClusterView()
    view.put("Pod", pod(failed_job, phase))
    with django_capture_on_commit_callbacks() as sends:
        assert reap_finished(view) == 0
    assert sends == []


def test_a_pod_that_still_runs_after_its_workload_ended_is_deleted_again(
    failed_job, django_capture_on_commit_callbacks
):
    view = ClusterView()
    view.put("Pod", pod(failed_job, "Running"))
    with django_capture_on_commit_callbacks() as sends:
        assert reap_finished(view) == 1
    assert len(sends) == 1


@pytest.mark.parametrize(
    ("phase", "deleting", "runs"),
    [("Pending", False, True), ("Running", False, True), ("Running", True, False), ("Failed", False, False),
     ("Succeeded", False, False), ("", False, True)],
)  # fmt: skip
def test_still_runs(failed_job, phase, deleting, runs):
    assert still_runs(pod(failed_job, phase, deleting=deleting)) is runs
