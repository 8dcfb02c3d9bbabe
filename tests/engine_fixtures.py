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
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devtools.engine import FAST_INTERVALS, EngineProcesses, PortalIdentity, install_identity
from devtools.services import RedisServer
from tests.settings_guard import base_settings, session_setting
from tests.sinks import SmtpSink, WebhookReceiver


@pytest.fixture(scope="session")
def portal_identity(
    kube_cluster: Any, kube_api: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PortalIdentity]:
    """The portal's own service account; this process's settings point at it for the whole session."""
    from kubernetes import client as k8s

    from jobs.kube import client as kube
    from jobs.services.provisioning import forget_namespaces

    identity = install_identity(
        admin_api=kube_api,
        server=kube_cluster.server,
        admin_kubeconfig=Path(kube_cluster.kubeconfig),
        directory=tmp_path_factory.mktemp("portal"),
    )
    overrides: dict[str, Any] = {**identity.settings(), **{k: int(v) for k, v in FAST_INTERVALS.items()}}
    # For the whole session, beneath the override a test may have on right now (pytest-django's live_server
    # and settings fixtures wrap each test in one).
    base = base_settings()
    saved = {k: getattr(base, k) for k in overrides}
    for key, value in overrides.items():
        session_setting(key, value)
    kube.reset()
    forget_namespaces()
    try:
        yield identity
    finally:
        for key, value in saved.items():
            session_setting(key, value)
        kube.reset()
        with contextlib.suppress(Exception):
            k8s.CoreV1Api(kube_api).delete_namespace(identity.system_namespace)
        if identity.admission_guard:
            with contextlib.suppress(Exception):
                k8s.AdmissionregistrationV1Api(kube_api).delete_validating_webhook_configuration(
                    identity.admission_guard
                )


def database_url() -> str:
    from django.db import connection

    s = connection.settings_dict
    if connection.vendor != "postgresql":
        pytest.skip("the engine's processes need PostgreSQL (run the suite with `make test`)")
    return f"postgres://{s['USER'] or 'postgres'}:{s['PASSWORD'] or ''}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.fixture(scope="session")
def engine_broker() -> Iterator[RedisServer]:
    """A Redis of the engine's own, so a test can stop it and start it again on the same port."""

    server = RedisServer()
    url = server.start()
    saved = base_settings().CELERY_BROKER_URL
    session_setting("CELERY_BROKER_URL", url)
    from portal.celery import app

    app.conf.broker_url = url
    if app._pool is not None:  # connections made before now point at the suite's other Redis
        app._pool.force_close_all()
        app._pool = None
    app.amqp._producer_pool = None  # it holds the closed pool: sends would fail "Acquire on closed pool"
    try:
        yield server
    finally:
        session_setting("CELERY_BROKER_URL", saved)
        app.conf.broker_url = saved
        if app._pool is not None:
            app._pool.force_close_all()
            app._pool = None
        app.amqp._producer_pool = None
        server.stop()


@dataclass
class NotificationSinks:
    smtp: SmtpSink
    webhooks: WebhookReceiver


@pytest.fixture(scope="session")
def notification_sinks() -> Iterator[NotificationSinks]:
    """A real SMTP server and webhook receiver that the engine's worker sends notifications to."""
    sinks = NotificationSinks(smtp=SmtpSink().start(), webhooks=WebhookReceiver().start())
    try:
        yield sinks
    finally:
        sinks.smtp.stop()
        sinks.webhooks.stop()


@pytest.fixture(scope="session")
def engine_processes(
    portal_identity: PortalIdentity,
    engine_broker: RedisServer,
    notification_sinks: NotificationSinks,
    django_db_setup: Any,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[EngineProcesses]:
    from django.conf import settings

    with django_db_blocker.unblock():
        url = database_url()
    env = {
        **os.environ,
        **portal_identity.env(),
        **FAST_INTERVALS,
        "DATABASE_URL": url,
        "REDIS_URL": engine_broker.url,
        "CELERY_BROKER_URL": engine_broker.url,
        "DEBUG": "0",
        # One SECRET_KEY for every portal process, as the chart gives them all: the engine derives the
        # terminal's key into each pod from it (jobs.services.ssh_access), the test's in-process proxy too.
        "SECRET_KEY": settings.SECRET_KEY,
        "PYTHONUNBUFFERED": "1",
        "EMAIL_URL": notification_sinks.smtp.url() + "?from=gpus@example.org&timeout=3",
        "NOTIFY_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
    }
    engine = EngineProcesses(env, tmp_path_factory.mktemp("engine-logs"))
    engine.start_all()
    try:
        yield engine
    finally:
        engine.stop_all()


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
        from jobs.services.submission.intake import workload_submit

        spec.setdefault("image", "nvidia/cuda:12.2.0-base-ubuntu22.04")
        spec.setdefault("gpu_type", "p100")
        return workload_submit(team=self.team, owner=user or self.owner, spec=spec)

    def wait_until(self, workload: Any, predicate: Any, what: str, timeout: float = 30) -> Any:
        """Poll the database until predicate(workload) holds."""
        deadline = time.monotonic() + timeout
        while True:
            workload.refresh_from_db()
            if predicate(workload):
                return workload
            if time.monotonic() > deadline:
                pytest.fail(f"{workload.name}: not {what} within {timeout:.0f}s ({workload.state}: {workload.message})")
            time.sleep(0.05)

    def wait_for(self, workload: Any, *states: str, timeout: float = 60) -> Any:
        """Poll the database until the workload reaches one of `states`; fail with its timeline if not."""
        deadline = time.monotonic() + timeout
        while True:
            workload.refresh_from_db()
            if workload.state in states:
                return workload
            if time.monotonic() > deadline:
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
def hand_overs_kept(settings: Any) -> None:
    """Nothing this test commits is handed to a worker: every send finds no broker and is skipped. For the
    service tests that commit workloads and then make up their state (RUNNING with an UPDATE): had their
    creates gone to the broker, the suite's running engine (started by an earlier test) would create their
    objects and its tracker move the made-up rows to PENDING under the test. Made-up rows that no worker
    placed (no `submitted_at`) are not taken for lost by its resync either."""
    settings.CELERY_BROKER_URL = settings.NO_BROKER


@pytest.fixture
def portal_account(portal_identity: PortalIdentity) -> PortalIdentity:
    """The session's portal identity. Nothing needs re-asserting before a test: tests/settings_guard.py fails
    any test that leaves the settings changed, and drops the cached cluster clients when a test's own
    kubeconfig override ends."""
    return portal_identity


@pytest.fixture
def engine(
    engine_processes: EngineProcesses, portal_account: PortalIdentity, transactional_db: Any, kube_api: Any
) -> Iterator[Engine]:
    from kubernetes import client as k8s

    from identity.models import Role
    from jobs.services.cluster.inventory import inventory_sync
    from jobs.services.seeding import DEMO, apply_seed
    from tests.engine.factories import MembershipFactory, TeamFactory, UserFactory

    # The demo's types as they are, less its bounded waits (a P100 that reserves): the engine's tests
    # expect best-effort admission, where smaller work always passes larger work that does not fit.
    demo_types = [{k: v for k, v in t.items() if k != "reserve_after_seconds"} for t in DEMO["gpu_types"]]
    apply_seed({"gpu_types": demo_types, "allowed_registries": ["docker.io", "nvcr.io", "registry.invalid"]})
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
    yield Engine(engine_processes, portal_account, team, owner, teammate, manager, outsider, gpu_types)
    with contextlib.suppress(Exception):
        k8s.CoreV1Api(kube_api).delete_namespace(team.namespace, propagation_policy="Background")
