"""Why my share on the queue page (PostgreSQL, the page as a member and a manager see it): decayed
GPU-hours of the team's members, names only to managers, the half-life and the member's place."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.utils import timezone

from identity.models import Membership, Role
from jobs.models import GpuType, Quota, State, Team, Workload

pytestmark = pytest.mark.django_db

NOON = timezone.make_aware(datetime(2026, 3, 10, 12, 0))


@pytest.fixture
def team():
    lab = Team.objects.create(slug="ms-lab", name="MS Lab", fair_share=True, fair_share_half_life_hours=24)
    gpu = GpuType.objects.create(slug="ms-a100", display_name="MS A100", node_label_value="ms-a100")
    Quota.objects.create(team=lab, gpu_type=gpu, max_gpus=4)
    people = {}
    for name, role, hours in (("ms-ann", Role.MEMBER, 2), ("ms-bob", Role.MEMBER, 8), ("ms-boss", Role.MANAGER, 0)):
        user = get_user_model().objects.create_user(name)
        Membership.objects.create(team=lab, user=user, role=role)
        people[name] = user
        if hours:
            Workload.objects.create(
                team=lab, owner=user, name="done", kind="batch", image="ubuntu", gpu_type=gpu, gpu_count=1,
                time_limit_seconds=86400, state=State.SUCCEEDED, started_at=NOON - timedelta(hours=hours),
                finished_at=NOON,
            )  # fmt: skip
    return people


def share_section(client, user) -> str:
    client.force_login(user)
    page = client.get("/queue/").content.decode()
    return page.split('aria-labelledby="share-h"', 1)[1].split("</section>", 1)[0]


def test_a_member_sees_their_usage_and_place_but_not_their_teammates_names(team, client):
    with time_machine.travel(NOON, tick=False):
        section = share_section(client, team["ms-ann"])
    assert "1.94 GPU-hours" in section  # 2 GPU-hours that just ended, the first of them 2 h ago: decayed a little
    assert "half-life of 24 h" in section
    assert "after those of the 1 member who used less" in section  # the manager used nothing
    assert "ms-ann (you)" in section
    assert "ms-bob" not in section
    assert "ms-boss" not in section
    assert section.count("a member") == 2


def test_a_manager_sees_every_member_by_name(team, client):
    with time_machine.travel(NOON, tick=False):
        section = share_section(client, team["ms-boss"])
    assert "ms-bob" in section
    assert "ms-ann" in section
    assert "first in line" in section
