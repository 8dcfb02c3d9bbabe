"""A running batch job's pod replaced by Kubernetes itself (an older Job controller makes a new pod when the
old one is taken away with its node), on PostgreSQL through the tracker's own apply_observation: a restartable
job is retried as its next attempt with the lost work counted; another runs on in the new pod, and the
GPU-hours the old pod threw away are on its timeline and in its lost total."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import RunSegment, State, Workload, WorkloadEvent
from jobs.services.checkpoints.reports import record_checkpoint
from jobs.services.cluster.status_mapping import Observation, apply_observation
from tests.integration.test_sharing_db import cohort, submit  # noqa: F401  (the fixture and the helper)

# Committed, but kept from the suite's running engine (`hand_overs_kept`, tests/engine_fixtures.py): these
# tests make up running workloads that no worker may create or its tracker move.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("hand_overs_kept")]


def _running(team, user, *, restartable: bool, minutes: int) -> Workload:
    w = submit(team, user, restartable=restartable)
    Workload.objects.filter(id=w.id).update(
        state=State.RUNNING, started_at=timezone.now() - timedelta(minutes=minutes), pod_uid="old-uid",
        pod_name="old-pod", node_name="gpu-p100-1",
    )  # fmt: skip
    w.refresh_from_db()
    return w


def _new_pod(state: str = State.PENDING) -> Observation:
    return Observation(state, "ContainerCreating", "Starting.", node_name="gpu-p100-2", pod_name="new-pod",
                       pod_uid="new-uid")  # fmt: skip


def test_a_job_that_is_not_restartable_runs_on_in_the_new_pod_and_its_lost_work_is_kept(cohort):  # noqa: F811
    w = _running(cohort["a"], cohort["ann"], restartable=False, minutes=60)
    record_checkpoint(w, step=3, at=timezone.now() - timedelta(minutes=15))
    assert apply_observation(w, _new_pod())
    w.refresh_from_db()
    assert (w.state, w.attempt, w.pod_uid, w.node_name) == (State.RUNNING, 0, "new-uid", "gpu-p100-2")
    gpus = w.gpu_count
    assert w.lost_gpu_seconds == pytest.approx(gpus * 15 * 60, abs=gpus * 5)  # since its checkpoint, not its start
    told = WorkloadEvent.objects.get(workload=w, reason="PodLost")
    assert "Kubernetes replaced its pod on gpu-p100-1" in told.message
    assert "of work lost (since its last checkpoint); it runs on in the new pod." in told.message
    # The new pod seen again: it is the job's pod now, no second loss.
    lost = w.lost_gpu_seconds
    apply_observation(w, _new_pod(State.RUNNING))
    w.refresh_from_db()
    assert w.lost_gpu_seconds == lost
    assert WorkloadEvent.objects.filter(workload=w, reason="PodLost").count() == 1


def test_a_restartable_job_is_retried_as_its_next_attempt(cohort):  # noqa: F811
    w = _running(cohort["a"], cohort["ann"], restartable=True, minutes=30)
    assert apply_observation(w, _new_pod())
    w.refresh_from_db()
    assert (w.state, w.attempt, w.retries, w.reason) == (State.QUEUED, 1, 1, "PodLost")
    assert "its pod was lost with its node" in w.message
    segment = RunSegment.objects.get(workload=w, attempt=0)
    assert segment.lost_gpu_seconds == pytest.approx(w.gpu_count * 30 * 60, abs=w.gpu_count * 5)  # no checkpoint
