"""Limits that keep one person from flooding the portal: queued workloads per user and per team, requests
per person (not only per token), tokens per person with a default expiry, no caching of a new token's
page, expired idempotency records pruned by beat, and an environment no larger than a workload needs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from api.models import ApiToken, IdempotencyRecord
from api.tasks import prune_idempotency_records
from api.tokens import token_create
from jobs.models import State, Workload

pytestmark = pytest.mark.django_db
SUBMIT = {"image": "docker.io/x:1", "gpu_type": "p100"}


def queued(world, owner, n: int) -> None:
    Workload.objects.bulk_create(
        Workload(
            team=world.team,
            owner=owner,
            name=f"q{i}",
            kind="batch",
            image="docker.io/x:1",
            gpu_type=world.p100,
            gpu_count=1,
            time_limit_seconds=3600,
            state=State.QUEUED,
        )
        for i in range(n)
    )


def test_a_person_may_queue_only_so_many(world, settings):
    settings.PORTAL_MAX_QUEUED_PER_USER = 3
    queued(world, world.owner, 3)
    response = world.client("owner").post("/api/v1/workloads/", SUBMIT, format="json")
    assert response.status_code == 400
    assert "at most 3" in response.json()["error"]["fields"]["queue"][0]
    assert Workload.objects.count() == 3  # nothing stored
    # A teammate still may.
    assert world.client("teammate").post("/api/v1/workloads/", SUBMIT, format="json").status_code == 201


def test_a_team_may_queue_only_so_many(world, settings):
    settings.PORTAL_MAX_QUEUED_PER_TEAM = 4
    queued(world, world.teammate, 4)
    response = world.client("owner").post("/api/v1/workloads/", SUBMIT, format="json")
    assert response.status_code == 400
    assert "at most 4" in response.json()["error"]["fields"]["queue"][0]


def test_more_tokens_do_not_buy_more_requests(world):
    second = token_create(user=world.owner, name="second laptop").raw
    rates = {"token": "100/min", "user": "3/min"}
    with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}):
        first = world.client("owner")
        other = world.client(None)
        other.credentials(HTTP_AUTHORIZATION=f"Bearer {second}")
        codes = [c.get("/api/v1/teams/").status_code for c in (first, other, first, other)]
        teammate = world.client("teammate").get("/api/v1/teams/")
    assert codes == [200, 200, 200, 429]
    assert teammate.status_code == 200


def test_a_person_holds_only_so_many_tokens(client, world, settings):
    settings.API_MAX_TOKENS_PER_USER = 2  # the fixture gave the owner one already
    client.force_login(world.owner)
    assert client.post("/profile/tokens/", {"name": "second"}).status_code == 200
    refused = client.post("/profile/tokens/", {"name": "third"})
    assert refused.status_code == 400
    assert "the most allowed" in refused.content.decode()
    assert ApiToken.objects.filter(user=world.owner).count() == 2


def test_a_new_token_expires_by_default_and_its_page_is_never_cached(client, world, settings):
    client.force_login(world.teammate)
    page = client.post("/profile/tokens/", {"name": "ci"})
    assert "no-store" in page["Cache-Control"]
    token = ApiToken.objects.get(user=world.teammate, name="ci")
    expected = timezone.now() + timedelta(days=settings.API_TOKEN_DEFAULT_DAYS)
    assert abs((token.expires_at - expected).total_seconds()) < 60
    assert "no-store" in client.get("/profile/tokens/")["Cache-Control"]


def test_expired_idempotency_records_are_pruned_by_beat(world, settings):
    assert settings.CELERY_BEAT_SCHEDULE["idempotency-prune"]["task"] == "api.tasks.prune_idempotency_records"
    old = timezone.now() - timedelta(seconds=settings.API_IDEMPOTENCY_TTL_SECONDS + 60)
    for key, at in (("old", old), ("fresh", timezone.now())):
        IdempotencyRecord.objects.create(
            user=world.owner, key=key, request_hash="x", status_code=201, response_body={}, created_at=at
        )
    assert prune_idempotency_records() == 1
    assert list(IdempotencyRecord.objects.values_list("key", flat=True)) == ["fresh"]


def test_an_environment_larger_than_a_workload_needs_is_refused(world):
    env = {f"VAR_{i}": "x" * 1000 for i in range(20)}  # 20 KB: accepted before, far beyond a real need
    response = world.client("owner").post("/api/v1/workloads/", {**SUBMIT, "env": env}, format="json")
    assert response.status_code == 400
    assert "env" in response.json()["error"]["fields"]
    assert not Workload.objects.exists()


def test_requests_arriving_together_are_all_counted():
    """Each request's windows are checked and counted in one atomic step in Redis (one round trip for the
    token's and the person's), so 30 requests at once under a limit of 10 let exactly 10 through; a read
    and a write apart would let a burst slip past the limit."""
    import threading
    from types import SimpleNamespace

    from django.core.cache import caches

    from api.throttling import TokenRateThrottle, UserRateThrottle, count_together

    try:
        caches["api"].get("reachable")
    except Exception:
        pytest.skip("needs Redis")
    person = SimpleNamespace(is_authenticated=True, pk=424242)
    request = SimpleNamespace(auth=SimpleNamespace(pk=434343), user=person)
    rates = {"token": "10/min", "user": "12/min"}
    barrier = threading.Barrier(30)
    allowed: list[bool] = []
    with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}):

        def one() -> None:
            throttles = [TokenRateThrottle(), UserRateThrottle()]
            barrier.wait()
            count_together(throttles, request, None)
            allowed.append(all(t.allow_request(request, None) for t in throttles))

        threads = [threading.Thread(target=one) for _ in range(30)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        refused = TokenRateThrottle()
        assert not refused.allow_request(request, None)
        assert 0 < refused.wait() <= 60
    assert allowed.count(True) == 10
