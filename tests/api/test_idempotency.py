"""A script that retries a create after a timeout never submits twice."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from jobs.models import Workload
from tests.api.conftest import batch_spec

URL = "/api/v1/workloads/"


def test_retry_with_the_same_key_replays_the_first_response(world):
    client = world.client("owner")
    first = client.post(URL, batch_spec(), format="json", HTTP_IDEMPOTENCY_KEY="run-42")
    again = client.post(URL, batch_spec(), format="json", HTTP_IDEMPOTENCY_KEY="run-42")
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Workload.objects.count() == 1


def test_same_key_other_body_is_422(world):
    client = world.client("owner")
    assert client.post(URL, batch_spec(), format="json", HTTP_IDEMPOTENCY_KEY="k").status_code == 201
    response = client.post(URL, batch_spec(gpu_count=2), format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert Workload.objects.count() == 1


def test_keys_are_per_user(world):
    assert world.client("owner").post(URL, batch_spec(), format="json", HTTP_IDEMPOTENCY_KEY="k").status_code == 201
    response = world.client("teammate").post(URL, batch_spec(), format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response
    assert Workload.objects.count() == 2


def test_a_refused_request_can_be_fixed_and_retried_with_its_key(world):
    client = world.client("owner")
    bad = client.post(URL, batch_spec(gpu_count=99), format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert bad.status_code == 400
    good = client.post(URL, batch_spec(), format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert good.status_code == 201
    assert Workload.objects.count() == 1


def test_bad_keys(world):
    client = world.client("owner")
    for key in ("", "x" * 300, "tab\there"):
        response = client.post(URL, batch_spec(), format="json", HTTP_IDEMPOTENCY_KEY=key)
        assert response.status_code == 400, key
        assert "Idempotency-Key" in response.json()["error"]["fields"]


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_submit_once(world):
    if connection.vendor != "postgresql":
        pytest.skip("concurrency is proven on PostgreSQL (SQLite serialises every write)")
    barrier = threading.Barrier(8)
    results: list[tuple[int, bool]] = []
    lock = threading.Lock()

    def attempt() -> None:
        client = world.client("owner")
        barrier.wait()
        try:
            response = client.post(URL, batch_spec(), format="json", HTTP_IDEMPOTENCY_KEY="same-key")
            with lock:
                results.append((response.status_code, response.get("Idempotent-Replayed") == "true"))
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [code for code, _ in results] == [201] * 8
    assert sum(1 for _, replayed in results if not replayed) == 1
    assert Workload.objects.count() == 1


def test_a_key_expires_after_its_retention(world):
    from datetime import timedelta

    import time_machine
    from django.utils import timezone

    client = world.client("owner")
    assert client.post(URL, batch_spec(), format="json", HTTP_IDEMPOTENCY_KEY="daily").status_code == 201
    with time_machine.travel(timezone.now() + timedelta(days=2)):
        again = client.post(URL, batch_spec(), format="json", HTTP_IDEMPOTENCY_KEY="daily")
    assert again.status_code == 201
    assert "Idempotent-Replayed" not in again
    assert Workload.objects.count() == 2


def test_the_keyed_answer_is_the_workload_as_read_back(world):
    """A keyed create renders the workload it just stored from memory (its queue position and GPU type
    read in one statement): the answer must be what reading it back gives."""
    client = world.client("owner")
    for n in range(3):
        client.post(URL, batch_spec(), format="json", HTTP_IDEMPOTENCY_KEY=f"before-{n}")
    created = client.post(URL, batch_spec(), format="json", HTTP_IDEMPOTENCY_KEY="mine")
    assert created.status_code == 201
    body = created.json()
    read = client.get(f"{URL}{body['uid']}/").json()
    assert body["queue_position"] >= 4  # behind the three before it
    assert {k: v for k, v in body.items() if k != "gpu_hours"} == {k: v for k, v in read.items() if k != "gpu_hours"}


def test_a_retry_at_the_queue_cap_replays_the_first_answer(world, settings):
    # The first request filled the person's queue: its retry is the same request, answered as it was, not
    # refused as one more (the record is found before the caps are counted).
    settings.PORTAL_MAX_QUEUED_PER_USER = 1
    client = world.client("owner")
    first = client.post(URL, batch_spec(gpu_count=4), format="json", HTTP_IDEMPOTENCY_KEY="full")
    again = client.post(URL, batch_spec(gpu_count=4), format="json", HTTP_IDEMPOTENCY_KEY="full")
    assert first.status_code == again.status_code == 201, again.content
    assert again["Idempotent-Replayed"] == "true"
    assert first.json() == again.json()
    other = client.post(URL, batch_spec(gpu_count=4), format="json", HTTP_IDEMPOTENCY_KEY="another")
    assert other.status_code == 400
    assert "queue" in other.json()["error"]["fields"]
    assert Workload.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicate_sweeps_submit_once(world):
    if connection.vendor != "postgresql":
        pytest.skip("concurrency is proven on PostgreSQL (SQLite serialises every write)")
    body = {"workloads": [batch_spec(name=f"sweep-{i}") for i in range(3)]}
    barrier = threading.Barrier(6)
    results: list[tuple[int, bool, list[str]]] = []
    lock = threading.Lock()

    def attempt() -> None:
        client = world.client("owner")
        barrier.wait()
        try:
            response = client.post(f"{URL}batch/", body, format="json", HTTP_IDEMPOTENCY_KEY="same-sweep")
            uids = [w["uid"] for w in response.json().get("workloads", [])]
            with lock:
                results.append((response.status_code, response.get("Idempotent-Replayed") == "true", uids))
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [code for code, _, _ in results] == [201] * 6
    assert sum(1 for _, replayed, _ in results if not replayed) == 1
    assert len({tuple(uids) for _, _, uids in results}) == 1  # every answer names the same three
    assert Workload.objects.count() == 3
