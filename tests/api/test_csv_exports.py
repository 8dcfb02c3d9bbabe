"""Every CSV export (usage page, API, admin report) neutralizes cells a spreadsheet would run as a
formula: a username or team name chosen as `=HYPERLINK(...)` or `-2+3` opens as text."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from identity.models import Membership
from jobs.models import State, Workload
from jobs.services.usage.csv_export import safe_cell

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("text", ["=1+1", "+1", "-2+3", "@SUM(A1)", "\tx", "\rx"])
def test_text_that_starts_a_formula_is_quoted(text):
    assert safe_cell(text) == "'" + text


def test_ordinary_text_and_numbers_are_left_alone():
    assert [safe_cell(v) for v in ("olivia", "a=b", 3, -1.5, None)] == ["olivia", "a=b", 3, -1.5, None]


@pytest.fixture
def hostile(world):
    """A member whose username a spreadsheet would evaluate, with usage yesterday, in a team so named."""
    world.team.name = '=HYPERLINK("http://evil.example","Vision")'
    world.team.save()
    user = get_user_model().objects.create(username="-2+3")
    Membership.objects.create(user=user, team=world.team)
    start = timezone.now().replace(hour=8, minute=0, second=0, microsecond=0) - timedelta(days=1)
    Workload.objects.create(
        team=world.team, owner=user, name="ran", kind="batch", image="docker.io/x:1", gpu_type=world.p100,
        gpu_count=1, time_limit_seconds=86400, state=State.SUCCEEDED, created_at=start, started_at=start,
        finished_at=start + timedelta(hours=2),
    )  # fmt: skip
    return user


def cells(response) -> list[list[str]]:
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(response.content.decode())))


def test_the_api_csv(world, hostile):
    start = (timezone.localdate() - timedelta(days=3)).isoformat()
    response = world.client("manager").get(f"/api/v1/usage/?start={start}&group_by=user&format=csv")
    # none of it borrowed or lost
    assert ["'-2+3", "2.000000", "2.000000", "0.000000", "2.000000", "0.000000"] in cells(response)


def test_the_usage_page_csv(client, world, hostile):
    client.force_login(world.manager)
    rows = cells(client.get("/usage/", {"format": "csv"}))
    assert any(row[2] == "'-2+3" for row in rows[1:]), rows


def test_the_admin_report_csv(admin_client, world, hostile):
    first = (timezone.localdate() - timedelta(days=3)).isoformat()
    last = timezone.localdate().isoformat()
    rows = cells(admin_client.get(f"/admin/jobs/workload/usage-report/?start={first}&end={last}&export=csv"))
    assert rows[1][0] == "'" + world.team.name
