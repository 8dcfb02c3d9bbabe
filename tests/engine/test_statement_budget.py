"""The statements one workload costs PostgreSQL, end to end, as a query-count test (issue 41).

PostgreSQL is the part of the portal there is one of; every statement on the path of a workload is paid
once per workload by that one primary. The path a team's script takes, stage by stage, on a warm process
(the intake's facts, the namespace and the token already known, as in a running deployment):

    submit     POST /api/v1/workloads/ (token, throttling, idempotency record, validation, store)
    admit      the worker's admission pass that the submission asked for (jobs.tasks.admit: quota locks,
               the plan, the move to SUBMITTING, the hand-over to the worker's creates)
    create     the worker's create (jobs.tasks.submit_batch: load, render, the Job, the move to PENDING)
    running    the tracker sees its pod run
    succeeded  the tracker sees it end: the end is recorded, and so its GPU time is accounted
    notified   the worker fans the "succeeded" event out (notifications.tasks.fan_out; its owner has no
               email and the team no webhook, as most: nobody to deliver to)

Each stage's count is exact: a change that adds a statement fails here and must change the number on
purpose (and say why in its commit). The statements are those Django sends (savepoints included; the
BEGIN and COMMIT around a transaction are not sent as statements). Real PostgreSQL; the Kubernetes
client's seam is the in-memory one (tests/engine/fake_kube.py): what is counted here is SQL.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from api.tokens import token_create
from jobs import tasks
from jobs.models import AllowedRegistry, GpuNode, State, Workload, WorkloadEvent
from jobs.services import provisioning
from jobs.services.cluster import watch_loop
from jobs.services.usage.accounting import counted_interval
from notifications import tasks as notifications_tasks
from notifications.events import SUCCEEDED
from notifications.models import Event
from tests.engine.factories import GpuTypeFactory, MembershipFactory, QuotaFactory, TeamFactory, UserFactory

# Statements per stage of one workload's path (see the module's docstring), and what each is:
#   submit 5: the token with its user; the team with the role, the site facts' version and the team's
#     (version rows both: migrations 0034, 0035); the workload with its first timeline row and its queue
#     position (one WITH: was three statements); the queue caps' locks with the idempotency record (one
#     statement: was two, api.idempotency and queue_caps.Alongside); their counts.
#   admit 5: the cohorts; the quota rows locked (with their teams and GPU types); what the teams hold; the
#     queue heads; the move to SUBMITTING with its timeline rows (one WITH: was two). Was 9: the minimum
#     runtimes (two reads) are read only when something borrowed is held, and the GPU types' reservation
#     delays come with the quota rows instead of a read of their own.
#   create 2: the workload by uid with its team, GPU type, owner and catalog image, and the site facts'
#     version (one join, fixed SQL: was five statements, the ids by uid and four prefetch reads); the move to
#     PENDING with its timeline rows (autocommit on PostgreSQL: no BEGIN/COMMIT around it). The registries
#     and the unhealthy GPU marks are read again only when the site facts' version moved (was a read each).
#   running 2, succeeded 3: the tracker's load, the guarded move with its timeline row; the event. A burst
#     of one workload, as here, costs the same since its chunk's writes became one statement (tracker5);
#     a burst of N costs these too, not N times them (tests/engine/test_tracker_chunk_writes.py).
#   notified 2: the event with its recipient's preferences and its team's webhook (one join: was three
#     reads); the deliveries stored and the event marked (one WITH, autocommit: was an insert and an
#     update in a transaction). A burst's events (`fan_out_many`) cost the same two, whatever their number.
PATH = {
    "submit": 5,
    "admit": 5,
    "create": 2,
    "running": 2,
    "succeeded": 3,
    "notified": 2,
}


class Stages:
    """Every statement Django sends on this connection, filed under the stage that was innermost."""

    def __init__(self) -> None:
        self.current: list[str] = []
        self.sent: dict[str, list[str]] = {}

    @contextmanager
    def stage(self, name: str):
        self.current.append(name)
        try:
            yield
        finally:
            self.current.pop()

    def __call__(self, execute, sql, params, many, context):
        if self.current:
            self.sent.setdefault(self.current[-1], []).append(sql)
        return execute(sql, params, many, context)

    def counts(self) -> dict[str, int]:
        return {name: len(self.sent.get(name, [])) for name in PATH}

    def explain(self) -> str:
        return "\n".join(f"{name}:\n  " + "\n  ".join(self.sent.get(name, [])) for name in PATH)


def _view(workload: Workload, *, succeeded: bool) -> watch_loop.ClusterView:
    """What the tracker's watches hold once the workload's pod runs, or once it ended."""
    from benchmarks.profile_tracker import _objects

    started = timezone.now() - timedelta(seconds=5)
    job, pod = _objects(workload, succeeded=succeeded, started=started)
    view = watch_loop.ClusterView()
    view.put("Job", job)
    view.put("Pod", pod)
    return view


@pytest.fixture
def path(monkeypatch, fake_kube):
    """A team on a P100 node with room, a member's API token, and a function that takes one workload along
    the whole path, counting each stage's statements. What the path hands to Celery is kept here, not sent:
    in a whole run a session engine's worker on the same broker would run it before the path does."""
    team = TeamFactory(slug="vision")
    owner = MembershipFactory(team=team, user=UserFactory(username="olivia")).user
    p100 = GpuTypeFactory(slug="p100")
    QuotaFactory(team=team, gpu_type=p100, max_gpus=8)
    GpuNode.objects.create(
        name="gpu-p100-1", gpu_type=p100, gpus_capacity=8, gpus_allocatable=8, ready=True, last_seen_at=timezone.now()
    )
    AllowedRegistry.objects.create(host="docker.io")
    monkeypatch.setattr(provisioning, "_ready", {(team.namespace, "jobs")})
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(user=owner, name='laptop').raw}")
    stages = Stages()

    def one() -> Workload:
        spec = {"team": "vision", "image": "docker.io/library/python:3.12", "gpu_type": "p100", "gpu_count": 1}
        with connection.execute_wrapper(stages):
            with stages.stage("submit"):
                response = client.post(
                    "/api/v1/workloads/", spec, format="json", HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4())
                )
            assert response.status_code == 201, response.content
            workload = Workload.objects.get(uid=response.json()["uid"])
            assert workload.state == State.QUEUED  # the REST create asks a worker for the admission pass
            with stages.stage("admit"):
                assert tasks.admit(team.id, p100.id) == [workload.id]
            workload.refresh_from_db()
            assert workload.state == State.SUBMITTING
            with stages.stage("create"):
                assert tasks.submit_batch([workload.uid]) == 1
            workload.refresh_from_db()
            assert workload.state == State.PENDING
            for name, succeeded in (("running", False), ("succeeded", True)):
                view = _view(workload, succeeded=succeeded)
                with stages.stage(name):
                    assert watch_loop.sync_workloads(view, {workload.uid}, full=False) == 1
            event = Event.objects.get(workload=workload, kind=SUCCEEDED)
            with stages.stage("notified"):
                assert notifications_tasks.fan_out(event.id) == 1  # an email to its owner
            event.refresh_from_db()
            assert event.fanned_out_at is not None
        workload.refresh_from_db()
        return workload

    from portal.celery import app

    handed_over: list[tuple] = []
    monkeypatch.setattr(app, "send_task", lambda *args, **kwargs: handed_over.append((args, kwargs)))
    return one, stages


@pytest.mark.django_db(transaction=True)  # each stage commits as it does in production (no test savepoints)
def test_one_workload_costs_a_fixed_number_of_statements_at_each_stage(path):
    one, stages = path
    one()  # warm-up: the process learns the intake's facts and the token, as a running web process has
    stages.sent.clear()
    workload = one()
    assert workload.state == State.SUCCEEDED
    assert counted_interval(workload) is not None  # its GPU time is accounted: start and end recorded
    timeline = list(
        WorkloadEvent.objects.filter(workload=workload).order_by("at", "id").values_list("to_state", flat=True)
    )
    assert timeline == [State.QUEUED, State.SUBMITTING, State.PENDING, State.RUNNING, State.SUCCEEDED]
    assert stages.counts() == PATH, stages.explain()
