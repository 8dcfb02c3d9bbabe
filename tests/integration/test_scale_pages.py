"""A team's queue page and the API list cost the same however long the queue behind them is (PostgreSQL):
the statements they send do not grow with the workloads, and the queue page reads estimates only for
the first waiting it shows (issue 41: flat per-page costs)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from identity.models import Membership, Role
from jobs.models import Cohort, GpuType, Quota, State, Team, Workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab():
    cohort = Cohort.objects.create(name="SP cohort")
    team = Team.objects.create(slug="sp-lab", name="SP Lab", cohort=cohort)
    other = Team.objects.create(slug="sp-other", name="SP Other", cohort=cohort)
    gpu = GpuType.objects.create(slug="sp-a100", display_name="SP A100", node_label_value="sp-a100")
    for t in (team, other):
        Quota.objects.create(team=t, gpu_type=gpu, max_gpus=4, borrowing_limit=2)
    member = get_user_model().objects.create_user("sp-member")
    Membership.objects.create(team=team, user=member, role=Role.MEMBER)
    began = timezone.now() - timedelta(minutes=30)
    for t in (team, other):
        Workload.objects.bulk_create(
            Workload(
                team=t, owner=member, name=f"run-{i}", kind="batch", image="ubuntu", gpu_type=gpu, gpu_count=1,
                time_limit_seconds=3600, state=State.RUNNING, started_at=began, admitted_at=began,
                submitted_at=began,
            )
            for i in range(4)
        )  # fmt: skip
    return team, other, gpu, member


def _queue(team, owner, gpu, n: int, start: int = 0) -> None:
    Workload.objects.bulk_create(
        Workload(
            team=team, owner=owner, name=f"q-{start + i}", kind="batch", image="ubuntu", gpu_type=gpu,
            gpu_count=1 + i % 2, time_limit_seconds=3600, state=State.QUEUED,
        )
        for i in range(n)
    )  # fmt: skip


def _statements(client, url: str) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured), response.content.decode()


def test_the_queue_page_sends_as_many_statements_for_a_long_queue_as_for_a_short_one(client, lab):
    team, other, gpu, member = lab
    _queue(team, member, gpu, 3)
    _queue(other, member, gpu, 3)
    client.force_login(member)
    client.get("/queue/")  # the first view of a session does more (caches of a day's demand, the session)
    few, _ = _statements(client, "/queue/")
    _queue(team, member, gpu, 60, start=3)
    _queue(other, member, gpu, 60, start=3)
    many, page = _statements(client, "/queue/")
    assert many == few
    assert "63" in page  # the page still counts the whole of the team's queue


def test_the_queue_pages_first_waiting_keep_their_estimates_when_more_queue_behind_them(lab):
    from jobs.selectors_sharing import team_queue_explained

    team, other, gpu, member = lab
    _queue(team, member, gpu, 4)
    _queue(other, member, gpu, 4)
    before = {w.workload.id: w.estimated_start_at for w in team_queue_explained(team)[0].first_waiting}
    _queue(team, member, gpu, 40, start=4)
    after = {w.workload.id: w.estimated_start_at for w in team_queue_explained(team)[0].first_waiting}
    assert set(before) <= set(after)
    assert all(before[i] is not None for i in before)
    # Estimated from "now" each time: the same start within the seconds between the two reads.
    assert all(abs((after[i] - before[i]).total_seconds()) < 60 for i in before)


def test_the_api_list_sends_as_many_statements_for_many_workloads_as_for_a_few(client, lab):
    team, _other, gpu, member = lab
    _queue(team, member, gpu, 3)
    client.force_login(member)
    client.get("/api/v1/workloads/")
    few, _ = _statements(client, "/api/v1/workloads/")
    _queue(team, member, gpu, 120, start=3)
    many, body = _statements(client, "/api/v1/workloads/")
    assert many == few
    assert '"next":"http' in body.replace(" ", "")  # a page of them, and a cursor to the rest
