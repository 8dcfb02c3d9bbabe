"""Fair share between the teams of a cohort (issue 38, item 4), on PostgreSQL through the real admission
pass: where the cohort shares borrowed GPUs fairly, the lender's idle GPUs go to the team that has borrowed
least recently, not to the team whose workload came first; without it, first come first served. The
queue page tells a member where their team stands.

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
from jobs.services.queue.sharing_plan import Held, TeamQuota, Waiting, plan
from jobs.services.queue.start_estimates import forecast_cohort

pytestmark = pytest.mark.django_db

NOON = timezone.make_aware(datetime(2026, 3, 12, 12, 0))


def build(*, fair: bool) -> dict:
    """A lender with 4 idle GPUs; Early and Late each hold their own 1 GPU and may borrow 3 more. Early
    borrowed 3 GPUs for 4 hours this morning; Late never borrowed. Early queues a 3-GPU job, then Late
    does: the pool has 4 GPUs to lend, enough for one of them."""
    cohort = Cohort.objects.create(name="FB lab", fair_borrowing=fair)
    gpu = GpuType.objects.create(slug="fb-a100", display_name="FB A100", node_label_value="fb-a100")
    people = {}
    teams = {}
    for name, quota, limit in (("lender", 4, 0), ("early", 1, 3), ("late", 1, 3)):
        team = Team.objects.create(slug=f"fb-{name}", name=f"FB {name}", cohort=cohort)
        Quota.objects.create(team=team, gpu_type=gpu, max_gpus=quota, borrowing_limit=limit)
        user = get_user_model().objects.create_user(f"fb-{name}-member")
        Membership.objects.create(team=team, user=user)
        teams[name], people[name] = team, user

    def workload(name: str, team: str, gpus: int, **fields) -> Workload:
        return Workload.objects.create(
            team=teams[team], owner=people[team], name=name, kind="batch", image="ubuntu", gpu_type=gpu,
            gpu_count=gpus, time_limit_seconds=3600, **fields,
        )  # fmt: skip

    workload("early-borrowed", "early", 3, state=State.SUCCEEDED, borrowed=True, created_at=NOON - timedelta(hours=7),
             started_at=NOON - timedelta(hours=6), finished_at=NOON - timedelta(hours=2))  # fmt: skip
    for team in ("early", "late"):
        workload(f"{team}-own", team, 1, state=State.RUNNING, created_at=NOON - timedelta(minutes=30),
                 admitted_at=NOON - timedelta(minutes=30), started_at=NOON - timedelta(minutes=29))  # fmt: skip
    early = workload("early-big", "early", 3, created_at=NOON - timedelta(minutes=2))
    late = workload("late-big", "late", 3, created_at=NOON - timedelta(minutes=1))
    return {"early": early, "late": late, "people": people, "gpu": gpu, "teams": teams}


def states(world) -> tuple[str, str]:
    for w in (world["early"], world["late"]):
        w.refresh_from_db()
    return world["early"].state, world["late"].state


@pytest.mark.parametrize("fair", [True, False])
def test_borrowed_gpus_go_to_the_team_that_borrowed_least_recently_where_the_cohort_asks(fair, client):
    world = build(fair=fair)
    with time_machine.travel(NOON, tick=False):
        # The estimate foresees the same turn as admission takes.
        _facts, foreseen = forecast_cohort(team_id=world["teams"]["early"].id, gpu_type_id=world["gpu"].id)
        now_first = world["late"].id if fair else world["early"].id
        then = world["early"].id if fair else world["late"].id
        assert foreseen[now_first].start_in == 0.0
        assert foreseen[then].start_in is None or foreseen[then].start_in > 0.0
        admit_all()
    early, late = states(world)
    if fair:
        assert (early, late) == (State.QUEUED, State.SUBMITTING)  # Late borrowed less: it goes first
        assert world["late"].borrowed
    else:
        assert (early, late) == (State.SUBMITTING, State.QUEUED)  # first come, first served

    # The queue page explains the turn to a member of the team that waits, without naming other teams.
    waiting = "early" if fair else "late"
    client.force_login(world["people"][waiting])
    with time_machine.travel(NOON, tick=False):
        page = client.get("/queue/").content.decode()
    if fair:
        section = page.split('id="borrow-turns">', 1)[1].split("</ul>", 1)[0]
        assert "FB A100: your team borrowed <strong>" in section
        assert "2 other teams borrowed less and borrow first" in section  # Late, and the lender never borrowed
        assert "FB late" not in section
        assert "FB lender" not in section
    else:
        assert 'id="borrow-turns"' not in page


def test_the_plan_orders_borrowing_by_decayed_borrowed_hours_and_keeps_priority_first():
    teams = {
        1: TeamQuota(1, 4),
        2: TeamQuota(2, 1, borrowing_limit=3),
        3: TeamQuota(3, 1, borrowing_limit=3),
    }
    held = [Held(-1, 2, 1), Held(-2, 3, 1)]
    queued = [Waiting(20, 2, 3, created=1.0), Waiting(30, 3, 3, created=2.0)]
    assert plan(teams, held, queued).admit == [20]  # first come
    assert plan(teams, held, queued, borrowed_hours={2: 9.0, 3: 0.5}).admit == [30]
    urgent = [Waiting(20, 2, 3, priority=5, created=1.0), Waiting(30, 3, 3, created=2.0)]
    assert plan(teams, held, urgent, borrowed_hours={2: 9.0, 3: 0.5}).admit == [20]  # priority before fairness
