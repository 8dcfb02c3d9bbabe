"""The portal's engine as separate processes (Celery worker, Celery beat, tracker, provisioner) against a given
database, broker and cluster — what the integration tests and `make bench` run, the way production does.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent

# Short intervals so the periodic safety nets act within a test's or benchmark's patience.
FAST_INTERVALS = {
    "PORTAL_SWEEP_SECONDS": "2",
    "PORTAL_LIMITS_SECONDS": "1",
    "PORTAL_STUCK_SUBMIT_SECONDS": "6",
    "PORTAL_RESYNC_SECONDS": "10",
    "PORTAL_IMAGE_PULL_TIMEOUT": "4",
    "PORTAL_RETENTION_SECONDS": "3600",
    # Notifications: a dead sender's claim expires quickly, the sweep and retries come soon.
    "NOTIFY_SWEEP_SECONDS": "1",
    "NOTIFY_LEASE_SECONDS": "8",
    "NOTIFY_RETRY_BASE_SECONDS": "1",
    "NOTIFY_WEBHOOK_TIMEOUT_SECONDS": "3",
    # Preemption: SIGTERM, then the kill this long after (the sharing tests time reclaims against it).
    "PORTAL_PREEMPT_GRACE_SECONDS": "6",
    # Automatic retry: a short backoff (1 s, then 2 s, ...) so the retry tests need not wait 30 s.
    "PORTAL_RETRY_BACKOFF_SECONDS": "1",
    # Gang jobs: a partly placed gang is released after this window (the tests watch one play out).
    "GANG_START_WINDOW_SECONDS": "15",
    "GANG_SWEEP_SECONDS": "2",
}


@dataclass
class PortalIdentity:
    """The portal's least-privilege service accounts in a cluster, and a kubeconfig for each.

    engine: worker and tracker (and this test process); web: the web and beat (read-only); proxy: the service
    proxy (reads services and EndpointSlices in team namespaces only); provisioner: the process that alone
    creates team namespaces and their bindings.
    """

    kubeconfigs: dict[str, Path]
    service_accounts: dict[str, str]
    workloads_role: str
    reader_role: str
    proxy_role: str
    instance: str
    namespace_prefix: str
    system_namespace: str
    # The provisioner's admission guard registered with a local cluster that runs one (None: no guard there).
    admission_guard: str | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.kubeconfigs["engine"]

    @property
    def service_account(self) -> str:
        return self.service_accounts["engine"]

    def env(self) -> dict[str, str]:
        """The environment of the engine's processes; the provisioner gets PROVISIONER_KUBECONFIG as KUBECONFIG."""
        return {**self.settings(), "PROVISIONER_KUBECONFIG": str(self.kubeconfigs["provisioner"])}

    def env_as(self, identity: str) -> dict[str, str]:
        """The settings of a portal process holding `identity`'s credentials (engine, web, proxy or provisioner)."""
        return {**self.settings(), "KUBECONFIG": str(self.kubeconfigs[identity])}

    def settings(self) -> dict[str, str]:
        """Django settings of a portal process acting as the engine."""
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "KUBE_SERVICE_ACCOUNT": self.service_accounts["engine"],
            "KUBE_WEB_SERVICE_ACCOUNT": self.service_accounts["web"],
            "KUBE_WORKLOADS_CLUSTERROLE": self.workloads_role,
            "KUBE_READER_CLUSTERROLE": self.reader_role,
            "KUBE_PROXY_SERVICE_ACCOUNT": self.service_accounts["proxy"],
            "KUBE_PROXY_CLUSTERROLE": self.proxy_role,
            "PORTAL_INSTANCE": self.instance,
            "KUBE_NAMESPACE_PREFIX": self.namespace_prefix,
        }


def cluster_ca(kubeconfig: Path) -> bytes:
    """The cluster's CA certificate, from an admin kubeconfig (inline data or a file path)."""
    cluster = yaml.safe_load(Path(kubeconfig).read_text())["clusters"][0]["cluster"]
    if "certificate-authority-data" in cluster:
        return base64.b64decode(cluster["certificate-authority-data"])
    return (Path(kubeconfig).parent / cluster["certificate-authority"]).read_bytes()


def install_identity(
    *,
    admin_api: Any,
    server: str,
    admin_kubeconfig: Path,
    directory: Path,
    namespace: str | None = None,
    fullname: str | None = None,
    instance: str | None = None,
    namespace_prefix: str | None = None,
) -> PortalIdentity:
    """Install the portal's accounts and roles with the admin's client, and write a kubeconfig for each
    identity (mode 0600) into `directory`. Names default to fresh ones per call (tests, benchmarks: side by
    side in one cluster); `make run` passes fixed ones so a cluster it reuses keeps its team namespaces."""
    from devtools.admission_guard import register_provisioner_guard
    from devtools.rbac import PortalNames, install_portal_identity, kubeconfig_for_token

    run = uuid.uuid4().hex[:6]
    namespace = namespace or f"gpuportal-system-{run}"
    names = PortalNames(fullname or f"gpuportal-{run}")
    tokens = install_portal_identity(admin_api, namespace=namespace, fullname=names.fullname)
    namespace_prefix = namespace_prefix or f"t{run}-"
    guard = register_provisioner_guard(
        admin_api,
        state_dir=Path(admin_kubeconfig).parent,
        fullname=names.fullname,
        provisioner=f"{namespace}/{names.account('provisioner')}",
        prefix=namespace_prefix,
        roles=[names.role("workloads"), names.role("reader"), names.role("proxy")],
    )
    ca = cluster_ca(admin_kubeconfig)
    directory.mkdir(parents=True, exist_ok=True)
    kubeconfigs = {}
    for identity, token in tokens.items():
        path = directory / f"{identity}-kubeconfig"
        path.unlink(missing_ok=True)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
            out.write(kubeconfig_for_token(server=server, ca_pem=ca, token=token))
        kubeconfigs[identity] = path
    return PortalIdentity(
        kubeconfigs=kubeconfigs,
        service_accounts={identity: f"{namespace}/{names.account(identity)}" for identity in tokens},
        workloads_role=names.role("workloads"),
        reader_role=names.role("reader"),
        proxy_role=names.role("proxy"),
        instance=instance or f"run-{run}",
        namespace_prefix=namespace_prefix,
        system_namespace=namespace,
        admission_guard=guard,
    )


def provision_now(identity: PortalIdentity, team: Any, *, timeout: float = 30) -> str:
    """Provision a team's namespace in this process as the provisioner would, then wait until the engine's
    account may create Jobs there (RBAC learns of a new RoleBinding within a moment)."""
    import time

    from kubernetes import client as k8s
    from kubernetes import config

    from jobs.kube import client as kube
    from jobs.services.provisioning import namespace_provision

    provisioner = config.new_client_from_config(config_file=str(identity.kubeconfigs["provisioner"]))
    try:
        namespace = namespace_provision(team, api=provisioner)
    finally:
        provisioner.close()
    review = k8s.V1SelfSubjectAccessReview(
        spec=k8s.V1SelfSubjectAccessReviewSpec(
            resource_attributes=k8s.V1ResourceAttributes(
                namespace=namespace, verb="create", group="batch", resource="jobs"
            )
        )
    )
    deadline = time.monotonic() + timeout
    while not k8s.AuthorizationV1Api(kube.api_client()).create_self_subject_access_review(review).status.allowed:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the engine may still not create Jobs in {namespace} after {timeout:.0f}s")
        time.sleep(0.1)
    return namespace


ENGINE_ONLY = ("PORTAL_SEAL_PRIVATE_KEY", "PORTAL_SEAL_PRIVATE_KEY_FILE")


def process_env(name: str, env: dict[str, str]) -> dict[str, str]:
    """Only the provisioner gets the provisioner's credentials (PROVISIONER_KUBECONFIG, when given), and
    only the worker the private key that opens sealed values, as in the chart."""
    own = {k: v for k, v in env.items() if k != "PROVISIONER_KUBECONFIG"}
    if name != "worker":
        own = {k: v for k, v in own.items() if k not in ENGINE_ONLY}
    if name == "provisioner" and env.get("PROVISIONER_KUBECONFIG"):
        own["KUBECONFIG"] = env["PROVISIONER_KUBECONFIG"]
    return own


def provisioner_argv(python: str) -> list[str]:
    """A Celery worker that consumes only the provision queue."""
    return [python, "-m", "celery", "-A", "portal", "worker", "--pool=threads", "--concurrency=2",
            "--queues=provision", "--hostname=provisioner@%h", "--loglevel=INFO", "--without-heartbeat",
            "--without-gossip", "--without-mingle"]  # fmt: skip


class EngineProcesses:
    """Worker, beat and tracker subprocesses; each can be killed (-9), stopped and restarted.

    Like Kubernetes does for the chart's Deployments, a supervisor thread restarts a process that exits
    on its own (the Celery worker does when its Redis connection drops with unacknowledged messages, a
    kombu behaviour); `restarts` counts those restarts.
    """

    def __init__(self, env: dict[str, str], log_dir: Path, *, worker_concurrency: int = 8) -> None:
        self.env = env
        self.log_dir = log_dir
        self.worker_concurrency = worker_concurrency
        self.processes: dict[str, subprocess.Popen] = {}
        self.wanted: set[str] = set()
        self.restarts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name="engine-supervisor", daemon=True)
        self._supervisor.start()

    def _supervise(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                for name in list(self.wanted):
                    process = self.processes.get(name)
                    if process is not None and process.poll() is not None:
                        self.restarts[name] = self.restarts.get(name, 0) + 1
                        self._spawn(name)

    def argv(self, name: str) -> list[str]:
        py = sys.executable
        return {
            "worker": [py, "-m", "celery", "-A", "portal", "worker", "--pool=threads",
                       f"--concurrency={self.worker_concurrency}", "--loglevel=INFO", "--without-heartbeat",
                       "--without-gossip", "--without-mingle"],
            "beat": [py, "-m", "celery", "-A", "portal", "beat", "--loglevel=INFO",
                     f"--schedule={self.log_dir / 'beat-schedule'}"],
            "tracker": [py, "manage.py", "track"],
            "provisioner": provisioner_argv(py),
        }[name]  # fmt: skip

    def _spawn(self, name: str) -> None:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        self.processes[name] = subprocess.Popen(
            self.argv(name),
            cwd=REPO,
            env=process_env(name, self.env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start(self, name: str) -> None:
        with self._lock:
            self.wanted.add(name)
            process = self.processes.get(name)
            if process is None or process.poll() is not None:
                self._spawn(name)

    def start_all(self) -> None:
        for name in ("provisioner", "worker", "beat", "tracker"):
            self.start(name)

    def kill(self, name: str) -> None:
        """kill -9, as a crash would (the supervisor or the caller starts it again)."""
        with self._lock:
            process = self.processes[name]
            process.kill()
            process.wait(timeout=10)

    def stop(self, name: str) -> None:
        with self._lock:
            self.wanted.discard(name)
            process = self.processes.get(name)
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def stop_all(self) -> None:
        self._stop.set()
        for name in ("tracker", "beat", "worker", "provisioner"):
            self.stop(name)

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""
