"""The engine under test: the portal's service account in the local GPU cluster, and a real Celery
worker, Celery beat and tracker running as subprocesses against the test database and a real Redis.

- `portal_identity` (session): the portal's least-privilege account (helm/files/rbac-rules.yaml) in the
  cluster and a kubeconfig for it; this process's settings point at it for the whole session.
- `engine_processes` (session): worker, beat and tracker, started once the test database exists.
- `engine` (function, needs a transactional database): GPU types matching the cluster's pools, the node
  inventory, and a fresh team (own namespace) with an owner, a teammate, a manager and an outsider.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent

# Short intervals so the periodic safety nets act within a test's patience.
ENGINE_ENV = {
    "PORTAL_SWEEP_SECONDS": "2",
    "PORTAL_LIMITS_SECONDS": "1",
    "PORTAL_STUCK_SUBMIT_SECONDS": "6",
    "PORTAL_RESYNC_SECONDS": "10",
    "PORTAL_IMAGE_PULL_TIMEOUT": "4",
    "PORTAL_RETENTION_SECONDS": "3600",
}


@dataclass
class PortalIdentity:
    kubeconfig: Path
    service_account: str
    workloads_role: str
    instance: str
    namespace_prefix: str


@pytest.fixture(scope="session")
def portal_identity(
    kube_cluster: Any, kube_api: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PortalIdentity]:
    from django.conf import settings
    from kubernetes import client as k8s

    from jobs.kube import client as kube
    from jobs.kube.rbac import install_portal_identity, kubeconfig_for_token
    from jobs.services.submission import forget_namespaces

    run = uuid.uuid4().hex[:6]
    namespace, account = f"gpuportal-system-{run}", "portal"
    controller_role, workloads_role = f"gpuportal-{run}-controller", f"gpuportal-{run}-workloads"
    token = install_portal_identity(
        kube_api, namespace=namespace, account=account, controller_role=controller_role, workloads_role=workloads_role
    )
    path = tmp_path_factory.mktemp("portal") / "kubeconfig"
    path.write_text(
        kubeconfig_for_token(server=kube_cluster.server, ca_pem=cluster_ca(kube_cluster.kubeconfig), token=token)
    )
    identity = PortalIdentity(
        kubeconfig=path,
        service_account=f"{namespace}/{account}",
        workloads_role=workloads_role,
        instance=f"test-{run}",
        namespace_prefix=f"t{run}-",
    )
    overrides = {
        "KUBECONFIG": str(path),
        "KUBE_SERVICE_ACCOUNT": identity.service_account,
        "KUBE_WORKLOADS_CLUSTERROLE": workloads_role,
        "PORTAL_INSTANCE": identity.instance,
        "KUBE_NAMESPACE_PREFIX": identity.namespace_prefix,
        **{k: int(v) for k, v in ENGINE_ENV.items()},
    }
    saved = {k: getattr(settings, k) for k in overrides}
    for key, value in overrides.items():
        setattr(settings, key, value)
    kube.reset()
    forget_namespaces()
    try:
        yield identity
    finally:
        for key, value in saved.items():
            setattr(settings, key, value)
        kube.reset()
        with contextlib.suppress(Exception):
            k8s.CoreV1Api(kube_api).delete_namespace(namespace)


def cluster_ca(kubeconfig: Path) -> bytes:
    """The cluster's CA certificate, from the admin kubeconfig (inline data or a file path)."""
    import base64

    import yaml

    cluster = yaml.safe_load(Path(kubeconfig).read_text())["clusters"][0]["cluster"]
    if "certificate-authority-data" in cluster:
        return base64.b64decode(cluster["certificate-authority-data"])
    return (Path(kubeconfig).parent / cluster["certificate-authority"]).read_bytes()


def database_url() -> str:
    from django.db import connection

    s = connection.settings_dict
    if s["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("the engine's processes need PostgreSQL (run the suite with `make test`)")
    return f"postgres://{s['USER'] or 'postgres'}:{s['PASSWORD'] or ''}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class EngineProcesses:
    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_dir = log_dir
        self.processes: dict[str, subprocess.Popen] = {}

    def argv(self, name: str) -> list[str]:
        py = sys.executable
        return {
            "worker": [py, "-m", "celery", "-A", "portal", "worker", "--pool=threads", "--concurrency=8",
                       "--loglevel=INFO", "--without-heartbeat", "--without-gossip", "--without-mingle"],
            "beat": [py, "-m", "celery", "-A", "portal", "beat", "--loglevel=INFO",
                     f"--schedule={self.log_dir / 'beat-schedule'}"],
            "tracker": [py, "manage.py", "track"],
        }[name]  # fmt: skip

    def start(self, name: str) -> None:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process
        self.processes[name] = subprocess.Popen(
            self.argv(name), cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def kill(self, name: str) -> None:
        """kill -9, as a crash would."""
        process = self.processes[name]
        process.kill()
        process.wait(timeout=10)

    def stop(self, name: str) -> None:
        process = self.processes.get(name)
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def restart(self, name: str) -> None:
        self.stop(name)
        self.start(name)

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")


@pytest.fixture(scope="session")
def engine_processes(
    portal_identity: PortalIdentity,
    django_db_setup: Any,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[EngineProcesses]:
    from django.conf import settings

    with django_db_blocker.unblock():
        url = database_url()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "KUBECONFIG": str(portal_identity.kubeconfig),
        "KUBE_SERVICE_ACCOUNT": portal_identity.service_account,
        "KUBE_WORKLOADS_CLUSTERROLE": portal_identity.workloads_role,
        "PORTAL_INSTANCE": portal_identity.instance,
        "KUBE_NAMESPACE_PREFIX": portal_identity.namespace_prefix,
        "DEBUG": "0",
        "SECRET_KEY": "engine-test-secret-key",
        "PYTHONUNBUFFERED": "1",
        **ENGINE_ENV,
    }
    engine = EngineProcesses(env, tmp_path_factory.mktemp("engine-logs"))
    for name in ("worker", "beat", "tracker"):
        engine.start(name)
    try:
        yield engine
    finally:
        for name in ("tracker", "beat", "worker"):
            engine.stop(name)


@dataclass
class Engine:
    processes: EngineProcesses
    identity: PortalIdentity
    team: Any
    owner: Any
    teammate: Any
    manager: Any
    outsider: Any
    gpu_types: dict[str, Any]

    def submit(self, *, user: Any = None, **spec: Any) -> Any:
        from jobs.services.submit import workload_submit

        spec.setdefault("image", "nvidia/cuda:12.2.0-base-ubuntu22.04")
        spec.setdefault("gpu_type", "p100")
        return workload_submit(team=self.team, owner=user or self.owner, spec=spec)

    def wait_for(self, workload: Any, *states: str, timeout: float = 60) -> Any:
        """Poll the database until the workload reaches one of `states`; fail with its timeline if not."""
        deadline = time.monotonic() + timeout
        while True:
            workload.refresh_from_db()
            if workload.state in states:
                return workload
            dead = [n for n, p in self.processes.processes.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                if dead:
                    pytest.fail(
                        f"engine process(es) {dead} exited:\n{self.processes.log(dead[0])[-3000:]}", pytrace=False
                    )
                timeline = "\n".join(
                    f"  {e.at:%H:%M:%S.%f} {e.from_state}->{e.to_state} {e.reason}: {e.message}"
                    for e in workload.events.all()
                )
                pytest.fail(
                    f"{workload.name} stayed {workload.state} ({workload.reason}: {workload.message}), "
                    f"expected {'/'.join(states)} within {timeout:.0f}s\n{timeline}\n"
                    f"--- worker log tail ---\n{self.processes.log('worker')[-3000:]}\n"
                    f"--- tracker log tail ---\n{self.processes.log('tracker')[-2000:]}",
                    pytrace=False,
                )
            time.sleep(0.05)


@pytest.fixture
def engine(
    engine_processes: EngineProcesses, portal_identity: PortalIdentity, transactional_db: Any, kube_api: Any
) -> Iterator[Engine]:
    from kubernetes import client as k8s

    from jobs.models import Role
    from jobs.services.inventory import inventory_sync
    from jobs.services.seeding import DEMO, apply_seed
    from tests.engine.factories import MembershipFactory, TeamFactory, UserFactory

    apply_seed({"gpu_types": DEMO["gpu_types"], "allowed_registries": ["docker.io", "nvcr.io", "registry.invalid"]})
    inventory_sync()
    suffix = uuid.uuid4().hex[:6]
    team = TeamFactory(slug=f"lab-{suffix}", name=f"Lab {suffix}")
    owner = MembershipFactory(team=team, user=UserFactory(username=f"owner-{suffix}")).user
    teammate = MembershipFactory(team=team, user=UserFactory(username=f"mate-{suffix}")).user
    manager = MembershipFactory(team=team, user=UserFactory(username=f"boss-{suffix}"), role=Role.MANAGER).user
    outsider_team = TeamFactory(slug=f"other-{suffix}")
    outsider = MembershipFactory(team=outsider_team, user=UserFactory(username=f"stranger-{suffix}")).user
    from jobs.models import GpuType, Quota

    gpu_types = {t.slug: t for t in GpuType.objects.all()}
    for slug, limit in {"p100": 4, "k2": 8, "v100": 8}.items():
        Quota.objects.create(team=team, gpu_type=gpu_types[slug], max_gpus=limit)
    yield Engine(engine_processes, portal_identity, team, owner, teammate, manager, outsider, gpu_types)
    with contextlib.suppress(Exception):
        k8s.CoreV1Api(kube_api).delete_namespace(team.namespace, propagation_policy="Background")
