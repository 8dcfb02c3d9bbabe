"""Borrowing where the GPU type reserves (issue 38 beside issue 16), on PostgreSQL through the real
admission pass. A team whose own quota is full borrows its cohort's idle GPUs as before, whether or not
its type reserves for the head of the queue (the demo's p100 reserves at once). Found from outside: with
reservations on, a borrowed admission was held to the team's quota and always held back ("reservation
ahead"), so a full team never borrowed.

No cluster: rows are written as the tracker would. Time is frozen (time-machine)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.utils import timezone

from identity.models import Membership
from jobs.models import Cohort, GpuType, Quota, State, Team, Workload
from jobs.services.queue.admission import admit_all

pytestmark = pytest.mark.django_db

NOON = timezone.make_aware(datetime(2026, 3, 12, 12, 0))


@pytest.mark.parametrize("reserve_after", [None, 0])
def test_a_full_team_borrows_the_cohorts_idle_gpus_whether_or_not_its_type_reserves(reserve_after):
    cohort = Cohort.objects.create(name="BR lab")
    gpu = GpuType.objects.create(
        slug="br-p100", display_name="BR P100", node_label_value="br-p100", reserve_after_seconds=reserve_after
    )
    teams, people = {}, {}
    for name, limit in (("demo", 4), ("other", 0)):
        teams[name] = Team.objects.create(slug=f"br-{name}", name=f"BR {name}", cohort=cohort)
        Quota.objects.create(team=teams[name], gpu_type=gpu, max_gpus=4, borrowing_limit=limit)
        people[name] = get_user_model().objects.create_user(f"br-{name}-member")
        Membership.objects.create(team=teams[name], user=people[name])

    def workload(name: str, **fields) -> Workload:
        return Workload.objects.create(
            team=teams["demo"], owner=people["demo"], name=name, kind="batch", image="ubuntu", gpu_type=gpu,
            gpu_count=1, time_limit_seconds=3600, **fields,
        )  # fmt: skip

    for k in range(4):  # the team's own four GPUs, busy for another 50 minutes by their limits
        workload(f"own-{k}", state=State.RUNNING, created_at=NOON - timedelta(minutes=11),
                 admitted_at=NOON - timedelta(minutes=11), started_at=NOON - timedelta(minutes=10))  # fmt: skip
    fifth = workload("fifth", created_at=NOON - timedelta(seconds=30))
    sixth = workload("sixth", created_at=NOON - timedelta(seconds=20))
    with time_machine.travel(NOON, tick=False):
        admit_all()
    for w in (fifth, sixth):
        w.refresh_from_db()
        assert (w.state, w.borrowed, w.wait_reason) == (State.SUBMITTING, True, "")
