"""Secrets end to end: stored through the API, sealed by the web for the engine, written by the engine's
worker into a Kubernetes Secret in the team namespace, reaching the container (its file read by the
simulated program), and absent from every API response, page, portal log, database table, broker
message and rendered object. The web does all of it with its own read-only identity. A launch waits for
a secret the engine is still writing and is refused one it could not write. Bad input names the field
and creates nothing in Kubernetes."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.db.models import F
from django.urls import reverse
from django.utils import timezone
from kubernetes import client as k8s
from rest_framework.test import APIClient

from jobs import tasks
from jobs.kube import client as kube
from jobs.models import SecretState, State, TeamSecret, Workload
from jobs.services.logs.container_logs import workload_logs
from portal import sealing

pytestmark = [pytest.mark.cluster, pytest.mark.celery]
VALUE = "sk-live-7f3a9c-do-not-leak"  # the value whose absence is asserted


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def store(api: APIClient, name: str, value: str, timeout: float = 60) -> dict:
    """Store a secret through the API as a client would: 201 once the engine wrote it, or 202 while it is
    still writing (a new team's namespace is made first), then ask the listing until it is ready."""
    stored = api.post("/api/v1/secrets/", {"name": name, "value": value}, format="json")
    assert stored.status_code in (201, 202), stored.content
    assert stored.json()["status"] == ("ready" if stored.status_code == 201 else "pending")
    assert value not in stored.content.decode()
    deadline = time.monotonic() + timeout
    while True:
        listed = {s["name"]: s for s in api.get("/api/v1/secrets/").json()}
        if listed[name]["status"] != "pending":
            assert listed[name]["status"] == "ready", listed[name]
            return listed[name]
        assert time.monotonic() < deadline, f"the engine did not write {name} within {timeout:.0f}s"
        time.sleep(0.2)


def test_a_secret_reaches_the_container_and_nowhere_else(engine, kube_api, client, caplog):
    caplog.set_level(logging.DEBUG)
    owner_api = _api(engine.owner)
    store(owner_api, "wandb", VALUE)

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


@contextlib.contextmanager
def web_identity(identity) -> Iterator[None]:
    """This process talks to the cluster as the web does: with the web's own (read-only) token."""
    saved = settings.KUBECONFIG
    settings.KUBECONFIG = str(identity.kubeconfigs["web"])
    kube.reset()
    try:
        yield
    finally:
        settings.KUBECONFIG = saved
        kube.reset()


@contextlib.contextmanager
def broker_traffic(url: str) -> Iterator[list[str]]:
    """Every command the engine's Redis receives meanwhile (MONITOR), as text."""
    seen: list[str] = []
    client = redis.Redis.from_url(url)
    stop = threading.Event()

    def listen() -> None:
        with client.monitor() as monitor:
            for command in monitor.listen():
                if stop.is_set():
                    return
                seen.append(command["command"])

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    time.sleep(0.3)
    try:
        yield seen
    finally:
        stop.set()
        client.ping()  # wakes the listener up so it sees the stop
        thread.join(timeout=5)


def decoded(text: str) -> str:
    """The text and every base64 run inside it decoded (kombu carries message bodies in base64)."""
    parts = [text]
    for run in re.findall(r"[A-Za-z0-9+/]{16,}={0,2}", text):
        with contextlib.suppress(binascii.Error, ValueError):
            parts.append(base64.b64decode(run + "=" * (-len(run) % 4)).decode(errors="replace"))
    return "\n".join(parts)


def rows_holding(text: str) -> list[str]:
    """Tables of the portal's database with a row whose text holds `text`."""
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            quoted = connection.ops.quote_name(table)
            cursor.execute(f"SELECT count(*) FROM {quoted} AS r WHERE r::text LIKE %s", [f"%{text}%"])  # noqa: S608
            if cursor.fetchone()[0]:
                found.append(table)
    return found


def test_the_web_stores_a_secret_with_its_own_read_only_identity(engine, engine_broker, kube_api, caplog):
    caplog.set_level(logging.DEBUG)
    owner_api = _api(engine.owner)
    with web_identity(engine.identity), broker_traffic(engine_broker.url) as traffic:
        store(owner_api, "hf-token", VALUE + "-first")  # the team's namespace is made meanwhile
        # Replaced in a namespace that exists: the engine confirms within the request.
        replaced = owner_api.post("/api/v1/secrets/", {"name": "hf-token", "value": VALUE}, format="json")
    assert replaced.status_code == 201, replaced.content
    assert replaced.json()["status"] == "ready"
    secret = TeamSecret.objects.get(team=engine.team, name="hf-token")
    in_cluster = k8s.CoreV1Api(kube_api).read_namespaced_secret(secret.k8s_name, engine.team.namespace)
    assert base64.b64decode(in_cluster.data["value"]).decode() == VALUE
    # What went through the broker was the sealed value, never the plain one (nor in base64).
    messages = decoded("\n".join(traffic))
    assert "jobs.tasks.write_secret" in messages
    assert sealing.PREFIX in messages
    assert VALUE not in messages
    assert rows_holding(VALUE) == []
    assert rows_holding(sealing.PREFIX) == []  # not even sealed: users' values are in Kubernetes only
    assert VALUE not in caplog.text
    assert VALUE not in engine.processes.log("worker")


def test_a_launch_waits_for_the_engine_to_write_a_replaced_secret(engine, kube_api):
    owner_api = _api(engine.owner)
    old, new = VALUE + "-old", VALUE + "-new"
    store(owner_api, "rotating", old)
    secret = TeamSecret.objects.get(team=engine.team, name="rotating")
    # Replaced, and the engine has not written the new value yet (its message still queued).
    TeamSecret.objects.filter(id=secret.id).update(
        state=SecretState.PENDING, version=F("version") + 1, updated_at=timezone.now()
    )
    version = TeamSecret.objects.get(id=secret.id).version
    response = owner_api.post(
        "/api/v1/workloads/",
        {
            "image": "nvidia/cuda:12.2.0-base-ubuntu22.04",
            "gpu_type": "p100",
            "secrets": ["rotating"],
            "env": [
                {"name": "SIM_READ_FILE", "value": "/var/run/secrets/gpuportal/rotating"},
                {"name": "SIM_RUN_SECONDS", "value": "1"},
            ],
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    workload = Workload.objects.get(uid=response.json()["uid"])
    engine.wait_until(workload, lambda w: "write the secret rotating" in w.message, "waiting for its secret")
    time.sleep(2)
    workload.refresh_from_db()
    assert workload.state == State.SUBMITTING  # it did not start with the old value
    jobs = k8s.BatchV1Api(kube_api).list_namespaced_job(engine.team.namespace).items
    assert not [j for j in jobs if j.metadata.name.endswith(workload.uid)]
    tasks.write_secret.delay(secret.id, version, sealing.seal(new))
    engine.wait_for(workload, State.SUCCEEDED, timeout=90)
    logs = workload_logs(workload)
    assert f"read /var/run/secrets/gpuportal/rotating: {new}" in logs
    assert old not in logs


def test_a_value_the_engine_cannot_open_is_refused_clearly_and_not_launched(engine, settings):
    # A web configured with another pair's public key: the engine cannot open what it seals.
    settings.PORTAL_SEAL_PUBLIC_KEY = sealing.generate_keypair()[0]
    owner_api = _api(engine.owner)
    stored = owner_api.post("/api/v1/secrets/", {"name": "mismatch", "value": VALUE}, format="json")
    assert stored.status_code == 503, stored.content
    assert stored.json()["error"]["code"] == "secret_not_written"
    assert "could not open it" in stored.json()["error"]["message"]
    listed = {s["name"]: s for s in owner_api.get("/api/v1/secrets/").json()}
    assert listed["mismatch"]["status"] == "failed"
    refused = owner_api.post(
        "/api/v1/workloads/",
        {"image": "nvidia/cuda:12.2.0-base-ubuntu22.04", "gpu_type": "p100", "secrets": ["mismatch"]},
        format="json",
    )
    assert refused.status_code == 400
    assert "mismatch could not be stored" in refused.json()["error"]["fields"]["secrets"][0]
    assert VALUE not in engine.processes.log("worker")


def test_teammates_see_env_names_but_not_values(engine):
    workload = engine.submit(env={"TOKEN": "plain-but-private", "SIM_RUN_SECONDS": "600"})
    mine = _api(engine.owner).get(f"/api/v1/workloads/{workload.uid}/").json()
    theirs = _api(engine.teammate).get(f"/api/v1/workloads/{workload.uid}/").json()
    assert {"name": "TOKEN", "value": "plain-but-private"} in mine["env"]
    assert {"name": "TOKEN", "value": None} in theirs["env"]


def test_a_private_registry_image_pod_references_the_pull_secret(engine, kube_api):
    from jobs.models import AllowedRegistry
    from jobs.services.provisioning import forget_namespaces

    # As admin stores it: sealed to the engine's key (tests/engine/test_registry_sealing.py).
    registry = AllowedRegistry.objects.create(
        host="registry.lab:5000", pull_username="robot", pull_password_sealed=sealing.seal("hunter2")
    )
    forget_namespaces()
    workload = engine.submit(image="registry.lab:5000/vision/train:1", env={"SIM_RUN_SECONDS": "1"})
    engine.wait_for(workload, State.SUCCEEDED, timeout=90)
    job = k8s.BatchV1Api(kube_api).read_namespaced_job(workload.k8s_name, workload.namespace)
    assert [s.name for s in job.spec.template.spec.image_pull_secrets] == [registry.pull_secret_name]
    secret = k8s.CoreV1Api(kube_api).read_namespaced_secret(registry.pull_secret_name, workload.namespace)
    assert secret.type == "kubernetes.io/dockerconfigjson"
    # The engine opened the sealed password to write the credentials the kubelet reads.
    config = json.loads(base64.b64decode(secret.data[".dockerconfigjson"]))
    assert config["auths"]["registry.lab:5000"]["password"] == "hunter2"
    assert rows_holding("hunter2") == []
    assert "hunter2" not in json.dumps(_api(engine.owner).get(f"/api/v1/workloads/{workload.uid}/").json())


def test_the_secrets_page_stores_replaces_and_deletes_a_kubernetes_secret(engine, kube_api, client, caplog):
    caplog.set_level(logging.DEBUG)
    core = k8s.CoreV1Api(kube_api)
    client.force_login(engine.owner)
    stored = client.post(reverse("secrets"), {"name": "page-key", "value": VALUE}, follow=True)
    assert stored.status_code == 200
    page = stored.content.decode()
    assert 'data-name="page-key"' in page
    # Written at once, or (the team's namespace being made first) shown as being written until it is.
    assert "Secret page-key is stored" in page or "Secret page-key is being written" in page
    assert VALUE not in page
    secret = TeamSecret.objects.get(team=engine.team, name="page-key")
    deadline = time.monotonic() + 60
    while secret.state != SecretState.READY:
        assert secret.state == SecretState.PENDING, secret.message
        assert time.monotonic() < deadline, "the engine did not write page-key"
        time.sleep(0.2)
        secret.refresh_from_db()
    assert 'data-state="ready"' in client.get(reverse("secrets")).content.decode()
    in_cluster = core.read_namespaced_secret(secret.k8s_name, engine.team.namespace)
    assert base64.b64decode(in_cluster.data["value"]).decode() == VALUE
    # The same name replaces the value (one row, one Secret).
    replaced = client.post(reverse("secrets"), {"name": "page-key", "value": VALUE + "-2"}, follow=True)
    assert "Secret page-key is stored" in replaced.content.decode()  # the namespace exists: confirmed at once
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
    assert 'data-name="page-key"' not in deleted.content.decode()
    # The engine deletes the Kubernetes Secret, then the row.
    deadline = time.monotonic() + 30
    while TeamSecret.objects.filter(team=engine.team, name="page-key").exists():
        assert time.monotonic() < deadline, "the engine did not delete the secret"
        time.sleep(0.1)
    with pytest.raises(k8s.exceptions.ApiException) as gone:
        core.read_namespaced_secret(secret.k8s_name, engine.team.namespace)
    assert gone.value.status == 404
    assert VALUE not in caplog.text
