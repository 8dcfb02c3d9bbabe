"""A team's script submits a sweep in one request: all stored in order, or none, each error naming its item."""

from __future__ import annotations

import pytest

from jobs.models import State, Workload, WorkloadEvent
from tests.api.conftest import batch_spec

URL = "/api/v1/workloads/batch/"


def sweep(count: int, **overrides) -> list[dict]:
    return [batch_spec(args=[f"--lr=0.{i + 1}"], **overrides) for i in range(count)]


def test_a_sweep_is_stored_in_order_with_a_timeline_each(world):
    response = world.client("owner").post(URL, {"team": "vision", "workloads": sweep(3)}, format="json")
    assert response.status_code == 201, response.content
    answered = response.json()["workloads"]
    assert [w["args"] for w in answered] == [["--lr=0.1"], ["--lr=0.2"], ["--lr=0.3"]]
    stored = {w.uid: w for w in Workload.objects.all()}
    assert [stored[w["uid"]].args for w in answered] == [["--lr=0.1"], ["--lr=0.2"], ["--lr=0.3"]]
    assert {w.owner.username for w in stored.values()} == {"olivia"}
    assert all(w["gpu_type"] == "p100" and w["team"] == "vision" for w in answered)
    assert sorted(w["queue_position"] for w in answered if w["state"] == State.QUEUED) == list(
        range(1, 1 + sum(w["state"] == State.QUEUED for w in answered))
    )
    assert WorkloadEvent.objects.filter(reason="Submitted").count() == 3


def test_one_bad_item_stores_none_and_is_named(world):
    items = sweep(3)
    items[1]["gpu_count"] = 99
    items[2]["kind"] = "nonsense"
    response = world.client("owner").post(URL, {"workloads": items}, format="json")
    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    assert set(fields) == {"workloads[1].gpu_count", "workloads[2].kind"}
    assert Workload.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"workloads": "train"}, "workloads"),
        ({}, "workloads"),
        ({"workloads": []}, "workloads"),
        ({"workloads": [batch_spec()], "colour": "red"}, "colour"),
        ({"workloads": [batch_spec(team="vision")]}, "workloads[0].team"),
        ({"workloads": [batch_spec(), "train"]}, "workloads[1]"),
        ({"workloads": [batch_spec(gpu_count="2")]}, "workloads[0].gpu_count"),
        ({"workloads": [batch_spec()] * 501}, "workloads"),
        ({"team": "language", "workloads": [batch_spec()]}, "team"),
    ],
)
def test_malformed_batches_are_refused_by_field(world, body, field):
    response = world.client("owner").post(URL, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]
    assert Workload.objects.count() == 0


def test_a_bare_list_is_refused_with_a_message(world):
    response = world.client("owner").post(URL, [batch_spec()], format="json")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Send a JSON object."
    assert Workload.objects.count() == 0


def test_a_retry_with_the_same_key_stores_the_sweep_once(world):
    client = world.client("owner")
    body = {"workloads": sweep(2)}
    first = client.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY="sweep-7")
    again = client.post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY="sweep-7")
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Workload.objects.count() == 2
    other = client.post(URL, {"workloads": sweep(3)}, format="json", HTTP_IDEMPOTENCY_KEY="sweep-7")
    assert other.status_code == 422
    assert Workload.objects.count() == 2


def test_the_queue_cap_counts_the_whole_batch(world, settings):
    settings.PORTAL_MAX_QUEUED_PER_USER = 3
    client = world.client("owner")
    # k80s: the team's quota there is 2, so at most 2 run at once and the rest wait.
    refused = client.post(URL, {"workloads": sweep(6, gpu_type="k80")}, format="json")
    assert refused.status_code == 400
    (message,) = refused.json()["error"]["fields"]["queue"]
    assert "this request adds 6" in message
    assert Workload.objects.count() == 0
    assert client.post(URL, {"workloads": sweep(3, gpu_type="k80")}, format="json").status_code == 201
    assert Workload.objects.count() == 3


def test_an_outsider_cannot_submit_to_another_team(world):
    response = world.client("outsider").post(URL, {"team": "vision", "workloads": sweep(1)}, format="json")
    assert response.status_code == 400
    assert "team" in response.json()["error"]["fields"]
    assert Workload.objects.count() == 0


def test_taken_uids_are_drawn_again_and_the_order_is_kept(world, monkeypatch):
    from jobs.models import workloads as workloads_model

    taken = world.client("owner").post(URL, {"workloads": sweep(1)}, format="json").json()["workloads"][0]["uid"]
    # The sweep's first draw is taken already, its second and third are the same: each is drawn again.
    draws = iter([taken, "aaaa000000000001", "aaaa000000000001", "aaaa000000000002", "aaaa000000000003"])
    monkeypatch.setattr(workloads_model, "new_uid", lambda: next(draws))
    response = world.client("owner").post(URL, {"workloads": sweep(3)}, format="json")
    assert response.status_code == 201, response.content
    answered = response.json()["workloads"]
    assert [w["args"] for w in answered] == [["--lr=0.1"], ["--lr=0.2"], ["--lr=0.3"]]
    assert len({w["uid"] for w in answered} | {taken}) == 4
    for w in answered:
        assert Workload.objects.get(uid=w["uid"]).args == w["args"]
    assert WorkloadEvent.objects.filter(reason="Submitted").count() == 4
