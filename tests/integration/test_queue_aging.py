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
        assert reserved == {w["large"].id}
        assert line.startswith("Waiting 1.0 h: moved ahead of 1 smaller workload submitted before it")
        assert 'id="aging">Waiting 1.0 h: moved ahead of 1 smaller workload' in page
    else:
        assert small.state == State.SUBMITTING
        assert line == ""
        assert 'id="aging"' not in page
