"""The usage page: managers see the whole team, members their own and the team's total; CSV."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.models import State
from tests.ui.conftest import make_workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def usage(world):
    now = timezone.now()
    start = now - timedelta(hours=3)
    # olivia: 2 GPUs for 1 hour; tom: 1 GPU for 2 hours (both finished an hour ago); an outsider too.
    make_workload(world, state=State.SUCCEEDED, gpu_count=2, started_at=start, finished_at=start + timedelta(hours=1))
    make_workload(
        world,
        owner=world.teammate,
        state=State.SUCCEEDED,
        gpu_type=world.k2,
        started_at=start,
        finished_at=start + timedelta(hours=2),
    )
    make_workload(
        world, owner=world.outsider, team=world.other_team, state=State.SUCCEEDED, gpu_count=2, started_at=start,
        finished_at=start + timedelta(hours=2),
    )  # fmt: skip


def test_a_manager_sees_the_whole_team(login, world, usage):
    response = login(world.manager).get(reverse("usage"))
    page = response.content.decode()
    assert 'id="team-total">4.00<' in page
    by_user = page[page.index('id="by-user"') :]
    assert "<td>olivia</td><td>2.00</td>" in by_user
    assert "<td>tom</td><td>2.00</td>" in by_user
    assert "xavier" not in page
    chart = response.context["chart"]
    assert {d["label"] for d in chart["datasets"]} == {"Tesla P100", "Grid K2"}
    assert sum(sum(d["data"]) for d in chart["datasets"]) == pytest.approx(4.0)
    assert json.loads(page.split('id="usage-data" type="application/json">')[1].split("</script>")[0]) == chart


def test_a_member_sees_their_own_and_the_team_total(login, world, usage):
    page = login(world.owner).get(reverse("usage")).content.decode()
    assert 'id="team-total">4.00<' in page
    assert 'id="own-total">2.00<' in page
    assert "<td>tom</td>" not in page
    assert "<td>Grid K2</td>" not in page


def test_csv_download(login, world, usage):
    response = login(world.manager).get(reverse("usage"), {"format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert sum(float(r["gpu_hours"]) for r in rows if r["user"] == "olivia") == pytest.approx(2.0)
    assert sum(float(r["gpu_hours"]) for r in rows) == pytest.approx(4.0)
    assert {r["team"] for r in rows} == {"lab"}
    member_rows = list(
        csv.DictReader(io.StringIO(login(world.owner).get(reverse("usage"), {"format": "csv"}).content.decode()))
    )
    assert {r["user"] for r in member_rows} == {"olivia"}


def test_the_csv_counts_the_work_lost_to_stops_apart(login, world, usage):
    start = timezone.now() - timedelta(hours=3)
    # A preempted run of olivia's: 2 GPUs for an hour, its last 30 minutes since a checkpoint thrown away.
    make_workload(
        world, state=State.FAILED, reason="Preempted", gpu_count=2, started_at=start,
        finished_at=start + timedelta(hours=1), lost_gpu_seconds=2 * 30 * 60,
    )  # fmt: skip
    rows = list(
        csv.DictReader(io.StringIO(login(world.manager).get(reverse("usage"), {"format": "csv"}).content.decode()))
    )
    assert sum(float(r["lost_gpu_hours"]) for r in rows if r["user"] == "olivia") == pytest.approx(1.0)
    assert sum(float(r["lost_gpu_hours"]) for r in rows if r["user"] == "tom") == 0
    assert sum(float(r["gpu_hours"]) for r in rows) == pytest.approx(6.0)  # lost hours are part of the used ones


def test_a_bad_range_names_the_field(login, world):
    response = login(world.owner).get(reverse("usage"), {"start": "2026-05-10", "end": "2026-05-01"})
    assert response.status_code == 400
    assert "The end comes before the start." in response.content.decode()
    response = login(world.owner).get(reverse("usage"), {"start": "yesterday", "end": "2026-05-01"})
    assert response.status_code == 400
    assert 'id="id_start_error"' in response.content.decode()


def test_empty_usage(login, world):
    page = login(world.owner).get(reverse("usage")).content.decode()
    assert "No GPU time was used in this range" in page
    assert "Download CSV" not in page
