"""kube.create, the worker's create of a workload's objects: the rendered dict POSTed as it is, with the
portal's own credentials. What the API server stores is what was rendered, and its refusals reach the
caller as the client's would (status and the server's own message)."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from devtools.engine import provision_now
from jobs.kube import client as kube
from jobs.kube import objects

pytestmark = pytest.mark.cluster


def _spec(namespace: str, **overrides) -> objects.WorkloadSpec:
    base = {
        "uid": uuid.uuid4().hex[:10], "name": "raw-body", "kind": "batch", "team_slug": "x", "username": "u",
        "namespace": namespace, "image": "ubuntu",
        "gpu_type": objects.GpuTypeSpec("p100", "gputype", "p100", "nvidia.com/gpu", 1000, 1024),
        "gpu_count": 1, "time_limit_seconds": 60, "env": (("EPOCHS", "3"),), "args": ("--a", "b c"),
        "secrets": (objects.SecretRef("wandb", "gp-secret-wandb", "WANDB_KEY"),),
    }  # fmt: skip
    return objects.WorkloadSpec(**{**base, **overrides})


def _contains(stored, sent, path="") -> None:
    """Everything sent is stored, unchanged (the server adds its defaults and status around it)."""
    if isinstance(sent, dict):
        assert isinstance(stored, dict), path
        for key, value in sent.items():
            assert key in stored, f"{path}.{key} was not stored"
            _contains(stored[key], value, f"{path}.{key}")
    elif isinstance(sent, list):
        assert isinstance(stored, list), path
        assert len(stored) == len(sent), path
        for i, (a, b) in enumerate(zip(stored, sent, strict=True)):
            _contains(a, b, f"{path}[{i}]")
    elif _is_quantity(path):  # the server writes quantities in canonical form: "1000m" is stored as "1"
        assert parse_quantity(stored) == parse_quantity(sent), f"{path}: sent {sent!r}, stored {stored!r}"
    else:
        assert stored == sent, f"{path}: sent {sent!r}, stored {stored!r}"


def _is_quantity(path: str) -> bool:
    return ".resources.requests." in path or ".resources.limits." in path or path.endswith(".sizeLimit")


def _create_when_bound(namespace: str, body: dict) -> None:
    import time

    deadline = time.monotonic() + 30  # RBAC learns of the namespace's new RoleBinding within a moment
    while True:
        try:
            kube.create(namespace, body)
            return
        except ApiException as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.django_db
def test_the_api_server_stores_exactly_the_rendered_objects(portal_account, kube_api):
    from tests.engine.factories import TeamFactory

    team = TeamFactory(slug=f"raw-{uuid.uuid4().hex[:6]}")
    namespace = provision_now(portal_account, team)
    read = {
        "Job": k8s.BatchV1Api(kube_api).read_namespaced_job,
        "Deployment": k8s.AppsV1Api(kube_api).read_namespaced_deployment,
        "Service": k8s.CoreV1Api(kube_api).read_namespaced_service,
    }
    try:
        bodies = objects.make_objects(_spec(namespace)) + objects.make_objects(
            _spec(namespace, kind="service", port=8888, read_only_root=True)
        )
        for body in bodies:
            _create_when_bound(namespace, body)
            stored = kube_api.sanitize_for_serialization(read[body["kind"]](body["metadata"]["name"], namespace))
            _contains(stored, body, body["kind"])
        # The same object again: 409, as the client raises it (the worker adopts it if it is its own).
        with pytest.raises(ApiException) as again:
            kube.create(namespace, bodies[0])
        assert again.value.status == 409
        assert "already exists" in kube.classify(again.value).message
    finally:
        k8s.CoreV1Api(kube_api).delete_namespace(namespace)


@pytest.mark.django_db
def test_a_refused_create_says_why(portal_account, kube_namespace):
    # A namespace the portal did not set up: 403, with the API server's own message, and not transient.
    with pytest.raises(ApiException) as denied:
        kube.create(kube_namespace, objects.make_job(_spec(kube_namespace)))
    assert denied.value.status == 403
    failure = kube.classify(denied.value)
    assert not failure.transient
    assert "forbidden" in failure.message
