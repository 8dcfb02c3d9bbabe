"""Aging on PostgreSQL through the real admission pass: where the GPU type ages, a 4-GPU workload that
has waited an hour goes ahead of a 1-GPU one that waited two, is reserved for, and the long small job is
held behind it; where it does not, the small one starts first, as before. The workload's queue page line
says what aging did."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.utils import timezone

from identity.models import Membership
from jobs.models import GpuType, QueueReservation, Quota, State, Team, Workload
from jobs.services.queue.admission import admit_all
from jobs.services.queue.aging_explained import aging_line

pytestmark = pytest.mark.django_db

NOON = timezone.make_aware(datetime(2026, 3, 11, 12, 0))
HOUR = 3600


def world(*, aging: bool) -> dict:
    owner = get_user_model().objects.create_user(f"ag-ann-{aging}")
    team = Team.objects.create(slug=f"ag-lab-{aging}", name=f"AG Lab {aging}")
    Membership.objects.create(team=team, user=owner)
    gpu = GpuType.objects.create(
        slug=f"ag-{aging}", display_name=f"AG {aging}", node_label_value=f"ag-{aging}",
        reserve_after_seconds=0, queue_aging=aging,
    )  # fmt: skip
    Quota.objects.create(team=team, gpu_type=gpu, max_gpus=4)

    def make(name: str, gpus: int, limit: int, at: datetime, **extra) -> Workload:
        return Workload.objects.create(
            team=team, owner=owner, name=name, kind="batch", image="ubuntu", gpu_type=gpu, gpu_count=gpus,
            time_limit_seconds=limit, created_at=at, **extra,
        )  # fmt: skip

    # 2 of the 4 GPUs held until 13:00 by their limit; a 1-GPU job of 4 h queued at 10:00, a 4-GPU at 11:00.
    make("running", 2, 2 * HOUR, NOON - timedelta(hours=3), state=State.RUNNING, admitted_at=NOON - timedelta(hours=1),
         started_at=NOON - timedelta(hours=1))  # fmt: skip
    small = make("small", 1, 4 * HOUR, NOON - timedelta(hours=2))
    large = make("large", 4, HOUR, NOON - timedelta(hours=1))
    return {"small": small, "large": large, "owner": owner}


@pytest.mark.parametrize("aging", [True, False])
def test_a_large_job_that_waited_goes_first_only_where_the_type_ages(aging, client):
    w = world(aging=aging)
    client.force_login(w["owner"])
    with time_machine.travel(NOON, tick=False):
        admit_all()
        line = aging_line(Workload.objects.get(id=w["large"].id))
        page = client.get(f"/workloads/{w['large'].uid}/").content.decode()
    small = Workload.objects.get(id=w["small"].id)
    reserved = set(QueueReservation.objects.filter(gpu_type=small.gpu_type).values_list("workload_id", flat=True))
    if aging:
        # 4 GPUs x 1 h waited outweighs 1 GPU x 2 h: the large one is the head, reserved for 13:00, and
        # the 4-hour small job would run past that: it stays queued behind the reservation.
        assert small.state == State.QUEUED
        # Held back and behind the head, the small one is not promised GPUs before it has waited
        # RESERVE_DEEPER_AFTER_SECONDS (a promise made at once would hold GPUs against what comes ahead).
        assert reserved == {w["large"].id}
        assert line.startswith("Waiting 1.0 h: moved ahead of 1 smaller workload submitted before it")
        assert 'id="aging">Waiting 1.0 h: moved ahead of 1 smaller workload' in page
    else:
        assert small.state == State.SUBMITTING
        assert line == ""
        assert 'id="aging"' not in page


def backlog(*, aging: bool) -> dict:
    """4 GPUs held until 13:00; six 1-GPU jobs of an hour queued at 10:00; a 4-GPU job of an hour queued at
    11:00 and another at 11:59. No reservations: the order alone decides."""
    owner = get_user_model().objects.create_user(f"ab-ann-{aging}")
    team = Team.objects.create(slug=f"ab-lab-{aging}", name=f"AB Lab {aging}")
    Membership.objects.create(team=team, user=owner)
    gpu = GpuType.objects.create(
        slug=f"ab-{aging}", display_name=f"AB {aging}", node_label_value=f"ab-{aging}", queue_aging=aging
    )
    Quota.objects.create(team=team, gpu_type=gpu, max_gpus=4)

    def make(name: str, gpus: int, at: datetime, limit: int = HOUR, **extra) -> Workload:
        return Workload.objects.create(
            team=team, owner=owner, name=name, kind="batch", image="ubuntu", gpu_type=gpu, gpu_count=gpus,
            time_limit_seconds=limit, created_at=at, **extra,
        )  # fmt: skip

    make("running", 4, NOON - timedelta(hours=2), 90 * 60, state=State.RUNNING,
         admitted_at=NOON - timedelta(minutes=30), started_at=NOON - timedelta(minutes=30))  # fmt: skip
    small = [make(f"small-{i}", 1, NOON - timedelta(hours=2, seconds=-i)) for i in range(6)]
    first = make("large-1", 4, NOON - timedelta(hours=1))
    second = make("large-2", 4, NOON - timedelta(minutes=1))
    return {"owner": owner, "small": small, "first": first, "second": second}


@pytest.mark.parametrize("aging", [True, False])
def test_the_queue_position_and_the_estimate_follow_the_order_admission_will_use(aging, client):
    from rest_framework.test import APIClient

    from jobs.selectors import queue_position, queue_positions
    from jobs.services.queue import start_estimates

    b = backlog(aging=aging)
    client.force_login(b["owner"])
    api = APIClient()
    api.force_authenticate(b["owner"])
    with time_machine.travel(NOON, tick=False):
        positions = {w.name: queue_position(w) for w in [*b["small"], b["first"], b["second"]]}
        listed = queue_positions(Workload.objects.filter(name__startswith="large"))
        page = client.get(f"/workloads/{b['first'].uid}/").content.decode()
        detail = api.get(f"/api/v1/workloads/{b['first'].uid}/").json()
        team_queue = api.get(f"/api/v1/teams/{b['first'].team.slug}/queue/").json()["queued"]
        start_estimates.estimate(team_id=b["first"].team_id, gpu_type_id=b["first"].gpu_type_id)
        admit_all()  # nothing is free: the order is only shown, nothing starts
    second = Workload.objects.get(id=b["second"].id)
    assert Workload.objects.filter(team_id=second.team_id, state=State.QUEUED).count() == 8
    if aging:
        # 4 GPUs x 1 h waited outweighs 1 GPU x 2 h: the first large job is next, as admission will take it.
        assert positions["large-1"] == 1
        assert [positions[f"small-{i}"] for i in range(6)] == [2, 3, 4, 5, 6, 7]
        assert positions["large-2"] == 8  # 4 GPUs x 1 min: last for now
        assert "#1 in the queue" in page
        # At 13:00 the first large job starts; at 14:00 the second has waited 2 h 1 min (x 4 GPUs), more
        # than any 1-GPU job's 4 h: the estimate counts the aging still to come.
        assert second.estimated_start_at == NOON + timedelta(hours=2)
    else:
        assert positions["large-1"] == 7
        assert positions["large-2"] == 8
        assert "#7 in the queue" in page
        # First come, first served: four small ones at 13:00, the last two at 14:00, the first large one
        # once all 4 GPUs are free again (15:00), the second after it.
        assert second.estimated_start_at == NOON + timedelta(hours=4)
    assert detail["queue_position"] == positions["large-1"]
    assert listed == {b["first"].id: positions["large-1"], b["second"].id: positions["large-2"]}
    # The team's queue in the API is listed in the order its positions number it.
    assert [w["queue_position"] for w in team_queue] == list(range(1, 9))
    assert team_queue[positions["large-1"] - 1]["name"] == "large-1"
