"""Team quotas: queueing, positions, admission when GPUs free up, and no over-admission under load."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from jobs.models import State, Workload
from jobs.selectors import queue_position
from jobs.services.cancel import workload_cancel

pytestmark = [pytest.mark.cluster, pytest.mark.celery]


def test_three_2_gpu_jobs_on_a_4_gpu_quota(engine):
    first = engine.submit(gpu_count=2, env={"SIM_RUN_SECONDS": "4"})
    second = engine.submit(gpu_count=2, env={"SIM_RUN_SECONDS": "30"})
    third = engine.submit(gpu_count=2, env={"SIM_RUN_SECONDS": "1"})
    engine.wait_for(first, State.RUNNING)
    engine.wait_for(second, State.RUNNING)
    third.refresh_from_db()
    assert third.state == State.QUEUED
    assert queue_position(third) == 1
    # When the first ends, its GPUs go to the third.
    engine.wait_for(first, State.SUCCEEDED)
    engine.wait_for(third, State.RUNNING, State.SUCCEEDED)
    assert third.admitted_at >= first.finished_at
    workload_cancel(workload=second, by=engine.owner)


def test_priority_then_fifo_and_positions(engine):
    blocker = engine.submit(gpu_count=4, env={"SIM_RUN_SECONDS": "600"})
    engine.wait_for(blocker, State.RUNNING)
    a = engine.submit(gpu_count=1)
    b = engine.submit(gpu_count=1)
    urgent = engine.submit(gpu_count=1, priority=50, user=engine.manager)
    assert [queue_position(w) for w in (urgent, a, b)] == [1, 2, 3]
    workload_cancel(workload=blocker, by=engine.owner)
    engine.wait_for(urgent, State.SUBMITTING, State.PENDING, State.RUNNING)
    for w in (urgent, a, b):
        engine.wait_for(w, State.RUNNING)
        workload_cancel(workload=w, by=engine.owner)


@pytest.mark.parametrize("state", [State.QUEUED, State.SUBMITTING, State.PENDING, State.RUNNING])
def test_cancel_from_every_non_final_state_releases_quota(engine, state):
    if state == State.QUEUED:
        blocker = engine.submit(gpu_count=4, env={"SIM_RUN_SECONDS": "600"})
        engine.wait_for(blocker, State.RUNNING)
        workload = engine.submit(gpu_count=2)
        assert workload.state == State.QUEUED
        workload_cancel(workload=workload, by=engine.owner)
        workload_cancel(workload=blocker, by=engine.owner)
    elif state == State.SUBMITTING:
        # Hold it in SUBMITTING by admitting it ourselves, before any worker can create its objects.
        workload = engine.submit(gpu_count=2)
        Workload.objects.filter(id=workload.id, state=State.QUEUED).update(state=State.SUBMITTING)
        workload.refresh_from_db()
        if workload.state != State.SUBMITTING:
            pytest.skip("the worker admitted it first")
        workload_cancel(workload=workload, by=engine.owner)
    elif state == State.PENDING:
        workload = engine.submit(image="registry.invalid/x:1", gpu_count=2)
        engine.wait_for(workload, State.PENDING)
        workload_cancel(workload=workload, by=engine.owner)
    else:
        workload = engine.submit(gpu_count=2, env={"SIM_RUN_SECONDS": "600"})
        engine.wait_for(workload, State.RUNNING)
        workload_cancel(workload=workload, by=engine.owner)
    workload.refresh_from_db()
    assert workload.state == State.CANCELLED
    # The quota is free at once: a 4-GPU job is admitted.
    follower = engine.submit(gpu_count=4, env={"SIM_RUN_SECONDS": "1"})
    engine.wait_for(follower, State.SUCCEEDED, timeout=90)
    # Nothing of the cancelled workload stays behind in SUBMITTING/PENDING.
    engine.wait_for(workload, State.CANCELLED)


def test_50_concurrent_submissions_never_exceed_the_quota(engine):
    assert connection.vendor == "postgresql"
    errors: list[BaseException] = []
    barrier = threading.Barrier(50)

    def submit_one(i: int) -> None:
        try:
            barrier.wait()
            engine.submit(gpu_count=1 + i % 2, env={"SIM_RUN_SECONDS": "2"})
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=submit_one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # Sample the GPUs held while the queue drains: never more than the 4-GPU quota.
    import time

    peak = 0
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        held = sum(
            Workload.objects.filter(team=engine.team, gpu_type__slug="p100", state__in=State.holding()).values_list(
                "gpu_count", flat=True
            )
        )
        peak = max(peak, held)
        assert held <= 4
        if not Workload.objects.filter(team=engine.team, state__in=State.active()).exists():
            break
        time.sleep(0.05)
    assert Workload.objects.filter(team=engine.team, state=State.SUCCEEDED).count() == 50
    assert peak >= 3  # the quota was actually used, not trivially respected
