"""The engine learns which PersistentVolume each workspace claim is bound to (jobs.services.storage.workspaces.
workspace_volumes_learn), against the in-memory client seam (tests/engine/fake_kube.py)."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from jobs.models import Workspace
from jobs.services.storage.workspaces import workspace_volumes_learn
from tests.engine.factories import TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def _claim(namespace: str, name: str, volume: str = "") -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"volumeName": volume or None, "accessModes": ["ReadWriteMany"]},
        "status": {"phase": "Bound" if volume else "Pending"},
    }


def _workspace(team, namespace: str, claim: str, volume: str = "", owner=None) -> Workspace:
    return Workspace.objects.create(
        team=team, owner=owner, namespace=namespace, claim_name=claim, mount_path="/team", size_gib=5,
        storage_class="fast", volume_name=volume,
    )  # fmt: skip


def test_bound_claims_are_mapped_once_and_then_no_call_is_made(fake_kube):
    team = TeamFactory(slug="lab")
    home = _workspace(team, "gp-lab", "home-ada", owner=UserFactory(username="ada"))
    shared = _workspace(team, "gp-lab", "team")
    known = _workspace(TeamFactory(slug="other"), "gp-other", "team", volume="pvc-known")
    fake_kube.add("PersistentVolumeClaim", _claim("gp-lab", "home-ada"))  # not bound yet
    fake_kube.add("PersistentVolumeClaim", _claim("gp-lab", "team", "pvc-team"))
    fake_kube.add("PersistentVolumeClaim", _claim("gp-lab", "not-ours", "pvc-else"))

    assert workspace_volumes_learn() == 1
    # Only the namespace with claims still to learn is listed.
    assert fake_kube.calls == [("list_namespaced_persistent_volume_claim", "gp-lab")]
    shared.refresh_from_db()
    home.refresh_from_db()
    known.refresh_from_db()
    assert (shared.volume_name, home.volume_name, known.volume_name) == ("pvc-team", "", "pvc-known")

    fake_kube.add("PersistentVolumeClaim", _claim("gp-lab", "home-ada", "pvc-home"))
    assert workspace_volumes_learn() == 1
    home.refresh_from_db()
    assert home.volume_name == "pvc-home"

    fake_kube.calls.clear()
    assert workspace_volumes_learn() == 0
    assert fake_kube.calls == []  # every claim mapped: nothing to ask


def test_a_namespace_that_cannot_be_listed_is_skipped_and_tried_next_time(fake_kube):
    shared = _workspace(TeamFactory(slug="lab"), "gp-lab", "team")
    fake_kube.add("PersistentVolumeClaim", _claim("gp-lab", "team", "pvc-team"))
    fake_kube.failing["list_namespaced_persistent_volume_claim"] = ApiException(status=403, reason="Forbidden")

    assert workspace_volumes_learn() == 0

    del fake_kube.failing["list_namespaced_persistent_volume_claim"]
    assert workspace_volumes_learn() == 1
    shared.refresh_from_db()
    assert shared.volume_name == "pvc-team"
