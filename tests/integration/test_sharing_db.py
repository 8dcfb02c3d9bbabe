"""Sharing on PostgreSQL, through the services (no cluster needed: nothing here reaches Kubernetes).

Borrowing, reclaim and caps under concurrency: admission locks the cohort's quota rows, so 50
concurrent submissions across a cohort never over-lend, and a member's caps hold under the same load.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from identity.models import Membership
from jobs.models import Kind, Quota, State, Team, Workload, WorkloadEvent
from jobs.services.provisioning import team_gpu_limits
from jobs.services.queue.admission import quota_admit
from jobs.services.queue.forecast import Size
from jobs.services.queue.start_estimates import arrival_demand, estimate
from jobs.services.submission.intake import workload_submit
from jobs.services.validation import SubmissionInvalid
from tests.world import Node, node_present, world_build

# Committed, but kept from the suite's running engine (`hand_overs_kept`, tests/engine_fixtures.py): these
# tests make up running workloads that no worker may create or its tracker move.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("hand_overs_kept")]


# A ready 16-GPU node. Re-asserted before every submission: these tests commit their rows, and when the
# suite's engine is running, its beat's inventory sync deletes nodes that the local cluster does not have,
# which would refuse a submission as "No ready node" (not what is tested here).
NODE = Node("n1", "p100", gpus=16)


@pytest.fixture
def cohort():
    """Alpha (ann) lends, Beta (bob) borrows up to 3 beyond its own 2 (tests/world.py)."""
    world = world_build(
        teams=("Alpha", "Beta"),
        cohort="Lab",
        people={"owner": "ann", "outsider": "bob"},
        nodes=[NODE],
        quotas={"team": {"p100": 4}, "other_team": {"p100": {"max_gpus": 2, "borrowing_limit": 3}}},
    )
    return {"a": world.team, "b": world.other_team, "ann": world.owner, "bob": world.outsider, "p100": world.p100}


def spec(**overrides):
    return {"name": "train", "image": "docker.io/library/python:3.12", "gpu_type": "p100", "gpu_count": 1} | overrides


def submit(team, user, **overrides) -> Workload:
    node_present(NODE)
    return workload_submit(team=team, owner=user, spec=spec(**overrides))


def held(team) -> int:
    return sum(Workload.objects.filter(team=team, state__in=State.holding()).values_list("gpu_count", flat=True))


def test_b_borrows_a_s_idle_gpus_and_its_namespace_quota_allows_them(cohort):
    b, bob = cohort["b"], cohort["bob"]
    jobs = [submit(b, bob) for _ in range(6)]
    states = [(w.state, w.borrowed) for w in jobs]
    assert states[:2] == [(State.SUBMITTING, False)] * 2
    assert states[2:5] == [(State.SUBMITTING, True)] * 3  # the borrowing limit: 3
    assert states[5][0] == State.QUEUED
    assert team_gpu_limits(b)["nvidia.com/gpu"] == 5  # quota 2 + borrowing limit 3
    assert team_gpu_limits(cohort["a"])["nvidia.com/gpu"] == 4
    event = WorkloadEvent.objects.filter(workload=jobs[4], to_state=State.SUBMITTING).get()
    assert "borrowed" in event.message


def test_a_lending_limit_caps_what_b_borrows(cohort):
    Quota.objects.filter(team=cohort["a"]).update(lending_limit=1)
    jobs = [submit(cohort["b"], cohort["bob"]) for _ in range(5)]
    assert [w.state for w in jobs].count(State.SUBMITTING) == 3


def test_a_team_leaving_the_cohort_stops_borrowing(cohort):
    Team.objects.filter(id=cohort["b"].id).update(cohort=None)
    b = Team.objects.get(id=cohort["b"].id)
    jobs = [submit(b, cohort["bob"]) for _ in range(3)]
    assert [w.state for w in jobs] == [State.SUBMITTING, State.SUBMITTING, State.QUEUED]
    assert team_gpu_limits(b)["nvidia.com/gpu"] == 2


def test_lender_reclaims_restartable_requeued_others_failed_services_preempted(cohort):
    a, b, ann, bob = cohort["a"], cohort["b"], cohort["ann"], cohort["bob"]
    own = [submit(b, bob), submit(b, bob)]
    restartable = submit(b, bob, restartable=True)
    plain = submit(b, bob)
    service = submit(b, bob, kind="service", port=8080)
    assert all(w.borrowed for w in (restartable, plain, service))
    Workload.objects.filter(id__in=[w.id for w in (*own, restartable, plain, service)]).update(
        state=State.RUNNING, started_at=timezone.now()
    )
    lender = submit(a, ann, gpu_count=4)
    assert lender.state == State.SUBMITTING  # admitted in the same decision that preempted
    for w in (*own, restartable, plain, service):
        w.refresh_from_db()
    assert [w.state for w in own] == [State.RUNNING] * 2  # within B's own quota: never preempted
    assert restartable.state == State.QUEUED
    assert (restartable.attempt, restartable.reason, restartable.borrowed) == (1, "Preempted", False)
    assert restartable.requeued_at is not None
    assert (plain.state, plain.reason) == (State.FAILED, "Preempted")
    assert (service.state, service.reason) == (State.PREEMPTED, "Preempted")
    timeline = WorkloadEvent.objects.filter(workload=restartable, reason="Preempted").get()
    assert "Alpha reclaimed" in timeline.message
    assert "SIGTERM" in timeline.message
    assert held(a) == 4
    assert held(b) == 2
    # Their owner hears of it once each: preempted (requeued / ended), or failed like any failure.
    from notifications.models import Event

    kinds = dict(Event.objects.filter(recipient=bob).values_list("workload_id", "kind"))
    assert kinds[restartable.id] == "workload.preempted"
    assert kinds[service.id] == "workload.preempted"
    assert kinds[plain.id] == "workload.failed"
    # The requeued job is at the front of B's queue, ahead of older work.
    later = submit(b, bob)
    assert later.state == State.QUEUED
    from jobs.selectors import queue_position

    assert queue_position(restartable) == 1


def test_50_concurrent_submissions_across_a_cohort_never_over_lend(cohort):
    assert connection.vendor == "postgresql"
    a, b, ann, bob = cohort["a"], cohort["b"], cohort["ann"], cohort["bob"]
    barrier = threading.Barrier(50)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            barrier.wait()
            if i % 2:
                submit(a, ann, gpu_count=1 + i % 3)
            else:
                submit(b, bob, gpu_count=1 + i % 2)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # Nothing ever ends here (no cluster), so what is held now is the most ever held.
    assert held(b) <= 2 + 3
    assert held(a) <= 4
    assert held(a) + held(b) <= 6  # the cohort's pool: 4 + 2
    assert held(a) + held(b) >= 5  # and it was used, not trivially respected


def test_per_user_caps_hold_under_50_concurrent_submissions(cohort):
    a, ann = cohort["a"], cohort["ann"]
    Quota.objects.filter(team=a).update(max_gpus=16, user_max_gpus=3)
    Team.objects.filter(id=a.id).update(user_max_queued=10)
    a.refresh_from_db()
    barrier = threading.Barrier(50)
    refused: list[SubmissionInvalid] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            barrier.wait()
            submit(a, ann)
        except SubmissionInvalid as exc:
            refused.append(exc)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert held(a) == 3  # the per-user GPU cap
    assert Workload.objects.filter(team=a, state=State.QUEUED).count() == 10  # the per-user queue cap
    assert len(refused) == 50 - 13
    assert "per member" in refused[0].errors["team"][0]
    waiting = Workload.objects.filter(team=a, state=State.QUEUED).first()
    estimate(team_id=a.id, gpu_type_id=cohort["p100"].id)
    waiting.refresh_from_db()
    assert waiting.wait_reason == "user cap"


def test_estimates_are_stored_with_the_reason_and_shown_everywhere(cohort, client):
    a, ann = cohort["a"], cohort["ann"]
    Team.objects.filter(id=cohort["b"].id).update(cohort=None)
    running = submit(a, ann, gpu_count=4, time_limit_seconds=3600)
    Workload.objects.filter(id=running.id).update(state=State.RUNNING, started_at=timezone.now())
    waiting = submit(a, ann, gpu_count=2, time_limit_seconds=600)
    assert waiting.state == State.QUEUED
    quota_admit(team_id=a.id, gpu_type_id=cohort["p100"].id)
    estimate(team_id=a.id, gpu_type_id=cohort["p100"].id)
    waiting.refresh_from_db()
    assert waiting.wait_reason == "team quota"
    wait = (waiting.estimated_start_at - timezone.now()).total_seconds()
    assert 3500 < wait <= 3600  # when the running job reaches its time limit (no history yet)
    # Shown as "about 60 min" with the reason on the list, the page, the API and the CLI.
    client.force_login(ann)
    listing = client.get("/workloads/").content.decode()
    assert "starts about 60 min · waits for team quota" in listing
    page = client.get(f"/workloads/{waiting.uid}/").content.decode()
    assert "Estimated start: <strong>about 60 min</strong>" in page
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(ann)
    body = api.get(f"/api/v1/workloads/{waiting.uid}/").json()
    assert body["wait_reason"] == "team quota"
    assert body["estimated_start_at"]
    from cli.main import _state

    assert _state(body) == "QUEUED #1, starts about 60 min (waits for team quota)"


def test_an_estimate_follows_the_time_limit_where_the_owners_limits_tracked_her_runs(cohort):
    a, ann = cohort["a"], cohort["ann"]
    Team.objects.filter(id=cohort["b"].id).update(cohort=None)
    now = timezone.now()
    # Her past runs: about 30 min under 1 h limits, about 90 min under 3 h ones (median of all: 58 min).
    for minutes, hours in ((28, 1), (30, 1), (32, 1), (85, 3), (90, 3), (95, 3)):
        done = submit(a, ann, gpu_count=1, time_limit_seconds=hours * 3600)
        Workload.objects.filter(id=done.id).update(
            state=State.SUCCEEDED,
            started_at=now - timedelta(minutes=minutes + 5),
            finished_at=now - timedelta(minutes=5),
        )
    running = submit(a, ann, gpu_count=4, time_limit_seconds=3 * 3600)
    Workload.objects.filter(id=running.id).update(state=State.RUNNING, started_at=now)
    waiting = submit(a, ann, gpu_count=2, time_limit_seconds=3600)
    assert waiting.state == State.QUEUED
    estimate(team_id=a.id, gpu_type_id=cohort["p100"].id)
    waiting.refresh_from_db()
    wait = (waiting.estimated_start_at - timezone.now()).total_seconds()
    assert 80 * 60 < wait < 100 * 60  # as long as her 3 h runs, not her 58 min median


def test_queue_page_and_api_explain_borrowed_lent_and_why_work_waits(cohort, client):
    b, ann, bob = cohort["b"], cohort["ann"], cohort["bob"]
    jobs = [submit(b, bob) for _ in range(6)]
    assert jobs[5].state == State.QUEUED
    client.force_login(bob)
    assert 'name="restartable"' in client.get("/launch/").content.decode()  # the launch form's checkbox
    page = client.get("/queue/")
    assert page.status_code == 200
    html = page.content.decode()
    assert '<dd class="borrowed">3 of up to 3</dd>' in html
    assert "borrowing limit" in html
    assert jobs[5].uid in html
    client.force_login(ann)
    assert '<dd class="lent">3</dd>' in client.get("/queue/").content.decode()
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(bob)
    body = api.get("/api/v1/teams/beta/queue/").json()
    (p100,) = body["sharing"]
    assert (p100["quota"], p100["held"], p100["borrowed"], p100["waiting_workloads"]) == (2, 5, 3, 1)
    assert p100["first_waiting"][0]["uid"] == jobs[5].uid
    assert p100["first_waiting"][0]["reason"] == "borrowing limit"
    listed = api.get("/api/v1/workloads/").json()["results"]
    assert sorted(w["borrowed"] for w in listed) == [False] * 3 + [True] * 3
    # Another team's queue is not found, not forbidden.
    assert api.get("/api/v1/teams/alpha/queue/").status_code == 404


def test_managers_set_member_caps_and_fair_share_on_the_queue_page(cohort, client):
    a, ann = cohort["a"], cohort["ann"]
    Membership.objects.filter(user=ann, team=a).update(role="manager")
    client.force_login(ann)
    bad = client.post("/queue/", {"half_life_hours": "0", "user_max_queued": "-1"})
    assert bad.status_code == 400
    assert "half_life_hours" in bad.context["form"].errors
    a.refresh_from_db()
    assert a.user_max_queued is None
    ok = client.post(
        "/queue/", {"fair_share": "on", "half_life_hours": "12", "user_max_queued": "3", "user_max_gpus_p100": "2"}
    )
    assert ok.status_code == 302
    a.refresh_from_db()
    assert (a.fair_share, a.fair_share_half_life_hours, a.user_max_queued) == (True, 12, 3)
    assert Quota.objects.get(team=a).user_max_gpus == 2
    # A member may read the queue but not change its rules.
    client.force_login(cohort["bob"])
    Membership.objects.create(user=cohort["bob"], team=a)
    assert client.post("/queue/", {"half_life_hours": "1"}).status_code == 403
    a.refresh_from_db()
    assert a.fair_share_half_life_hours == 12


def test_fair_share_orders_the_queue_by_recent_usage(cohort):
    a, ann = cohort["a"], cohort["ann"]
    carl = get_user_model().objects.create_user("carl")
    Membership.objects.create(user=carl, team=a)
    Team.objects.filter(id=a.id).update(fair_share=True)
    a.refresh_from_db()
    # Ann used 10 GPU-hours yesterday; Carl nothing.
    past = submit(a, ann, gpu_count=4)
    Workload.objects.filter(id=past.id).update(
        state=State.SUCCEEDED,
        started_at=timezone.now() - timezone.timedelta(hours=30),
        finished_at=timezone.now() - timezone.timedelta(hours=27.5),
    )
    blocker = submit(a, carl, gpu_count=4)
    assert blocker.state == State.SUBMITTING
    first = submit(a, ann, gpu_count=4)
    second = submit(a, carl, gpu_count=4)
    Workload.objects.filter(id=blocker.id).update(state=State.SUCCEEDED, finished_at=timezone.now())
    admitted = quota_admit(team_id=a.id, gpu_type_id=cohort["p100"].id)
    assert admitted == [second.id]  # Carl, with less recent usage, passes Ann's older request
    first.refresh_from_db()
    assert first.state == State.QUEUED


def test_usage_reports_count_borrowed_gpu_hours_apart(cohort, client):
    b, bob = cohort["b"], cohort["bob"]
    jobs = [submit(b, bob, gpu_count=2) for _ in range(2)]
    assert [w.borrowed for w in jobs] == [False, True]
    # Two hours that ended yesterday afternoon (local time): inside one day, and over, whatever the hour
    # the suite runs at (just after midnight, "now" rounded to the hour left no room before it).
    end = timezone.localtime().replace(hour=15, minute=0, second=0, microsecond=0) - timezone.timedelta(days=1)
    Workload.objects.filter(id__in=[w.id for w in jobs]).update(
        state=State.SUCCEEDED, started_at=end - timezone.timedelta(hours=2), finished_at=end
    )
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(bob)
    day = timezone.localdate(end).isoformat()
    body = api.get(f"/api/v1/usage/?team=beta&start={day}&end={day}&group_by=user").json()
    assert body["total_gpu_hours"] == 8.0
    assert body["total_borrowed_gpu_hours"] == 4.0
    client.force_login(bob)
    page = client.get(f"/usage/?start={day}&end={day}").content.decode()
    assert 'id="team-borrowed">4' in page


@pytest.mark.django_db  # rolled back: the suite's running engine never sees these rows
def test_a_borrowers_estimate_expects_the_lenders_usual_work(cohort):
    a, b, ann, bob, p100 = cohort["a"], cohort["b"], cohort["ann"], cohort["bob"], cohort["p100"]
    now = timezone.now()

    def workload(team, owner, gpus, state, **fields) -> Workload:
        return Workload.objects.create(
            team=team, owner=owner, name="train", kind=Kind.BATCH, image="docker.io/library/python:3.12",
            gpu_type=p100, gpu_count=gpus, state=state, **fields,
        )  # fmt: skip

    # Two weeks of A's habits: three 4-GPU jobs of 2 h in the hour after this time of day, every day.
    for day in range(1, 15):
        for minutes in (20, 40, 60):
            created = now - timedelta(days=day, minutes=-minutes)
            finished = created + timedelta(hours=2)
            workload(a, ann, 4, State.SUCCEEDED, time_limit_seconds=14400, created_at=created, started_at=created,
                     finished_at=finished)  # fmt: skip
    demand = arrival_demand([a.id, b.id], p100.id)
    assert set(demand) == {a.id}
    assert demand[a.id].sizes == (Size(4, 1.0, 7200.0),)
    assert sum(demand[a.id].per_hour) == pytest.approx(3.0, rel=0.01)
    # Now A runs 3 GPUs for at most 1 h, B its own 2 for 2 h: 1 of the cohort's 6 is idle, and B's 2-GPU
    # job waits for the cohort.
    workload(a, ann, 3, State.RUNNING, time_limit_seconds=3600, created_at=now, admitted_at=now, started_at=now)
    workload(b, bob, 2, State.RUNNING, time_limit_seconds=7200, created_at=now, admitted_at=now, started_at=now)
    waiting = workload(b, bob, 2, State.QUEUED, time_limit_seconds=600, created_at=now)
    estimate(team_id=b.id, gpu_type_id=p100.id)
    waiting.refresh_from_db()
    assert waiting.wait_reason == "cohort"
    # Not when A's running job ends (1 h): A usually has its own 4-GPU work by then, which comes first,
    # so B's job starts on B's own quota when B's run ends (2 h).
    wait = (waiting.estimated_start_at - now).total_seconds()
    assert 7100 < wait <= 7300


@pytest.mark.django_db  # rolled back: the suite's running engine never sees these rows
def test_a_teams_habits_keep_each_size_it_asks_for(cohort):
    a, ann, p100 = cohort["a"], cohort["ann"], cohort["p100"]
    now = timezone.now()
    # Two weeks: every day A runs a 1-GPU job of 30 min and a 4-GPU job of 2 h, and has one more 1-GPU
    # job still waiting.
    for day in range(1, 15):
        created = now - timedelta(days=day)
        for gpus, hours in ((1, 0.5), (4, 2.0), (1, None)):
            ended = {"started_at": created, "finished_at": created + timedelta(hours=hours)} if hours else {}
            state = State.SUCCEEDED if hours else State.QUEUED
            Workload.objects.create(
                team=a, owner=ann, name="train", kind=Kind.BATCH, image="docker.io/library/python:3.12",
                gpu_type=p100, gpu_count=gpus, state=state, time_limit_seconds=14400, created_at=created, **ended,
            )  # fmt: skip
    sizes = arrival_demand([a.id], p100.id)[a.id].sizes
    # Two of three ask for 1 GPU and run 30 min (the waiting ones have not run); one of three asks for 4.
    assert [(s.gpus, round(3 * s.share), s.run_seconds) for s in sizes] == [(1, 2, 1800.0), (4, 1, 7200.0)]
