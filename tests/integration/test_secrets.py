"""Secrets end to end: stored through the API, a Kubernetes Secret in the team namespace, reaching the
container (its file read by the simulated program), and absent from every API response, page, portal log
and rendered object. Bad input names the field and creates nothing in Kubernetes."""

from __future__ import annotations

import base64
import json
import logging

import pytest
from django.urls import reverse
from kubernetes import client as k8s
from rest_framework.test import APIClient

from jobs.models import State, TeamSecret, Workload
from jobs.services.logs import workload_logs

pytestmark = [pytest.mark.cluster, pytest.mark.celery]
VALUE = "sk-live-7f3a9c-do-not-leak"  # the value whose absence is asserted


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_secret_reaches_the_container_and_nowhere_else(engine, kube_api, client, caplog):
    caplog.set_level(logging.DEBUG)
    owner_api = _api(engine.owner)
    stored = owner_api.post("/api/v1/secrets/", {"name": "wandb", "value": VALUE}, format="json")
    assert stored.status_code == 201, stored.content
    assert VALUE not in stored.content.decode()

    secret = TeamSecret.objects.get(team=engine.team, name="wandb")
    in_cluster = k8s.CoreV1Api(kube_api).read_namespaced_secret(secret.k8s_name, engine.team.namespace)
    assert in_cluster.data["value"]  # the value lives there, base64-encoded, and only there

    response = owner_api.post(
        "/api/v1/workloads/",
        {
            "image": "nvidia/cuda:12.2.0-base-ubuntu22.04",
            "gpu_type": "p100",
            "secrets": [{"name": "wandb", "env": "WANDB_API_KEY"}],
            "env": [
                {"name": "SIM_READ_FILE", "value": "/var/run/secrets/gpuportal/wandb"},
                {"name": "SIM_RUN_SECONDS", "value": "1"},
            ],
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    workload = Workload.objects.get(uid=response.json()["uid"])
    engine.wait_for(workload, State.SUCCEEDED, timeout=90)
    # The simulated program read the mounted file: the value reached the container.
    assert f"read /var/run/secrets/gpuportal/wandb: {VALUE}" in workload_logs(workload)

    job = k8s.BatchV1Api(kube_api).read_namespaced_job(workload.k8s_name, workload.namespace)
    rendered = json.dumps(k8s.ApiClient().sanitize_for_serialization(job))
    assert VALUE not in rendered
    env = job.spec.template.spec.containers[0].env
    assert [(e.name, e.value_from.secret_key_ref.name) for e in env if e.value_from] == [
        ("WANDB_API_KEY", secret.k8s_name)
    ]
    stored_spec = json.dumps([workload.env, workload.secrets, workload.mounts, workload.command, workload.args])
    assert VALUE not in stored_spec

    for path in (f"/api/v1/workloads/{workload.uid}/", "/api/v1/workloads/", "/api/v1/secrets/"):
        body = owner_api.get(path).content.decode()
        assert VALUE not in body
    assert '"name":"wandb"' in owner_api.get("/api/v1/secrets/").content.decode().replace(" ", "")
    client.force_login(engine.owner)
    page = client.get(reverse("workload_detail", args=[workload.uid])).content.decode()
    assert "wandb" in page
    assert VALUE not in page
    assert VALUE not in caplog.text
    for process in ("worker", "tracker"):
        assert VALUE not in engine.processes.log(process)


def test_bad_secrets_name_the_field_and_create_nothing(engine, kube_api):
    core = k8s.CoreV1Api(kube_api)
    owner_api = _api(engine.owner)
    before = Workload.objects.count()
    refused = owner_api.post("/api/v1/secrets/", {"name": "Bad Name", "value": "x"}, format="json")
    assert refused.status_code == 400
    assert "name" in refused.json()["error"]["fields"]
    shared = owner_api.post("/api/v1/secrets/", {"name": "hf", "value": "x", "shared": True}, format="json")
    assert shared.status_code == 400
    assert "shared" in shared.json()["error"]["fields"]
    unknown = owner_api.post(
        "/api/v1/workloads/",
        {"image": "nvidia/cuda:12.2.0-base-ubuntu22.04", "gpu_type": "p100", "secrets": [{"name": "nope"}]},
        format="json",
    )
    assert unknown.status_code == 400
    assert "secrets" in unknown.json()["error"]["fields"]
    assert Workload.objects.count() == before
    assert not TeamSecret.objects.filter(team=engine.team).exists()
    names = [s.metadata.name for s in core.list_namespaced_secret(engine.team.namespace).items]
    assert not [n for n in names if n.startswith("secret-")]


def test_teammates_see_env_names_but_not_values(engine):
    workload = engine.submit(env={"TOKEN": "plain-but-private", "SIM_RUN_SECONDS": "600"})
    mine = _api(engine.owner).get(f"/api/v1/workloads/{workload.uid}/").json()
    theirs = _api(engine.teammate).get(f"/api/v1/workloads/{workload.uid}/").json()
    assert {"name": "TOKEN", "value": "plain-but-private"} in mine["env"]
    assert {"name": "TOKEN", "value": None} in theirs["env"]


def test_a_private_registry_image_pod_references_the_pull_secret(engine, kube_api):
    from jobs.models import AllowedRegistry
    from jobs.services.object_creation import forget_namespaces

    registry = AllowedRegistry.objects.create(host="registry.lab:5000", pull_username="robot", pull_password="hunter2")
    forget_namespaces()
    workload = engine.submit(image="registry.lab:5000/vision/train:1", env={"SIM_RUN_SECONDS": "1"})
    engine.wait_for(workload, State.SUCCEEDED, timeout=90)
    job = k8s.BatchV1Api(kube_api).read_namespaced_job(workload.k8s_name, workload.namespace)
    assert [s.name for s in job.spec.template.spec.image_pull_secrets] == [registry.pull_secret_name]
    secret = k8s.CoreV1Api(kube_api).read_namespaced_secret(registry.pull_secret_name, workload.namespace)
    assert secret.type == "kubernetes.io/dockerconfigjson"
    assert "hunter2" not in json.dumps(_api(engine.owner).get(f"/api/v1/workloads/{workload.uid}/").json())


def test_the_secrets_page_stores_replaces_and_deletes_a_kubernetes_secret(engine, kube_api, client, caplog):
    caplog.set_level(logging.DEBUG)
    core = k8s.CoreV1Api(kube_api)
    client.force_login(engine.owner)
    stored = client.post(reverse("secrets"), {"name": "page-key", "value": VALUE}, follow=True)
    assert stored.status_code == 200
    page = stored.content.decode()
    assert 'data-name="page-key"' in page
    assert "Secret page-key is stored" in page
    assert VALUE not in page
    secret = TeamSecret.objects.get(team=engine.team, name="page-key")
    in_cluster = core.read_namespaced_secret(secret.k8s_name, engine.team.namespace)
    assert base64.b64decode(in_cluster.data["value"]).decode() == VALUE
    # The same name replaces the value (one row, one Secret).
    replaced = client.post(reverse("secrets"), {"name": "page-key", "value": VALUE + "-2"}, follow=True)
    assert VALUE not in replaced.content.decode()
    assert TeamSecret.objects.filter(team=engine.team, name="page-key").count() == 1
    in_cluster = core.read_namespaced_secret(secret.k8s_name, engine.team.namespace)
    assert base64.b64decode(in_cluster.data["value"]).decode() == VALUE + "-2"
    # A teammate cannot delete it (they do not see it); the owner can.
    client.force_login(engine.teammate)
    assert client.post(reverse("secret_delete", args=["page-key"])).status_code == 404
    client.force_login(engine.owner)
    deleted = client.post(reverse("secret_delete", args=["page-key"]), follow=True)
    assert "Secret page-key is deleted" in deleted.content.decode()
    assert not TeamSecret.objects.filter(team=engine.team, name="page-key").exists()
    with pytest.raises(k8s.exceptions.ApiException) as gone:
        core.read_namespaced_secret(secret.k8s_name, engine.team.namespace)
    assert gone.value.status == 404
    assert VALUE not in caplog.text
