"""A service's `open_url` and its "shared with my team" switch through the API."""

from __future__ import annotations

import pytest

from jobs.models import Workload, WorkloadEvent
from tests.api.conftest import batch_spec


def _service(world, **overrides) -> dict:
    spec = batch_spec(kind="service", port=8888, **overrides)
    response = world.client("owner").post("/api/v1/workloads/", spec, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_a_service_has_an_open_url_and_can_be_shared_at_submit(world, settings):
    settings.SITE_URL = "https://gpus.example.org"
    body = _service(world, shared_with_team=True)
    assert body["open_url"] == f"https://gpus.example.org/w/{body['uid']}/"
    assert body["shared_with_team"] is True
    assert body["last_activity_at"] is None
    batch = world.client("owner").post("/api/v1/workloads/", batch_spec(), format="json").json()
    assert batch["open_url"] == ""


@pytest.mark.parametrize(
    ("value", "message"),
    [("yes", "Must be true or false."), (1, "Must be true or false.")],
)
def test_shared_with_team_must_be_a_boolean(world, value, message):
    response = world.client("owner").post(
        "/api/v1/workloads/", batch_spec(kind="service", port=8888, shared_with_team=value), format="json"
    )
    assert response.status_code in (400, 422)
    assert message in str(response.json())
    assert not Workload.objects.exists()


def test_a_batch_job_cannot_be_shared(world):
    response = world.client("owner").post("/api/v1/workloads/", batch_spec(shared_with_team=True), format="json")
    assert response.status_code in (400, 422)
    assert "shared_with_team" in str(response.json())
    assert not Workload.objects.exists()


@pytest.mark.parametrize(
    ("who", "status"), [("owner", 200), ("teammate", 403), ("manager", 403), ("outsider", 404), ("admin", 403)]
)
def test_only_the_owner_shares(world, who, status):
    uid = _service(world)["uid"]
    response = world.client(who).post(f"/api/v1/workloads/{uid}/share/", {"shared_with_team": True}, format="json")
    assert response.status_code == status, response.content
    workload = Workload.objects.get(uid=uid)
    assert workload.shared_with_team is (status == 200)
    if status == 200:
        assert response.json()["shared_with_team"] is True
        assert WorkloadEvent.objects.filter(workload=workload, reason="SharedWithTeam").count() == 1
        again = world.client(who).post(f"/api/v1/workloads/{uid}/share/", {"shared_with_team": False}, format="json")
        assert again.json()["shared_with_team"] is False


def test_share_wants_a_boolean(world):
    uid = _service(world)["uid"]
    response = world.client("owner").post(f"/api/v1/workloads/{uid}/share/", {"shared_with_team": "on"}, format="json")
    assert response.status_code in (400, 422)
    assert "shared_with_team" in response.json()["error"]["fields"]


def test_share_refuses_a_field_it_does_not_know_and_shares_nothing(world):
    uid = _service(world)["uid"]
    body = {"shared_with_team": True, "expires": "tomorrow"}  # a wish the portal cannot keep: said, not dropped
    response = world.client("owner").post(f"/api/v1/workloads/{uid}/share/", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"] == {"expires": ["Unknown field."]}
    assert world.client("owner").get(f"/api/v1/workloads/{uid}/").json()["shared_with_team"] is False
