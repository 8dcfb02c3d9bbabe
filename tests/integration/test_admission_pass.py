"""One admission pass over every cohort and GPU type (`admit_all`) on PostgreSQL: it decides what the
plan decides for each cohort and type from every workload one by one, in one transaction, and writes
the admitted and their timeline rows in bulk. No cluster: nothing here reaches Kubernetes.

Each test runs inside one transaction that is rolled back: the suite's running engine (its beat sweeps
with `admit_all` every few seconds) cannot see this world, so it cannot admit the queue first."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from identity.models import Membership
from jobs.models import Cohort, GpuType, Quota, State, Team, Workload, WorkloadEvent
from jobs.services.queue import sharing_plan
from jobs.services.queue.admission import admit_all
from jobs.services.queue.cohort_facts import gather_cohort_facts

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    """A cohort of three teams (A queues nothing: it lends), two teams alone (one ordering by fair share,
    one out of budget), two GPU types, work running (some of it borrowed) and a queue of 120."""
    rng = random.Random(16)
    users = [get_user_model().objects.create_user(f"pass-{i}") for i in range(4)]
    types = [
        GpuType.objects.create(slug=f"pass-{i}", display_name=f"Pass {i}", node_label_value=f"pass-{i}")
        for i in range(2)
    ]
    lab = Cohort.objects.create(name="Pass lab")
    teams = [
        Team.objects.create(slug="pass-a", name="Pass A", cohort=lab),
        Team.objects.create(slug="pass-b", name="Pass B", cohort=lab),
        Team.objects.create(slug="pass-c", name="Pass C", cohort=lab, monthly_gpu_hour_budget=1000),
        Team.objects.create(slug="pass-d", name="Pass D", fair_share=True),
        Team.objects.create(slug="pass-e", name="Pass E", monthly_gpu_hour_budget=0),  # spent
    ]
    Membership.objects.bulk_create(Membership(team=t, user=u) for t in teams for u in users)
    for t in teams:
        for g in types:
            Quota.objects.create(
                team=t, gpu_type=g, max_gpus=8 if t is teams[0] else rng.choice([2, 4]),
                borrowing_limit=3 if t.cohort_id else 0, lending_limit=None if t is teams[0] else rng.choice([None, 1]),
            )  # fmt: skip
    now = timezone.now()
    for t in teams:
        for g in types:
            for i in range(rng.randint(0, 3)):
                Workload.objects.create(
                    team=t, owner=users[i % 4], name="running", kind="batch", image="ubuntu", gpu_type=g,
                    gpu_count=1, time_limit_seconds=3600, state=State.RUNNING,
                    borrowed=bool(t.cohort_id) and i == 2, admitted_at=now - timedelta(minutes=10 - i),
                    started_at=now - timedelta(minutes=9 - i),
                )  # fmt: skip
    queued = [
        Workload.objects.create(
            team=teams[1 + i % 4], owner=users[rng.randrange(4)], name=f"q{i}", kind="batch", image="ubuntu",
            gpu_type=types[rng.randrange(2)], gpu_count=rng.choice([1, 1, 2, 4]), time_limit_seconds=3600,
            priority=rng.choice([0, 0, 5]), created_at=now - timedelta(seconds=200 - i),
        )
        for i in range(120)
    ]  # fmt: skip
    return {"teams": teams, "types": types, "queued": queued}


def expected_plans(world) -> sharing_plan.Plan:
    """Each cohort (or lone team) and type planned from every held workload one by one (the facts the
    estimates read), the spent team's queue left out."""
    teams, types = world["teams"], world["types"]
    groups = [teams[:3], [teams[3]], [teams[4]]]
    spent = {teams[4].id}
    total = sharing_plan.Plan()
    for group in groups:
        for g in types:
            quotas = list(Quota.objects.filter(team__in=group, gpu_type=g).select_related("team").order_by("id"))
            facts = gather_cohort_facts(quotas, g.id, skip_teams=spent)
            result = sharing_plan.plan(facts.teams, facts.held, facts.queued)
            total.admit.extend(result.admit)
            total.borrowed |= result.borrowed
            total.preempt.update(result.preempt)
    return total


def test_admit_all_decides_what_each_cohort_s_plan_decides(world):
    expected = expected_plans(world)
    assert len(expected.admit) >= 10  # the pass has something to do
    assert expected.borrowed  # and some of it borrows from the cohort

    before = {q.id: held(q) for q in Quota.objects.all()}
    admitted = admit_all()

    assert admitted == len(expected.admit)
    submitting = dict(Workload.objects.filter(state=State.SUBMITTING).values_list("id", "borrowed"))
    assert set(submitting) == set(expected.admit)
    assert {i for i, borrowed in submitting.items() if borrowed} == expected.borrowed
    # One timeline row each, written with the move.
    events = WorkloadEvent.objects.filter(workload_id__in=expected.admit, to_state=State.SUBMITTING)
    assert sorted(events.values_list("workload_id", flat=True)) == sorted(expected.admit)
    for workload_id, from_state, reason, message in events.values_list(
        "workload_id", "from_state", "reason", "message"
    ):
        assert (from_state, reason) == (State.QUEUED, "Admitted")
        if workload_id in expected.borrowed:
            assert message.startswith("GPUs borrowed from the cohort's idle quota (beyond the team's ")
        else:
            assert message.startswith("GPUs reserved (")
    assert {w.message for w in Workload.objects.filter(id__in=expected.borrowed)} <= {
        "GPUs borrowed from the cohort's idle quota; creating Kubernetes objects."
    }
    # The spent team's queue waits; nobody holds more than its quota and borrowing limit.
    assert not Workload.objects.filter(team=world["teams"][4], state=State.SUBMITTING).exists()
    for quota in Quota.objects.all():
        if held(quota) > before[quota.id]:
            assert held(quota) <= quota.max_gpus + quota.borrowing_limit


def held(quota: Quota) -> int:
    return sum(
        Workload.objects.filter(
            team_id=quota.team_id, gpu_type_id=quota.gpu_type_id, state__in=State.holding()
        ).values_list("gpu_count", flat=True)
    )


def test_a_second_pass_admits_nothing_more(world):
    first = admit_all()
    assert first > 0
    assert admit_all() == 0


def test_the_pass_reads_each_team_s_queue_head_as_the_plan_defines_it(world):
    """The pass picks the head of each team's queue in SQL; it must be `sharing_plan.queue_head` of the
    team's whole queue in its own order (fair share included), with the same places, for every room."""
    from jobs.services.queue.admission import _cohorts, _queue_heads, _queue_heads_read_whole
    from jobs.services.queue.cohort_facts import fair_share_usage

    teams, types = world["teams"], world["types"]
    Quota.objects.filter(team=teams[3]).update(user_max_gpus=2)  # the fair-share team also caps people
    cohort_of = _cohorts([t.id for t in teams])
    fair = fair_share_usage(t.id for t in teams)
    assert fair[teams[3].id]  # its people have used GPUs lately: its order is not plain FIFO
    for rooms_of in (
        lambda t: sharing_plan.Room(3, per_person=t.fair_share),
        lambda t: sharing_plan.Room(0),
        lambda t: sharing_plan.Room(None),
        lambda t: sharing_plan.Room(7),
    ):
        rooms = {(t.id, g.id): rooms_of(t) for t in teams[1:4] for g in types}
        heads, left_out = _queue_heads(rooms, cohort_of, fair)
        in_python = _queue_heads_read_whole(rooms, cohort_of, fair)  # SQLite's way, the same
        assert {k: sorted((p, e.id) for p, e in v) for k, v in in_python[0].items()} == {
            k: sorted((p, e.id) for p, e in v) for k, v in heads.items()
        }
        assert {k: v for k, v in in_python[1].items() if v} == {k: v for k, v in left_out.items() if v}
        for g in types:
            for t in teams[1:4]:
                entries = [
                    sharing_plan.QueueEntry(
                        id=w_id, team_id=t.id, user_id=owner_id, gpus=gpus, priority=priority,
                        created=created.timestamp(), requeued=requeued.timestamp() if requeued else None,
                    )
                    for w_id, owner_id, gpus, priority, created, requeued in Workload.objects.filter(
                        team=t, gpu_type=g, state=State.QUEUED
                    ).values_list("id", "owner_id", "gpu_count", "priority", "created_at", "requeued_at")
                ]  # fmt: skip
                own_order = sharing_plan.team_queues(entries, fair)[t.id]
                expected = [(place, e.id) for place, e in sharing_plan.queue_head(own_order, rooms[(t.id, g.id)])]
                key = (cohort_of[t.id], g.id)
                read = [(place, e.id) for place, e in heads.get(key, []) if e.team_id == t.id]
                assert sorted(read) == expected
        for key in heads:
            queued = Workload.objects.filter(team_id__in=key[0], gpu_type_id=key[1], state=State.QUEUED)
            assert left_out.get(key, 0) == queued.filter(team__in=teams[1:4]).count() - len(heads[key])


def test_per_person_caps_and_requeued_work_are_decided_as_the_plan_decides(world):
    teams = world["teams"]
    Quota.objects.filter(team__in=teams[1:4]).update(user_max_gpus=2)
    requeued = world["queued"][60:70]
    Workload.objects.filter(id__in=[w.id for w in requeued]).update(requeued_at=timezone.now())
    expected = expected_plans(world)
    assert expected.admit

    assert admit_all() == len(expected.admit)
    assert set(Workload.objects.filter(state=State.SUBMITTING).values_list("id", flat=True)) == set(expected.admit)
