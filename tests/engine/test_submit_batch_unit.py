"""A submit batch (jobs.services.object_creation.workloads_create_objects) against the in-memory Kubernetes
client (tests/engine/fake_kube.py): a batch that takes longer than the sweep's patience is not handed over a
second time while it is still creating."""

from __future__ import annotations

import time

import pytest

from jobs.models import Kind, State, Workload, WorkloadEvent
from jobs.services import lifecycle, object_creation, preemption
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def submitting(db, monkeypatch) -> list[Workload]:
    """Six admitted workloads of one team, whose namespace this worker already knows to be usable."""
    team = TeamFactory(slug="vision")
    owner = MembershipFactory(team=team).user
    gpu = GpuTypeFactory(slug="p100")
    monkeypatch.setattr(object_creation, "_ready", {(team.namespace, "jobs")})
    return [
        Workload.objects.create(
            team=team,
            owner=owner,
            name=f"train-{i}",
            kind=Kind.BATCH,
            image="docker.io/x:1",
            gpu_type=gpu,
            gpu_count=1,
            time_limit_seconds=3600,
            state=State.SUBMITTING,
        )
        for i in range(6)
    ]


def test_a_batch_slower_than_the_stuck_time_is_not_handed_over_again_while_it_creates(fake_kube, submitting, settings):
    settings.PORTAL_STUCK_SUBMIT_SECONDS = 0.6
    handed_over: list[int] = []

    def slow(kind, body) -> None:  # each create takes a while; the sweep runs during the last one
        time.sleep(0.15)
        if len(fake_kube.names("Job")) == len(submitting) - 1:
            handed_over.append(lifecycle.sweep()["resubmitted"])

    fake_kube.on_create = slow
    assert object_creation.workloads_create_objects([w.id for w in submitting]) == len(submitting)
    assert handed_over == [0]
    assert len(fake_kube.names("Job")) == len(submitting)
    assert set(Workload.objects.filter(id__in=[w.id for w in submitting]).values_list("state", flat=True)) == {
        State.PENDING
    }


def test_a_preempted_attempt_and_an_ended_workload_lose_their_objects_with_their_own_grace(
    fake_kube, submitting, settings
):
    settings.PORTAL_PREEMPT_GRACE_SECONDS = 30
    preempted, cancelled = submitting[:2]
    object_creation.workloads_create_objects([preempted.id, cancelled.id])
    preempted.refresh_from_db()
    cancelled.refresh_from_db()
    namespace = preempted.namespace
    preemption.delete_preempted_objects(preempted.id, preempted.k8s_name)
    object_creation.workload_delete_objects(cancelled)
    assert fake_kube.grace_seconds == {
        ("Job", namespace, preempted.k8s_name): 30,
        ("Job", namespace, cancelled.k8s_name): object_creation.DELETE_GRACE_SECONDS,
    }
    assert fake_kube.names("Job") == []
    note = WorkloadEvent.objects.filter(workload=preempted, reason="PreemptionStop").get()
    assert (
        note.message
        == f"Kubernetes asked to stop {preempted.k8s_name}: SIGTERM sent, killed after 30 s if still running."
    )
    object_creation.workload_delete_objects(cancelled)  # again: nothing left is fine
