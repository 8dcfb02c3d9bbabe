"""Concurrent submissions of one team and GPU type do not queue behind each other's admission pass.

The first admits in line; one that arrives while another is admitting stores its workload QUEUED and
hands a single, coalesced admission pass to a worker (PostgreSQL advisory lock; the request is kept in
Redis until the pass starts). Real PostgreSQL and Redis; no worker runs here, so nothing is admitted
behind the test's back.
"""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.db import connection
from django.utils import timezone

from identity.models import Membership
from jobs.models import AllowedRegistry, GpuNode, GpuType, Quota, State, Team
from jobs.services import dispatch
from jobs.services.submission.intake import ADMIT_LOCK_SPACE, workload_submit

pytestmark = pytest.mark.django_db(transaction=True)


def node_present(gpu_type: GpuType) -> None:
    """A ready node of the type, re-asserted before each submission: these rows are committed, and the
    suite's running engine (its beat's inventory sync) deletes nodes the local cluster does not have."""
    GpuNode.objects.update_or_create(
        name="n1",
        defaults={
            "gpu_type": gpu_type, "gpus_capacity": 8, "gpus_allocatable": 8, "ready": True,
            "last_seen_at": timezone.now(),
        },
    )  # fmt: skip


def submit(team, user):
    node_present(GpuType.objects.get(slug="p100"))
    return workload_submit(team=team, owner=user, spec=SPEC)


@pytest.fixture
def world():
    p100 = GpuType.objects.create(slug="p100", display_name="Tesla P100", node_label_value="p100")
    node_present(p100)
    AllowedRegistry.objects.create(host="docker.io")
    team = Team.objects.create(name="Alpha", slug="alpha")
    Quota.objects.create(team=team, gpu_type=p100, max_gpus=8)
    user = get_user_model().objects.create_user("ann")
    Membership.objects.create(user=user, team=team)
    caches["api"].delete(dispatch._admission_key(team.id, p100.id))
    return team, user, p100


SPEC = {"image": "docker.io/library/python:3.12", "gpu_type": "p100", "gpu_count": 1}


def hold_admission_lock(team_id: int, gpu_type_id: int, held: threading.Event, release: threading.Event) -> None:
    """Another submission admitting right now: the same advisory lock, from another connection."""
    from django.db import connections

    try:
        with connections["default"].cursor() as cursor:
            key = (team_id * 100_003 + gpu_type_id) % 2_147_483_647
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", [ADMIT_LOCK_SPACE, key])
            held.set()
            release.wait(30)
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [ADMIT_LOCK_SPACE, key])
    finally:
        connections["default"].close()


def test_a_lone_submission_is_admitted_in_line(world):
    team, user, _ = world
    workload = submit(team, user)
    assert workload.state == State.SUBMITTING


def test_a_submission_during_another_admission_does_not_wait_and_asks_a_worker_once(world):
    team, user, p100 = world
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_admission_lock, args=(team.id, p100.id, held, release))
    holder.start()
    try:
        assert held.wait(10)
        first = submit(team, user)
        second = submit(team, user)
    finally:
        release.set()
        holder.join()
    # Stored, not admitted in line (no waiting behind the other pass) ...
    assert first.state == State.QUEUED
    assert second.state == State.QUEUED
    # ... and one pass requested for both: the request stays until a worker's pass starts.
    key = dispatch._admission_key(team.id, p100.id)
    assert caches["api"].get(key) == 1
    dispatch.admission_starting(team_id=team.id, gpu_type_id=p100.id)
    assert caches["api"].get(key) is None
    # Once nobody else is admitting, the next submission admits in line again, the queued ones too.
    third = submit(team, user)
    assert third.state == State.SUBMITTING
    # Admitted, all three (the suite's running engine may already have created some: PENDING and on).
    assert State.QUEUED not in {w.state for w in team.workloads.all()}
    assert connection.vendor == "postgresql"


@pytest.mark.django_db  # one rolled-back transaction: the suite's running engine cannot admit these first
def test_a_rest_submission_with_a_key_leaves_admission_to_one_worker_pass(world, django_capture_on_commit_callbacks):
    from rest_framework.test import APIClient

    team, user, p100 = world
    node_present(p100)
    client = APIClient()
    client.force_authenticate(user=user)
    with django_capture_on_commit_callbacks(execute=True):
        for key in ("first", "second"):
            response = client.post(
                "/api/v1/workloads/", {**SPEC, "team": team.slug}, format="json", HTTP_IDEMPOTENCY_KEY=key
            )
            assert response.status_code == 201, response.content
            assert response.json()["state"] == State.QUEUED
    # Nothing admitted while the requests waited; one pass asked of the workers for both.
    assert {w.state for w in team.workloads.all()} == {State.QUEUED}
    assert caches["api"].get(dispatch._admission_key(team.id, p100.id)) == 1
    # Without a key, admission runs in line as the request's transaction commits (here the test's own
    # transaction stands in for it), the two queued before it admitted with it.
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/v1/workloads/", {**SPEC, "team": team.slug}, format="json")
    assert response.status_code == 201, response.content
    # Admitted, all three (the suite's running engine may already have created some: PENDING and on).
    assert State.QUEUED not in {w.state for w in team.workloads.all()}
