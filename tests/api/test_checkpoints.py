"""The checkpoint contract's API: a workload's own token reports its checkpoints and can do nothing else."""

from __future__ import annotations

from rest_framework.test import APIClient

from jobs.models import Checkpoint, State, Workload
from jobs.services.checkpoints.tokens import workload_token


def _as_workload(uid: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {workload_token(uid)}")
    return client


def _running(uid: str) -> Workload:
    Workload.objects.filter(uid=uid).update(state=State.RUNNING)
    return Workload.objects.get(uid=uid)


def test_the_workload_reports_a_checkpoint_and_people_see_it(world, submit):
    uid = submit()["uid"]
    _running(uid)
    response = _as_workload(uid).post(
        f"/api/v1/workloads/{uid}/checkpoints/", {"step": 120, "path": "/home/olivia/ck/120.pt"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["step"] == 120
    workload = Workload.objects.get(uid=uid)
    assert workload.last_checkpoint_step == 120
    assert workload.last_checkpoint_at is not None
    # The owner and a teammate read it back with its age; an outsider gets 404.
    for who in ("owner", "teammate"):
        body = world.client(who).get(f"/api/v1/workloads/{uid}/checkpoints/").json()
        assert body["last"]["step"] == 120
        assert body["last"]["age_seconds"] >= 0
        assert body["checkpoints"][0]["path"] == "/home/olivia/ck/120.pt"
    assert world.client("outsider").get(f"/api/v1/workloads/{uid}/checkpoints/").status_code == 404
    detail = world.client("owner").get(f"/api/v1/workloads/{uid}/").json()
    assert detail["last_checkpoint"]["step"] == 120


def test_the_workload_token_touches_nothing_else(world, submit):
    mine, other = submit()["uid"], submit(name="other")["uid"]
    _running(mine), _running(other)
    client = _as_workload(mine)
    # Another workload's checkpoints: 404, nothing stored.
    assert client.post(f"/api/v1/workloads/{other}/checkpoints/", {"step": 1}, format="json").status_code == 404
    # Anything else in the API: refused (403), its own workload included.
    for path in (f"/api/v1/workloads/{mine}/", "/api/v1/workloads/", "/api/v1/usage/", "/api/v1/secrets/"):
        assert client.get(path).status_code == 403, path
    assert client.post(f"/api/v1/workloads/{mine}/cancel/").status_code == 403
    assert client.get(f"/api/v1/workloads/{mine}/checkpoints/").status_code == 403
    # A made-up token of the right shape: 401.
    forged = APIClient()
    forged.credentials(HTTP_AUTHORIZATION=f"Bearer gpw_{mine}_{'0' * 64}")
    assert forged.post(f"/api/v1/workloads/{mine}/checkpoints/", {"step": 1}, format="json").status_code == 401
    # A person cannot report a checkpoint for the job.
    assert (
        world.client("owner").post(f"/api/v1/workloads/{mine}/checkpoints/", {"step": 1}, format="json").status_code
        == 403
    )
    assert Checkpoint.objects.count() == 0


def test_the_token_dies_with_the_workload_and_bad_input_names_the_field(world, submit):
    uid = submit()["uid"]
    _running(uid)
    client = _as_workload(uid)
    response = client.post(f"/api/v1/workloads/{uid}/checkpoints/", {"step": -3, "path": "x" * 2000}, format="json")
    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) == {"step", "path"}
    assert client.post(f"/api/v1/workloads/{uid}/checkpoints/", [1, 2], format="json").status_code == 400
    Workload.objects.filter(uid=uid).update(state=State.SUCCEEDED)
    assert client.post(f"/api/v1/workloads/{uid}/checkpoints/", {"step": 5}, format="json").status_code == 401
    assert Checkpoint.objects.count() == 0
