"""Sharing on PostgreSQL, through the services (no cluster needed: nothing here reaches Kubernetes).

Borrowing, reclaim and caps under concurrency: admission locks the cohort's quota rows, so 50
concurrent submissions across a cohort never over-lend, and a member's caps hold under the same load.
"""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from jobs.models import (
    AllowedRegistry,
    Cohort,
    GpuNode,
    GpuType,
    Membership,
    Quota,
    State,
    Team,
    Workload,
    WorkloadEvent,
)
from jobs.services.admission import quota_admit
from jobs.services.estimates import estimate
from jobs.services.provisioning import team_gpu_limits
from jobs.services.submit import workload_submit
from jobs.services.validation import SubmissionInvalid

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cohort():
    users = get_user_model().objects
    p100 = GpuType.objects.create(slug="p100", display_name="Tesla P100", node_label_value="p100")
    GpuNode.objects.create(
        name="n1", gpu_type=p100, gpus_capacity=16, gpus_allocatable=16, ready=True, last_seen_at=timezone.now()
    )
    AllowedRegistry.objects.create(host="docker.io")
    lab = Cohort.objects.create(name="Lab")
    a = Team.objects.create(name="Alpha", slug="alpha", cohort=lab)
    b = Team.objects.create(name="Beta", slug="beta", cohort=lab)
    Quota.objects.create(team=a, gpu_type=p100, max_gpus=4)
    Quota.objects.create(team=b, gpu_type=p100, max_gpus=2, borrowing_limit=3)
    ann = users.create_user("ann")
    bob = users.create_user("bob")
    Membership.objects.create(user=ann, team=a)
    Membership.objects.create(user=bob, team=b)
    return {"a": a, "b": b, "ann": ann, "bob": bob, "p100": p100}


def spec(**overrides):
    return {"name": "train", "image": "docker.io/library/python:3.12", "gpu_type": "p100", "gpu_count": 1} | overrides


def submit(team, user, **overrides) -> Workload:
    return workload_submit(team=team, owner=user, spec=spec(**overrides))


def held(team) -> int:
    return sum(Workload.objects.filter(team=team, state__in=State.holding()).values_list("gpu_count", flat=True))


def test_b_borrows_a_s_idle_gpus_and_its_namespace_quota_allows_them(cohort):
    b, bob = cohort["b"], cohort["bob"]
    jobs = [submit(b, bob) for _ in range(6)]
    states = [(w.state, w.borrowed) for w in jobs]
    assert states[:2] == [(State.SUBMITTING, False)] * 2
    assert states[2:5] == [(State.SUBMITTING, True)] * 3  # the borrowing limit: 3
    assert states[5][0] == State.QUEUED
    assert team_gpu_limits(b)["nvidia.com/gpu"] == 5  # quota 2 + borrowing limit 3
    assert team_gpu_limits(cohort["a"])["nvidia.com/gpu"] == 4
    event = WorkloadEvent.objects.filter(workload=jobs[4], to_state=State.SUBMITTING).get()
    assert "borrowed" in event.message


def test_a_lending_limit_caps_what_b_borrows(cohort):
    Quota.objects.filter(team=cohort["a"]).update(lending_limit=1)
    jobs = [submit(cohort["b"], cohort["bob"]) for _ in range(5)]
    assert [w.state for w in jobs].count(State.SUBMITTING) == 3


def test_a_team_leaving_the_cohort_stops_borrowing(cohort):
    Team.objects.filter(id=cohort["b"].id).update(cohort=None)
    b = Team.objects.get(id=cohort["b"].id)
    jobs = [submit(b, cohort["bob"]) for _ in range(3)]
    assert [w.state for w in jobs] == [State.SUBMITTING, State.SUBMITTING, State.QUEUED]
    assert team_gpu_limits(b)["nvidia.com/gpu"] == 2


def test_lender_reclaims_restartable_requeued_others_failed_services_preempted(cohort):
    a, b, ann, bob = cohort["a"], cohort["b"], cohort["ann"], cohort["bob"]
    own = [submit(b, bob), submit(b, bob)]
    restartable = submit(b, bob, restartable=True)
    plain = submit(b, bob)
    service = submit(b, bob, kind="service", port=8080)
    assert all(w.borrowed for w in (restartable, plain, service))
    Workload.objects.filter(id__in=[w.id for w in (*own, restartable, plain, service)]).update(
        state=State.RUNNING, started_at=timezone.now()
    )
    lender = submit(a, ann, gpu_count=4)
    assert lender.state == State.SUBMITTING  # admitted in the same decision that preempted
    for w in (*own, restartable, plain, service):
        w.refresh_from_db()
    assert [w.state for w in own] == [State.RUNNING] * 2  # within B's own quota: never preempted
    assert restartable.state == State.QUEUED
    assert (restartable.attempt, restartable.reason, restartable.borrowed) == (1, "Preempted", False)
    assert restartable.requeued_at is not None
    assert (plain.state, plain.reason) == (State.FAILED, "Preempted")
    assert (service.state, service.reason) == (State.PREEMPTED, "Preempted")
    timeline = WorkloadEvent.objects.filter(workload=restartable, reason="Preempted").get()
    assert "Alpha reclaimed" in timeline.message
    assert "SIGTERM" in timeline.message
    assert held(a) == 4
    assert held(b) == 2
    # The requeued job is at the front of B's queue, ahead of older work.
    later = submit(b, bob)
    assert later.state == State.QUEUED
    from jobs.selectors import queue_position

    assert queue_position(restartable) == 1


def test_50_concurrent_submissions_across_a_cohort_never_over_lend(cohort):
    assert connection.vendor == "postgresql"
    a, b, ann, bob = cohort["a"], cohort["b"], cohort["ann"], cohort["bob"]
    barrier = threading.Barrier(50)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            barrier.wait()
            if i % 2:
                submit(a, ann, gpu_count=1 + i % 3)
            else:
                submit(b, bob, gpu_count=1 + i % 2)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # Nothing ever ends here (no cluster), so what is held now is the most ever held.
    assert held(b) <= 2 + 3
    assert held(a) <= 4
    assert held(a) + held(b) <= 6  # the cohort's pool: 4 + 2
    assert held(a) + held(b) >= 5  # and it was used, not trivially respected


def test_per_user_caps_hold_under_50_concurrent_submissions(cohort):
    a, ann = cohort["a"], cohort["ann"]
    Quota.objects.filter(team=a).update(max_gpus=16, user_max_gpus=3)
    Team.objects.filter(id=a.id).update(user_max_queued=10)
    a.refresh_from_db()
    barrier = threading.Barrier(50)
    refused: list[SubmissionInvalid] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            barrier.wait()
            submit(a, ann)
        except SubmissionInvalid as exc:
            refused.append(exc)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert held(a) == 3  # the per-user GPU cap
    assert Workload.objects.filter(team=a, state=State.QUEUED).count() == 10  # the per-user queue cap
    assert len(refused) == 50 - 13
    assert "per member" in refused[0].errors["team"][0]
    waiting = Workload.objects.filter(team=a, state=State.QUEUED).first()
    estimate(team_id=a.id, gpu_type_id=cohort["p100"].id)
    waiting.refresh_from_db()
    assert waiting.wait_reason == "user cap"


def test_estimates_are_stored_with_the_reason(cohort):
    a, ann = cohort["a"], cohort["ann"]
    Team.objects.filter(id=cohort["b"].id).update(cohort=None)
    running = submit(a, ann, gpu_count=4, time_limit_seconds=3600)
    Workload.objects.filter(id=running.id).update(state=State.RUNNING, started_at=timezone.now())
    waiting = submit(a, ann, gpu_count=2, time_limit_seconds=600)
    assert waiting.state == State.QUEUED
    quota_admit(team_id=a.id, gpu_type_id=cohort["p100"].id)
    estimate(team_id=a.id, gpu_type_id=cohort["p100"].id)
    waiting.refresh_from_db()
    assert waiting.wait_reason == "team quota"
    wait = (waiting.estimated_start_at - timezone.now()).total_seconds()
    assert 3500 < wait <= 3600  # when the running job reaches its time limit (no history yet)
