"""Checkpoint-aware reclaim on PostgreSQL, through the services (no cluster needed): the lender takes the
borrowed job whose stop loses least; the timeline, the owner's notification and the usage report say how
many GPU-hours were lost; a borrowed job inside its minimum runtime is left alone and the lender is told why."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import RunSegment, State, Workload, WorkloadEvent
from jobs.services.checkpoints.reports import record_checkpoint
from jobs.services.usage.reports import day_range, usage_build
from notifications.models import Event
from tests.integration.test_sharing_db import cohort, submit  # noqa: F401  (the fixture and the helper)

# Committed (admission runs as in production), but kept from the suite's running engine: these tests make up
# RUNNING workloads after submitting them (tests/engine_fixtures.py, `hand_overs_kept`).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("hand_overs_kept")]


def _borrowed_running(b, bob, *, started_minutes_ago: int, checkpoint_minutes_ago: int | None) -> Workload:
    w = submit(b, bob, restartable=True)
    assert w.borrowed
    now = timezone.now()
    Workload.objects.filter(id=w.id).update(
        state=State.RUNNING, started_at=now - timedelta(minutes=started_minutes_ago)
    )
    w.refresh_from_db()
    if checkpoint_minutes_ago is not None:
        record_checkpoint(w, step=7, at=now - timedelta(minutes=checkpoint_minutes_ago))
    return w


def _kept(w: Workload) -> bool:
    """Not preempted: still its first attempt, no Preempted step. (Not "still RUNNING": in a full run a
    tracker of the session's engine may see these made-up running workloads without pods and move them.)"""
    w.refresh_from_db()
    return (
        w.attempt == 0
        and w.state not in (State.QUEUED, State.PREEMPTED, State.FAILED)
        and not (WorkloadEvent.objects.filter(workload=w, reason="Preempted").exists())
    )


def test_the_lender_takes_the_job_that_loses_least_and_everyone_hears_how_much(cohort):  # noqa: F811
    a, b, ann, bob = cohort["a"], cohort["b"], cohort["ann"], cohort["bob"]
    own = [submit(b, bob), submit(b, bob)]
    Workload.objects.filter(id__in=[w.id for w in own]).update(state=State.RUNNING, started_at=timezone.now())
    # Older, checkpointed a minute ago; newer, never checkpointed in its 50 minutes.
    fresh = _borrowed_running(b, bob, started_minutes_ago=120, checkpoint_minutes_ago=1)
    stale = _borrowed_running(b, bob, started_minutes_ago=50, checkpoint_minutes_ago=None)
    lender = submit(a, ann, gpu_count=3)  # A's 4 minus what B borrows (2): one of the two must go
    assert lender.state == State.SUBMITTING
    fresh.refresh_from_db()
    stale.refresh_from_db()
    assert (fresh.state, fresh.attempt) == (State.QUEUED, 1)  # newest-first would have taken `stale`
    assert _kept(stale)
    # About 1 GPU x 1 minute lost, on the timeline, the workload, its run segment and the notification.
    assert 40 <= fresh.lost_gpu_seconds <= 120
    step = WorkloadEvent.objects.get(workload=fresh, reason="Preempted")
    assert "GPU-hours of work lost (since its last checkpoint)" in step.message
    assert RunSegment.objects.get(workload=fresh).lost_gpu_seconds == pytest.approx(fresh.lost_gpu_seconds)
    told = Event.objects.get(workload=fresh, kind="workload.preempted")
    assert "Work lost: 0.0" in told.summary
    today = timezone.localdate()
    report = usage_build(days=day_range(today, today), team_ids=[b.id])
    assert report.total().lost_gpu_hours == pytest.approx(fresh.lost_gpu_seconds / 3600, abs=1e-4)


def test_a_borrowed_job_inside_its_minimum_runtime_is_not_preempted(cohort):  # noqa: F811
    a, b, ann, bob = cohort["a"], cohort["b"], cohort["ann"], cohort["bob"]
    own = [submit(b, bob), submit(b, bob)]
    Workload.objects.filter(id__in=[w.id for w in own]).update(state=State.RUNNING, started_at=timezone.now())
    young = [_borrowed_running(b, bob, started_minutes_ago=5, checkpoint_minutes_ago=None) for _ in range(2)]
    p100 = cohort["p100"]
    p100.min_runtime_seconds = 1800
    p100.save()
    lender = submit(a, ann, gpu_count=4)
    assert lender.state == State.QUEUED
    assert all(_kept(w) for w in young)
    # Half an hour later they may go.
    Workload.objects.filter(id__in=[w.id for w in young]).update(started_at=timezone.now() - timedelta(minutes=31))
    from jobs.services.queue.admission import admit_all

    admit_all()
    assert Workload.objects.get(id=lender.id).state == State.SUBMITTING
