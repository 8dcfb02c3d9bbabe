"""pytest fixtures for the local GPU cluster (enable with `pytest_plugins = ["localcluster.pytest_plugin"]`).

- `kube_cluster` (session): a LocalCluster started once per test session in a temporary state directory,
  or, when LOCALCLUSTER_KUBECONFIG names a kubeconfig, that cluster (an ExternalCluster: no process
  control). Both have `.kubeconfig`, `.server`, `.admin_token`, `.ca_file`.
- `kube_api` (session): an admin `kubernetes.client.ApiClient` for it.
- `kube_namespace` (function): a fresh, uniquely named namespace whose `default` service account (and its
  token) exists; deleted afterwards without waiting.
Tests using them should carry `@pytest.mark.cluster`.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster.cluster import LocalCluster
from localcluster.procs import ClusterError


class ExternalCluster:
    """A cluster someone else runs (LOCALCLUSTER_KUBECONFIG); it cannot be stopped from here."""

    owns_processes = False

    def __init__(self, kubeconfig: Path) -> None:
        doc = yaml.safe_load(kubeconfig.read_text())
        context_name = doc.get("current-context")
        context = next(c["context"] for c in doc["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in doc["users"] if u["name"] == context["user"])
        self.kubeconfig = kubeconfig
        self.server: str = cluster["server"]
        self.admin_token: str = user.get("token", "")
        if "certificate-authority-data" in cluster:
            fd, name = tempfile.mkstemp(prefix="localcluster-ca-", suffix=".crt")
            with os.fdopen(fd, "wb") as fh:
                fh.write(base64.b64decode(cluster["certificate-authority-data"]))
            self.ca_file = Path(name)
        else:
            self.ca_file = Path(cluster.get("certificate-authority", ""))

    def stop_component(self, name: str) -> None:
        pytest.skip("LOCALCLUSTER_KUBECONFIG names an external cluster; its components cannot be stopped")

    def start_component(self, name: str) -> None:
        pytest.skip("LOCALCLUSTER_KUBECONFIG names an external cluster; its components cannot be started")


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    external = os.environ.get("LOCALCLUSTER_KUBECONFIG")
    if external:
        yield ExternalCluster(Path(external))
        return
    cluster = LocalCluster(state_dir=tmp_path_factory.mktemp("localcluster"))
    try:
        cluster.start()
    except ClusterError as exc:
        pytest.fail(f"the local GPU cluster did not start:\n{exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kube_api(kube_cluster: Any) -> Iterator[Any]:
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            client.close()


@pytest.fixture
def kube_namespace(kube_api: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-") or "test"
    name = f"t-{slug}-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(kube_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # Pods are refused until the namespace's default service account and its token secret exist
    # (ServiceAccount admission); wait for both so tests can create pods at once.
    deadline = time.monotonic() + 60
    while True:
        try:
            account = core.read_namespaced_service_account("default", name)
            if account.secrets:
                break
        except ApiException as exc:
            if exc.status != 404:
                raise
        if time.monotonic() > deadline:
            pytest.fail(f"namespace {name}: no default service account token after 60s", pytrace=False)
        time.sleep(0.05)
    try:
        yield name
    finally:
        with contextlib.suppress(Exception):
            core.delete_namespace(name, propagation_policy="Background")
