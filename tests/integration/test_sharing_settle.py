"""What runs, settled after sharing facts change, and what it costs (PostgreSQL, through the services).

- A preempted and requeued run keeps its GPU-hours in every usage report (page, API, CSVs, admin), and
  in the workload's own GPU-hours (its page, the API).
- A borrowed workload that its own team's quota covers again stops being borrowed (and reclaimable),
  and usage bills the stretch before as borrowed, the rest as the team's own.
- Lowering a borrowing limit, a lending cap or a quota in admin preempts the borrowed work that now
  exceeds it, through the same preemption path (grace period, timeline, owner told).
Time is frozen where it matters (time-machine), so the GPU-hours are exact.
"""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.models import (
    Quota,
    RunSegment,
    State,
    Workload,
    WorkloadEvent,
)
from jobs.services.queue.admission import quota_admit
from jobs.services.submission.intake import workload_submit
from jobs.services.transitions import transition
from tests.world import Node, node_present, world_build

# Committed, but kept from the suite's running engine (`hand_overs_kept`, tests/engine_fixtures.py): these
# tests make up running workloads that no worker may create or its tracker move.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("hand_overs_kept")]

# A fixed local morning, so that every interval below falls on one day.
MORNING = timezone.make_aware(datetime(2026, 3, 10, 8, 0))


# Re-asserted before each submission: the suite's engine's inventory sync deletes unknown nodes.
NODE = Node("n1", "p100", gpus=16)


@pytest.fixture
def cohort():
    """Alpha (ann) lends, Beta (bob, its manager) borrows up to 4 beyond its own 2 (tests/world.py)."""
    world = world_build(
        teams=("Alpha", "Beta"),
        cohort="Lab",
        people={"owner": "ann", "other_manager": "bob"},
        quotas={"team": {"p100": 4}, "other_team": {"p100": {"max_gpus": 2, "borrowing_limit": 4}}},
    )
    return {"a": world.team, "b": world.other_team, "ann": world.owner, "bob": world.other_manager, "p100": world.p100}


def submit(team, user, **overrides) -> Workload:
    node_present(NODE)
    spec = {"name": "train", "image": "docker.io/library/python:3.12", "gpu_type": "p100", "gpu_count": 1}
    return workload_submit(team=team, owner=user, spec=spec | overrides)


def start(*workloads: Workload) -> None:
    """As the watch loop records a container start."""
    Workload.objects.filter(id__in=[w.id for w in workloads]).update(state=State.RUNNING, started_at=timezone.now())
    for w in workloads:
        w.refresh_from_db()


def usage_everywhere(client, bob) -> dict[str, tuple[float, float]]:
    """(GPU-hours, borrowed GPU-hours) of team Beta on MORNING's day, as each report says it."""
    day = timezone.localdate(MORNING).isoformat()
    api = APIClient()
    api.force_authenticate(bob)
    body = api.get(f"/api/v1/usage/?team=beta&start={day}&end={day}").json()
    found = {"api": (body["total_gpu_hours"], body["total_borrowed_gpu_hours"])}
    api_csv = list(csv.DictReader(io.StringIO(api.get(f"/api/v1/usage/?team=beta&start={day}&end={day}&format=csv").content.decode())))  # fmt: skip
    found["api_csv"] = (
        sum(float(r["gpu_hours"]) for r in api_csv),
        sum(float(r["borrowed_gpu_hours"]) for r in api_csv),
    )
    client.force_login(bob)
    page_csv = list(csv.DictReader(io.StringIO(client.get(f"/usage/?start={day}&end={day}&format=csv").content.decode())))  # fmt: skip
    found["page_csv"] = (
        sum(float(r["gpu_hours"]) for r in page_csv),
        sum(float(r["borrowed_gpu_hours"]) for r in page_csv),
    )
    admin = get_user_model().objects.create_superuser("root-" + str(Workload.objects.count()), password="x")
    client.force_login(admin)
    report = client.get(f"/admin/jobs/workload/usage-report/?start={day}&end={day}&teams={bob.memberships.get().team_id}&export=csv")  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(report.content.decode())))
    found["admin_csv"] = (
        sum(float(r["gpu_hours"]) for r in rows),
        sum(float(r["borrowed_gpu_hours"]) for r in rows),
    )
    return found


def workload_gpu_hours(client, bob, workload: Workload) -> dict[str, float]:
    """The workload's own GPU-hours so far, as its page, the API (one workload, the list, the team's
    queue while it is queued) say them."""
    client.force_login(bob)
    page = client.get(f"/workloads/{workload.uid}/").content.decode()
    found = {"page": float(page.split('id="gpu-hours">', 1)[1].split("<", 1)[0])}
    api = APIClient()
    api.force_authenticate(bob)
    found["api"] = api.get(f"/api/v1/workloads/{workload.uid}/").json()["gpu_hours"]
    listed = api.get("/api/v1/workloads/").json()["results"]
    found["api_list"] = next(w["gpu_hours"] for w in listed if w["uid"] == workload.uid)
    queued = api.get("/api/v1/teams/beta/queue/").json()["queued"]
    for w in queued:
        if w["uid"] == workload.uid:
            found["api_queue"] = w["gpu_hours"]
    return found


def test_a_preempted_and_requeued_run_stays_in_usage(cohort, client):
    a, b, ann, bob = cohort["a"], cohort["b"], cohort["ann"], cohort["bob"]
    with time_machine.travel(MORNING, tick=False):
        own = [submit(b, bob, gpu_count=2)]
        borrowed = submit(b, bob, gpu_count=2, restartable=True)
        assert borrowed.borrowed
        start(*own, borrowed)
    with time_machine.travel(MORNING + timedelta(hours=1), tick=False):
        lender = submit(a, ann, gpu_count=4)  # A takes its quota back: B's borrowed run is preempted
        assert lender.state == State.SUBMITTING
        borrowed.refresh_from_db()
        assert (borrowed.state, borrowed.attempt, borrowed.started_at) == (State.QUEUED, 1, None)
        segment = RunSegment.objects.get(workload=borrowed)
        assert (segment.attempt, segment.borrowed, segment.reason) == (0, True, "Preempted")
        assert segment.finished_at - segment.started_at == timedelta(hours=1)
        # Its own page and the API still count the run it had (2 GPUs x 1 h).
        assert workload_gpu_hours(client, bob, borrowed) == dict.fromkeys(("page", "api", "api_list", "api_queue"), 2.0)
    with time_machine.travel(MORNING + timedelta(hours=2), tick=False):
        # Everything ends; the requeued job runs again, for half an hour, within B's own quota.
        transition(own[0], State.SUCCEEDED, finished_at=timezone.now())
        quota_admit(team_id=b.id, gpu_type_id=cohort["p100"].id)
        borrowed.refresh_from_db()
        assert (borrowed.state, borrowed.borrowed) == (State.SUBMITTING, False)
        start(borrowed)
    with time_machine.travel(MORNING + timedelta(hours=2, minutes=30), tick=False):
        transition(borrowed, State.SUCCEEDED, finished_at=timezone.now())
        assert workload_gpu_hours(client, bob, borrowed) == dict.fromkeys(("page", "api", "api_list"), 3.0)
        # own: 2 GPUs x 2 h; the preempted run: 2 x 1 h (borrowed); its second run: 2 x 0.5 h (own).
        expected = (4.0 + 2.0 + 1.0, 2.0)
        assert usage_everywhere(client, bob) == dict.fromkeys(("api", "api_csv", "page_csv", "admin_csv"), expected)


def test_a_borrowed_workload_covered_by_its_own_quota_again_stops_being_borrowed(cohort, client):
    a, b, ann, bob = cohort["a"], cohort["b"], cohort["ann"], cohort["bob"]
    with time_machine.travel(MORNING, tick=False):
        own = submit(b, bob, gpu_count=2)
        borrowed = submit(b, bob, gpu_count=2)
        assert borrowed.borrowed
        start(own, borrowed)
        client.force_login(bob)
        assert 'id="borrowed"' in client.get(f"/workloads/{borrowed.uid}/").content.decode()
        assert ">borrowed</span>" in client.get("/workloads/").content.decode()
    with time_machine.travel(MORNING + timedelta(hours=1), tick=False):
        # B's own run ends: admission (which every release asks for) settles the marks.
        transition(own, State.SUCCEEDED, finished_at=timezone.now())
        quota_admit(team_id=b.id, gpu_type_id=cohort["p100"].id)
        borrowed.refresh_from_db()
        assert not borrowed.borrowed
        entry = WorkloadEvent.objects.get(workload=borrowed, reason="NoLongerBorrowed")
        assert "can no longer be preempted" in entry.message
        api = APIClient()
        api.force_authenticate(bob)
        assert api.get(f"/api/v1/workloads/{borrowed.uid}/?team=beta").json()["borrowed"] is False
        client.force_login(bob)
        assert 'id="borrowed"' not in client.get(f"/workloads/{borrowed.uid}/").content.decode()
        assert ">borrowed</span>" not in client.get("/workloads/").content.decode()
    with time_machine.travel(MORNING + timedelta(hours=2), tick=False):
        # A wants its whole quota: nothing of B's is borrowed any more, so nothing is preempted.
        lender = submit(a, ann, gpu_count=4)
        borrowed.refresh_from_db()
        assert borrowed.state == State.RUNNING
        assert lender.state == State.SUBMITTING  # B holds 2 = its own quota; A's 4 are free
        transition(borrowed, State.SUCCEEDED, finished_at=timezone.now())
        # own: 2 x 1 h; the other: 2 x 1 h borrowed, then 2 x 1 h covered by B's quota.
        expected = (6.0, 2.0)
        assert usage_everywhere(client, bob) == dict.fromkeys(("api", "api_csv", "page_csv", "admin_csv"), expected)


def admin_post_quota(client, quota: Quota, **changes) -> None:
    admin = get_user_model().objects.filter(is_superuser=True).first() or get_user_model().objects.create_superuser(
        "root", password="x"
    )
    client.force_login(admin)
    form = {
        "team": quota.team_id,
        "gpu_type": quota.gpu_type_id,
        "max_gpus": quota.max_gpus,
        "borrowing_limit": quota.borrowing_limit,
        "lending_limit": "" if quota.lending_limit is None else quota.lending_limit,
        "user_max_gpus": "" if quota.user_max_gpus is None else quota.user_max_gpus,
    } | changes
    response = client.post(f"/admin/jobs/quota/{quota.id}/change/", form, follow=True)
    assert response.status_code == 200
    assert not response.context.get("errors")


@pytest.mark.parametrize(
    ("whose", "change", "preempted"),
    [
        ("b", {"borrowing_limit": 1}, 3),  # B may borrow 1 now: 3 of its 4 borrowed GPUs go
        ("a", {"lending_limit": 2}, 2),  # A lends at most 2 now
        ("b", {"max_gpus": 1, "borrowing_limit": 2}, 3),  # B's quota drops: 2 own + 4 borrowed > 1 + 2
    ],
)
def test_lowering_a_limit_in_admin_preempts_what_now_exceeds_it(cohort, client, whose, change, preempted):
    b, bob = cohort["b"], cohort["bob"]
    own = [submit(b, bob), submit(b, bob)]
    borrowed = [submit(b, bob, restartable=True) for _ in range(4)]
    assert [w.borrowed for w in own + borrowed] == [False] * 2 + [True] * 4
    start(*own, *borrowed)
    admin_post_quota(client, Quota.objects.get(team=cohort[whose]), **change)
    for w in own + borrowed:
        w.refresh_from_db()
    requeued = [w for w in borrowed if w.state == State.QUEUED]
    assert len(requeued) == preempted
    assert requeued == borrowed[-preempted:]  # the newest first
    entry = WorkloadEvent.objects.filter(workload=requeued[0], reason="Preempted").get()
    assert "sharing limits were lowered" in entry.message
    assert "SIGTERM" in entry.message
    if "max_gpus" in change:
        # What its own quota no longer covers is borrowed now (and one of the old own runs is).
        assert [w.borrowed for w in own] == [False, True]
    assert all(w.state == State.RUNNING for w in own)
    held = sum(w.gpu_count for w in own + borrowed if w.state == State.RUNNING)
    quota = Quota.objects.get(team=b)
    assert held <= quota.max_gpus + quota.borrowing_limit
