"""Names that collide, end to end (issue 33.2): with the name functions forced to give two members the
same Kubernetes name (as a brute-forced username colliding in 8 hex digits of sha256 did), the second
member neither replaces the first one's Secret in the cluster nor has their workloads mount the first
one's home. The real engine, Celery worker and API server; only the name function is forced."""

from __future__ import annotations

import base64

import pytest
from kubernetes import client as k8s

from jobs.kube import names
from jobs.models import State, Workspace
from tests.integration.test_secrets import _api, store

pytestmark = [pytest.mark.cluster, pytest.mark.celery]


def test_a_forced_secret_name_collision_leaves_the_first_members_secret_alone(engine, kube_api, monkeypatch):
    monkeypatch.setattr(names, "secret_object_name", lambda name, **_: f"secret-everyone-{name}")
    first = store(_api(engine.owner), "token", "the-owners-value")
    refused = _api(engine.teammate).post("/api/v1/secrets/", {"name": "token", "value": "mine"}, format="json")
    assert refused.status_code == 400, refused.content
    assert "name" in refused.json()["error"]["fields"]
    held = k8s.CoreV1Api(kube_api).read_namespaced_secret("secret-everyone-token", engine.team.namespace)
    assert base64.b64decode(held.data["value"]).decode() == "the-owners-value"
    assert first["name"] == "token"


def test_a_forced_home_claim_collision_never_mounts_another_members_home(engine, monkeypatch, settings):
    settings.WORKSPACE_STORAGE_CLASS = "gpuportal-local"
    settings.WORKSPACE_HOME_GIB = 1
    monkeypatch.setattr(names, "home_claim_name", lambda username, *args: "home-everyone")
    mine = engine.submit(env={"SIM_RUN_SECONDS": "1"})
    engine.wait_for(mine, State.SUCCEEDED, timeout=90)
    assert Workspace.objects.get(claim_name="home-everyone").owner == engine.owner
    theirs = engine.submit(user=engine.teammate, env={"SIM_RUN_SECONDS": "1"})
    assert theirs.mounts[0]["claim"] == "home-everyone"  # the forced name, as a colliding hash gave it
    engine.wait_for(theirs, State.FAILED, timeout=90)
    assert theirs.reason == "NotTheOwners"
    assert "belongs to someone else" in theirs.message
    assert theirs.started_at is None  # it never ran with the other's home
