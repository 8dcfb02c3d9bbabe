"""One set of report rules behind the three front ends: the usage page, the usage API and the admin
report count the same hours over the same range rule, and the workload list, the workload page and the
API show the same queue positions."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.models import State
from tests.ui.conftest import make_workload

pytestmark = pytest.mark.django_db

ADMIN_REPORT = "/admin/jobs/workload/usage-report/"


@pytest.fixture
def admin_user(world):
    return world.admin


# --- the date-range rule ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("first", "last", "accepted"),
    [
        (date(2025, 1, 1), date(2025, 1, 1), True),  # one day
        (date(2025, 1, 1), date(2026, 1, 1), True),  # 366 days, both ends counted: the longest range
        (date(2025, 1, 1), date(2026, 1, 2), False),  # 367 days: the API and admin used to accept this
        (date(2025, 1, 2), date(2025, 1, 1), False),
    ],
)
def test_the_page_the_api_and_admin_share_one_range_rule(client, world, admin_user, first, last, accepted):
    query = {"start": first.isoformat(), "end": last.isoformat()}
    client.force_login(world.manager)
    page = client.get(reverse("usage"), query)
    api = client.get("/api/v1/usage/", query)
    client.force_login(admin_user)
    admin = client.get(ADMIN_REPORT, query)
    if accepted:
        assert (page.status_code, api.status_code) == (200, 200)
        assert (api.json()["start"], api.json()["end"]) == (first.isoformat(), last.isoformat())
        assert admin.context["report"] is not None
    else:
        assert (page.status_code, api.status_code) == (400, 400)
        assert list(api.json()["error"]["fields"]) == ["end"]
        assert page.context["form"].errors["end"] == api.json()["error"]["fields"]["end"]
        assert admin.context["report"] is None
        assert admin.context["form"].errors["end"] == api.json()["error"]["fields"]["end"]


# --- one usage builder ------------------------------------------------------------------------------
def test_the_page_the_api_and_admin_count_the_same_hours(client, world, admin_user):
    now = timezone.now()
    start = now - timedelta(hours=6)
    make_workload(world, state=State.SUCCEEDED, gpu_count=2, started_at=start, finished_at=start + timedelta(hours=1))
    make_workload(
        world, owner=world.teammate, state=State.SUCCEEDED, gpu_type=world.k2, started_at=start,
        finished_at=start + timedelta(minutes=90),
    )  # fmt: skip
    make_workload(
        world, owner=world.outsider, team=world.other_team, state=State.SUCCEEDED, started_at=start,
        finished_at=start + timedelta(hours=4),
    )  # fmt: skip
    today = timezone.localdate()
    query = {"start": (today - timedelta(days=2)).isoformat(), "end": today.isoformat()}

    client.force_login(world.manager)
    page = client.get(reverse("usage"), query).context
    api = client.get("/api/v1/usage/", {**query, "group_by": "gpu_type"}).json()
    client.force_login(admin_user)
    admin = client.get(ADMIN_REPORT, {**query, "teams": [world.team.id]}).context["report"]

    assert page["team_total"].gpu_hours == pytest.approx(3.5)
    assert api["total_gpu_hours"] == pytest.approx(3.5)
    assert admin["total_gpu_hours"] == pytest.approx(3.5)
    page_by_type = {t.slug: hours for t, hours, _equivalent, _weighted in page["by_type"]}
    api_by_type = {row["key"]: row["gpu_hours"] for row in api["rows"]}
    admin_by_type = {line["gpu_type"]: line["gpu_hours"] for line in admin["lines"]}
    assert page_by_type == api_by_type == {"p100": pytest.approx(2.0), "k2": pytest.approx(1.5)}
    assert admin_by_type == {"Tesla P100": pytest.approx(2.0), "Grid K2": pytest.approx(1.5)}


# --- one queue-position computation -------------------------------------------------------------------
def test_the_list_the_workload_page_and_the_api_show_the_same_queue_positions(client, world):
    now = timezone.now()
    same_time = now - timedelta(minutes=30)
    # Admission order: priority first, then the earlier, then (same instant) the lower id.
    urgent = make_workload(world, state=State.QUEUED, priority=50, created_at=now - timedelta(minutes=1))
    tie_a = make_workload(world, state=State.QUEUED, created_at=same_time)
    tie_b = make_workload(world, owner=world.teammate, state=State.QUEUED, created_at=same_time)
    late = make_workload(world, state=State.QUEUED, created_at=now - timedelta(minutes=2))
    other_type = make_workload(world, state=State.QUEUED, gpu_type=world.k2, created_at=now)
    make_workload(world, state=State.RUNNING)
    expected = {urgent.uid: 1, tie_a.uid: 2, tie_b.uid: 3, late.uid: 4, other_type.uid: 1}

    client.force_login(world.manager)
    listed = client.get(reverse("workload_list"), {"scope": "team"}).context["page"].object_list
    from_list = {w.uid: w.queue_position for w in listed if w.state == State.QUEUED}
    from_pages = {uid: client.get(reverse("workload_detail", args=[uid])).context["position"] for uid in expected}
    api_list = client.get("/api/v1/workloads/", {"team": "lab"}).json()["results"]
    from_api_list = {w["uid"]: w["queue_position"] for w in api_list if w["state"] == State.QUEUED}
    from_api_detail = {uid: client.get(f"/api/v1/workloads/{uid}/").json()["queue_position"] for uid in expected}
    from_api_queue = {w["uid"]: w["queue_position"] for w in client.get("/api/v1/teams/lab/queue/").json()["queued"]}

    assert from_list == from_pages == from_api_list == from_api_detail == from_api_queue == expected
    assert [w["uid"] for w in api_list if w["state"] != State.QUEUED] != []  # others have no position
    assert all(w["queue_position"] is None for w in api_list if w["state"] != State.QUEUED)
