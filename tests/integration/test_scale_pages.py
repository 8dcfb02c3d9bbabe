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


def _store_estimates(team, gpu, capture) -> None:
    """What the worker does after an admission pass, and the periodic refresh: forecast the cohort's queue
    and store the estimates (the note of when, in the shared cache, is made once the rows are committed)."""
    from jobs.services.queue.start_estimates import estimate

    with capture(execute=True):
        estimate(team_id=team.id, gpu_type_id=gpu.id)


def _forget_stored(team, gpu) -> None:
    from django.core.cache import caches

    from jobs.services.queue.cohort_facts import cohort_team_ids
    from jobs.services.queue.start_estimates import _stored_key

    caches["api"].delete(_stored_key(cohort_team_ids(team.id), gpu.id))


def test_with_fresh_stored_estimates_the_queue_page_shows_them_instead_of_forecasting(
    client, lab, django_capture_on_commit_callbacks
):
    team, other, gpu, member = lab
    _queue(team, member, gpu, 3)
    _queue(other, member, gpu, 3)
    _store_estimates(team, gpu, django_capture_on_commit_callbacks)
    head = Workload.objects.filter(team=team, state=State.QUEUED).order_by("created_at", "id").first()
    # As a later refresh would have stored it: the page shows the row's estimate, not one of its own.
    Workload.objects.filter(id=head.id).update(estimated_start_at=timezone.now() + timedelta(hours=5))
    client.force_login(member)
    page = client.get("/queue/").content.decode()
    assert "about 5 h" in page
    # Queued after the estimates were made, at the head of the queue: not in them, so the page forecasts.
    urgent = Workload.objects.create(
        team=team, owner=member, name="urgent", kind="batch", image="ubuntu", gpu_type=gpu, gpu_count=1,
        time_limit_seconds=3600, state=State.QUEUED, priority=10,
    )  # fmt: skip
    page = client.get("/queue/").content.decode()
    assert urgent.uid in page
    assert "about 5 h" not in page


@pytest.mark.parametrize("aging", [False, True])
def test_the_stored_view_of_the_queue_says_what_the_forecast_view_says(lab, django_capture_on_commit_callbacks, aging):
    """Fair share between two people of the team, a priority, a requeued workload, with and without aging:
    the stored view orders, counts and explains the first waiting as the forecast view does, with the
    estimates stored."""
    from jobs.selectors_sharing import _stored_views, team_queue_explained

    team, other, gpu, member = lab
    heavy = get_user_model().objects.create_user("sp-heavy")
    Membership.objects.create(team=team, user=heavy, role=Role.MEMBER)
    Team.objects.filter(id=team.id).update(fair_share=True, fair_share_half_life_hours=24)
    GpuType.objects.filter(id=gpu.id).update(queue_aging=aging)
    team.refresh_from_db()
    now = timezone.now()
    Workload.objects.create(
        team=team, owner=heavy, name="past", kind="batch", image="ubuntu", gpu_type=gpu, gpu_count=4,
        time_limit_seconds=36000, state=State.SUCCEEDED, started_at=now - timedelta(hours=8),
        finished_at=now - timedelta(hours=1),
    )  # fmt: skip
    for i, (owner, gpus, age_min, priority) in enumerate(
        [(heavy, 1, 90, 0), (member, 1, 30, 0), (heavy, 4, 60, 0), (member, 2, 10, 0), (heavy, 1, 5, 10)]
    ):
        Workload.objects.create(
            team=team, owner=owner, name=f"o-{i}", kind="batch", image="ubuntu", gpu_type=gpu, gpu_count=gpus,
            time_limit_seconds=3600, state=State.QUEUED, priority=priority,
            created_at=now - timedelta(minutes=age_min),
        )  # fmt: skip
    Workload.objects.create(
        team=team, owner=heavy, name="requeued", kind="batch", image="ubuntu", gpu_type=gpu, gpu_count=1,
        time_limit_seconds=3600, state=State.QUEUED, created_at=now - timedelta(minutes=3),
        requeued_at=now - timedelta(minutes=2),
    )  # fmt: skip
    _queue(other, member, gpu, 3)
    _store_estimates(team, gpu, django_capture_on_commit_callbacks)
    assert gpu.id in _stored_views(team, list(Quota.objects.filter(team=team)), 10)
    (stored,) = team_queue_explained(team)
    _forget_stored(team, gpu)
    (forecast,) = team_queue_explained(team)

    def picture(t):
        return (t.held, t.borrowed, t.lent, t.waiting_workloads, t.waiting_gpus)

    assert picture(stored) == picture(forecast)
    assert [w.workload.name for w in stored.first_waiting] == [w.workload.name for w in forecast.first_waiting]
    names = [w.workload.name for w in stored.first_waiting]
    assert names[:2] == ["o-4", "requeued"]  # the priority first, then the requeued
    assert names.index("o-1") < names.index("o-0")  # the person without recent use before the heavy one
    assert [(w.reason, w.explanation) for w in stored.first_waiting] == [
        (w.reason, w.explanation) for w in forecast.first_waiting
    ]
    for s, f in zip(stored.first_waiting, forecast.first_waiting, strict=True):
        assert (s.estimated_start_at is None) == (f.estimated_start_at is None)
        if s.estimated_start_at is not None:
            assert abs((s.estimated_start_at - f.estimated_start_at).total_seconds()) < 60
