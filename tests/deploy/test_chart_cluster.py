"""The chart against a real Kubernetes 1.20 API server (the local GPU cluster).

Every rendered object goes through a server-side dry run (server-side apply, the way Helm 4 applies), then
the chart is really installed and upgraded with Helm's own code, and the objects are read back from the
API. Pods are run by the node simulator, which does not execute them: what is checked is what the API
server accepted and stored (specs, RBAC decisions, Jobs), not the portal's behaviour.
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.deploy.helm import CHART_DIR, CI_VALUES, load_values, render, with_seal

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# The simulator runs a batch pod for 20 s by default; hook Jobs need only a moment here.
QUICK_POD = {"podAnnotations": {"sim.gpuportal.dev/run-seconds": "0.5"}}
VALUE_SETS = [pytest.param(None, id="default-values")] + [pytest.param(p, id=p.stem) for p in CI_VALUES]


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True) -> str:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is not installed (Debian's machines here ship it at /usr/bin/kubectl)")
    result = subprocess.run(
        [binary, f"--kubeconfig={kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout + result.stderr


def can_i(kubeconfig: Path, user: str, verb: str, resource: str, namespace: str | None = None) -> bool:
    where = ["-n", namespace] if namespace else ["--all-namespaces"]
    out = kubectl(kubeconfig, "auth", "can-i", verb, resource, *where, f"--as={user}", check=False)
    answer = out.strip().splitlines()[0] if out.strip() else ""
    assert answer in {"yes", "no"}, out
    return answer == "yes"


def eventually_can_i(kubeconfig: Path, user: str, verb: str, resource: str, namespace: str) -> bool:
    """can_i, allowing the API server's RBAC cache a moment to see a RoleBinding created just now."""
    deadline = time.monotonic() + 5
    while not can_i(kubeconfig, user, verb, resource, namespace):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.parametrize("values_file", VALUE_SETS)
def test_every_rendered_object_passes_a_server_side_dry_run(kube_cluster, kube_namespace, values_file) -> None:
    # A release name of its own, so cluster-scoped names (ClusterRoles) cannot meet an installed release's.
    release = f"dry{uuid.uuid4().hex[:6]}"
    manifests = render(load_values(values_file) if values_file else {}, release=release, namespace=kube_namespace)
    documents = "\n---\n".join(yaml.safe_dump(m.obj) for m in manifests)
    out = kubectl(
        kube_cluster.kubeconfig,
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=gpuportal-chart-test",
        "-n",
        kube_namespace,
        "-o",
        "name",
        "-f",
        "-",
        stdin=documents,
    )
    applied = {line.strip() for line in out.splitlines() if "/" in line}
    assert len(applied) == len(manifests), out
    kinds = {m.kind for m in manifests}
    assert {"Deployment", "Job", "ClusterRole", "ConfigMap"} <= kinds


# --- a real install ------------------------------------------------------------------------------------


class Release:
    """An installed release and the means to look at it."""

    def __init__(self, kube_cluster: Any, kube_api: Any, namespace: str, name: str) -> None:
        from kubernetes import client

        self.kubeconfig: Path = kube_cluster.kubeconfig
        self.server: str = kube_cluster.server
        self.namespace = namespace
        self.name = name
        self.fullname = f"{name}-gpuportal"
        self.sa_user = f"system:serviceaccount:{namespace}:{self.fullname}"
        self.web_user = f"system:serviceaccount:{namespace}:{self.fullname}-web"
        self.proxy_user = f"system:serviceaccount:{namespace}:{self.fullname}-proxy"
        self.provisioner_user = f"system:serviceaccount:{namespace}:{self.fullname}-provisioner"
        self.core = client.CoreV1Api(kube_api)
        self.apps = client.AppsV1Api(kube_api)
        self.batch = client.BatchV1Api(kube_api)
        self.rbac = client.RbacAuthorizationV1Api(kube_api)
        self.api = kube_api
        self.install_seconds = 0.0

    def config(self) -> helm_python.Config:
        return helm_python.Config(kubeconfig_path=self.kubeconfig, namespace=self.namespace)

    def pod_spec(self, component: str) -> dict[str, Any]:
        """The first live pod of a component, as the API server stored it."""
        selector = f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component={component}"
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        assert pods, f"no {component} pod"
        return self.api.sanitize_for_serialization(pods[0])

    def secret_data(self) -> dict[str, str]:
        secret = self.core.read_namespaced_secret(self.fullname, self.namespace)
        return {k: base64.b64decode(v).decode() for k, v in secret.data.items()}


# No guard webhook: the local cluster's pods are simulated, so the API server could not reach its Service and,
# failing closed, would refuse every namespace write while the release is installed. The local cluster
# enforces the same guard itself (localcluster/admission.py); the webhook is checked rendered.
INSTALL_VALUES = with_seal({"migrations": QUICK_POD, "seed": QUICK_POD, "rbac": {"admissionWebhook": "never"}})


@pytest.fixture(scope="module")
def release(kube_cluster, kube_api) -> Iterator[Release]:
    from kubernetes import client

    namespace = f"t-chart-{uuid.uuid4().hex[:6]}"
    name = f"gp{uuid.uuid4().hex[:4]}"
    core = client.CoreV1Api(kube_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    rel = Release(kube_cluster, kube_api, namespace, name)
    with rel.config() as cfg:
        started = time.monotonic()
        installed = cfg.install(CHART_DIR, name, INSTALL_VALUES, namespace=namespace, timeout=240)
        rel.install_seconds = time.monotonic() - started
        assert installed["status"] == "deployed", installed
    try:
        yield rel
    finally:
        with contextlib.suppress(Exception), rel.config() as cfg:
            cfg.uninstall(name, timeout=60)
        with contextlib.suppress(Exception):
            core.delete_namespace(namespace, propagation_policy="Background")


def test_install_creates_the_deployments_and_the_hook_jobs(release: Release) -> None:
    deployments = {
        d.metadata.labels["app.kubernetes.io/component"]: d
        for d in release.apps.list_namespaced_deployment(
            release.namespace, label_selector=f"app.kubernetes.io/instance={release.name}"
        ).items
    }
    assert set(deployments) == {"web", "proxy", "worker", "beat", "tracker", "provisioner"}
    assert deployments["web"].spec.replicas == 2
    jobs = {j.metadata.name: j for j in release.batch.list_namespaced_job(release.namespace).items}
    assert set(jobs) == {f"{release.fullname}-migrate", f"{release.fullname}-seed"}
    # Helm waited for both hooks: the simulator completed their pods, the Job controller the Jobs.
    for job in jobs.values():
        assert job.status.succeeded == 1, job.metadata.name


def test_migration_job_as_stored_by_the_api_server(release: Release) -> None:
    job = release.batch.read_namespaced_job(f"{release.fullname}-migrate", release.namespace)
    assert job.metadata.annotations["helm.sh/hook"] == "post-install,pre-upgrade"
    assert job.metadata.annotations["helm.sh/hook-delete-policy"] == "before-hook-creation"
    assert job.spec.backoff_limit == 2
    pod = job.spec.template.spec
    assert pod.restart_policy == "Never"
    assert pod.automount_service_account_token is False
    [container] = pod.containers
    assert container.command == ["python", "manage.py", "migrate", "--noinput"]
    assert container.security_context.read_only_root_filesystem is True
    env = {e.name: e for e in container.env}
    assert env["DATABASE_URL"].value_from.secret_key_ref.name == release.fullname
    assert env["KUBE_WORKLOADS_CLUSTERROLE"].value == f"{release.fullname}-workloads"


def test_web_pod_spec_as_stored_by_the_api_server(release: Release) -> None:
    pod = release.pod_spec("web")["spec"]
    assert pod["serviceAccountName"] == f"{release.fullname}-web"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    [container] = pod["containers"]
    ctx = container["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["tcpSocket"]["port"] == "http"
    # The web reads pod logs and events, so it gets the token; the ServiceAccount itself mounts none.
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/var/run/secrets/kubernetes.io/serviceaccount" in mounts
    assert "/tmp" in mounts
    for name in (release.fullname, f"{release.fullname}-web", f"{release.fullname}-provisioner"):
        account = release.core.read_namespaced_service_account(name, release.namespace)
        assert account.automount_service_account_token is False


def test_beat_pod_gets_no_token(release: Release) -> None:
    pod = release.pod_spec("beat")["spec"]
    assert pod["automountServiceAccountToken"] is False
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert "/var/run/secrets/kubernetes.io/serviceaccount" not in mounts


def test_the_engine_reads_the_cluster_and_the_web_reads_nothing_cluster_wide(release: Release) -> None:
    sa, web = release.sa_user, release.web_user
    assert can_i(release.kubeconfig, sa, "list", "pods")
    assert can_i(release.kubeconfig, sa, "watch", "jobs.batch")
    assert can_i(release.kubeconfig, sa, "list", "nodes")
    for who in (sa, web):
        assert not can_i(release.kubeconfig, who, "create", "namespaces")
        assert not can_i(release.kubeconfig, who, "create", "rolebindings", "kube-system")
        assert not can_i(release.kubeconfig, who, "create", "jobs.batch", release.namespace)
        assert not can_i(release.kubeconfig, who, "delete", "pods", release.namespace)
        assert not can_i(release.kubeconfig, who, "get", "secrets", release.namespace)
        assert not can_i(release.kubeconfig, who, "create", "clusterrolebindings")
    assert not can_i(release.kubeconfig, web, "list", "pods")
    # The proxy's account: nothing cluster-wide either (the provisioner binds its reads in team namespaces).
    for resource in ("endpointslices.discovery.k8s.io", "services", "endpoints"):
        assert not can_i(release.kubeconfig, release.proxy_user, "list", resource)
        assert not can_i(release.kubeconfig, release.proxy_user, "list", resource, "kube-system")


def test_only_the_provisioner_makes_team_namespaces_and_nobody_escalates(release: Release) -> None:
    """Issue 18's attack, as the chart's accounts: bind the workloads role in kube-system, then run Jobs."""
    from kubernetes import client

    team = f"gpuportal-team-{uuid.uuid4().hex[:6]}"
    other = f"gpuportal-other-{uuid.uuid4().hex[:6]}"
    sa, web, provisioner = release.sa_user, release.web_user, release.provisioner_user
    workloads_role = f"{release.fullname}-workloads"
    engine_subject = f"--serviceaccount={release.namespace}:{release.fullname}"
    try:
        # The engine and the web: no namespace, no RoleBinding, anywhere, prefixed or not.
        for who in (sa, web):
            refused = kubectl(
                release.kubeconfig, "create", "namespace", f"evil-{uuid.uuid4().hex[:4]}", f"--as={who}", check=False
            )
            assert "forbidden" in refused.lower(), refused
            for namespace in ("kube-system", "default", release.namespace):
                refused = kubectl(
                    release.kubeconfig, "create", "rolebinding", "escalate", "-n", namespace,
                    f"--clusterrole={workloads_role}", engine_subject, f"--as={who}", check=False,
                )  # fmt: skip
                assert "forbidden" in refused.lower(), refused
            assert not can_i(release.kubeconfig, who, "create", "jobs.batch", "kube-system")
        # Done AS the provisioner, as the portal's provisioner does it.
        kubectl(release.kubeconfig, "create", "namespace", team, f"--as={provisioner}")
        kubectl(release.kubeconfig, "create", "namespace", other, f"--as={provisioner}")
        kubectl(
            release.kubeconfig, "create", "rolebinding", "gpuportal-workloads", "-n", team,
            f"--clusterrole={workloads_role}", engine_subject, f"--as={provisioner}",
        )  # fmt: skip
        assert eventually_can_i(release.kubeconfig, sa, "create", "jobs.batch", team)
        assert can_i(release.kubeconfig, sa, "create", "deployments.apps", team)
        assert can_i(release.kubeconfig, sa, "get", "pods/log", team)
        assert not can_i(release.kubeconfig, sa, "update", "resourcequotas", team)
        assert not can_i(release.kubeconfig, sa, "create", "jobs.batch", other)
        assert not can_i(release.kubeconfig, sa, "create", "pods", team)
        assert not can_i(release.kubeconfig, sa, "get", "secrets", team)
        # The provisioner itself runs nothing, and `bind` covers only the portal's three roles: `admin` is refused.
        assert not can_i(release.kubeconfig, provisioner, "create", "jobs.batch", team)
        refused = kubectl(
            release.kubeconfig, "create", "rolebinding", "escalate", "-n", other, "--clusterrole=admin",
            engine_subject, f"--as={provisioner}", check=False,
        )  # fmt: skip
        assert "forbidden" in refused.lower(), refused
        assert not can_i(release.kubeconfig, sa, "create", "jobs.batch", other)
    finally:
        core = client.CoreV1Api(release.api)
        for namespace in (team, other):
            with contextlib.suppress(Exception):
                core.delete_namespace(namespace, propagation_policy="Background")


def test_rbac_objects_match_the_rules_file(release: Release) -> None:
    rules = yaml.safe_load((CHART_DIR / "files" / "rbac-rules.yaml").read_text())
    stored = release.rbac.read_cluster_role(f"{release.fullname}-workloads")
    as_dicts = [release.api.sanitize_for_serialization(rule) for rule in stored.rules]
    assert as_dicts == rules["workloads"]
    binding = release.rbac.read_cluster_role_binding(f"{release.fullname}-engine")
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [
        ("ServiceAccount", release.fullname, release.namespace)
    ]
    binding = release.rbac.read_cluster_role_binding(f"{release.fullname}-provisioner")
    assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [
        ("ServiceAccount", f"{release.fullname}-provisioner", release.namespace)
    ]


def test_upgrade_keeps_the_generated_secret_key_and_reruns_the_hooks(release: Release) -> None:
    before = release.secret_data()
    assert len(before["SECRET_KEY"]) == 64
    migrate_uid = release.batch.read_namespaced_job(f"{release.fullname}-migrate", release.namespace).metadata.uid
    values = {**INSTALL_VALUES, "worker": {"replicas": 2}}
    with release.config() as cfg:
        upgraded = cfg.upgrade(CHART_DIR, release.name, values, namespace=release.namespace, timeout=240)
    assert upgraded["status"] == "deployed"
    assert upgraded["revision"] == 2
    after = release.secret_data()
    assert after == before, "an upgrade must not change the generated key or database password"
    job = release.batch.read_namespaced_job(f"{release.fullname}-migrate", release.namespace)
    assert job.metadata.uid != migrate_uid, "the pre-upgrade migration Job runs again"
    assert job.status.succeeded == 1
    worker = release.apps.read_namespaced_deployment(f"{release.fullname}-worker", release.namespace)
    assert worker.spec.replicas == 2


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param({"web": {"replicas": -1}}, "minimum: got -1, want 0", id="negative-replicas"),
        pytest.param({"secret": {"generateSecretKey": False}}, "secret.secretKey is required", id="missing-secret-key"),
        pytest.param(
            {"seed": {"defaultQuotas": [{"team": "vision", "gpu_type": "v100", "max_gpus": 2}]}},
            'seed.defaultQuotas[0].gpu_type "v100" is not a GPU type in seed.gpuTypes',
            id="unknown-gpu-type",
        ),
    ],
)
def test_install_refuses_bad_values_before_creating_anything(kube_cluster, kube_namespace, values, message) -> None:
    name = f"bad{uuid.uuid4().hex[:4]}"
    with (
        helm_python.Config(kubeconfig_path=kube_cluster.kubeconfig, namespace=kube_namespace) as cfg,
        pytest.raises(helm_python.HelmError) as refused,
    ):
        cfg.install(CHART_DIR, name, with_seal(values), namespace=kube_namespace, timeout=60)
    assert message in str(refused.value)
    leftovers = kubectl(kube_cluster.kubeconfig, "get", "all,secrets,configmaps", "-n", kube_namespace, "-o", "name")
    assert name not in leftovers


@pytest.mark.django_db
def test_the_portal_sets_up_a_team_namespace_with_the_charts_config_and_account(release, settings, tmp_path) -> None:
    """The provisioner's namespace set-up, run as the chart's provisioner account with the chart's ConfigMap."""
    from devtools.engine import cluster_ca
    from devtools.rbac import kubeconfig_for_token
    from jobs.kube import client as kube_client
    from jobs.services.provisioning import NamespaceRefused, forget_namespaces, namespace_provision
    from tests.engine.factories import GpuTypeFactory, QuotaFactory, TeamFactory

    config = release.core.read_namespaced_config_map(f"{release.fullname}-config", release.namespace).data
    account = release.core.read_namespaced_service_account(f"{release.fullname}-provisioner", release.namespace)
    token_secret = release.core.read_namespaced_secret(account.secrets[0].name, release.namespace)
    token = base64.b64decode(token_secret.data["token"]).decode()
    kubeconfig = tmp_path / "portal-sa.kubeconfig"
    kubeconfig.write_text(
        kubeconfig_for_token(server=release.server, ca_pem=cluster_ca(release.kubeconfig), token=token)
    )
    settings.KUBECONFIG = str(kubeconfig)
    settings.KUBE_CONTEXT = ""
    settings.KUBE_SERVICE_ACCOUNT = config["KUBE_SERVICE_ACCOUNT"]
    settings.KUBE_WORKLOADS_CLUSTERROLE = config["KUBE_WORKLOADS_CLUSTERROLE"]
    settings.KUBE_WEB_SERVICE_ACCOUNT = config["KUBE_WEB_SERVICE_ACCOUNT"]
    settings.KUBE_READER_CLUSTERROLE = config["KUBE_READER_CLUSTERROLE"]
    settings.KUBE_PROXY_SERVICE_ACCOUNT = config["KUBE_PROXY_SERVICE_ACCOUNT"]
    settings.KUBE_PROXY_CLUSTERROLE = config["KUBE_PROXY_CLUSTERROLE"]
    settings.PORTAL_INSTANCE = config["PORTAL_INSTANCE"]
    prefix = settings.KUBE_NAMESPACE_PREFIX = f"t-chart-team-{uuid.uuid4().hex[:4]}-"
    kube_client.reset()
    forget_namespaces()
    team = TeamFactory(slug="vision")
    QuotaFactory(team=team, gpu_type=GpuTypeFactory(slug="p100"), max_gpus=4)
    try:
        namespace = namespace_provision(team)
        assert namespace == f"{settings.KUBE_NAMESPACE_PREFIX}vision"
        bindings = {b.role_ref.name: b for b in release.rbac.list_namespaced_role_binding(namespace).items}
        assert set(bindings) == {f"{release.fullname}-{r}" for r in ("workloads", "reader", "proxy")}
        assert [(s.kind, s.name, s.namespace) for s in bindings[f"{release.fullname}-workloads"].subjects] == [
            ("ServiceAccount", release.fullname, release.namespace)
        ]
        assert [(s.kind, s.name, s.namespace) for s in bindings[f"{release.fullname}-reader"].subjects] == [
            ("ServiceAccount", f"{release.fullname}-web", release.namespace)
        ]
        [quota] = release.core.list_namespaced_resource_quota(namespace).items
        # 4 GPUs, and for each the type's CPU and memory per GPU (the factory's 1000m and 1024 MiB).
        assert quota.spec.hard == {
            "requests.nvidia.com/gpu": "4", "requests.cpu": "4", "requests.memory": "4Gi", "limits.memory": "4Gi",
        }  # fmt: skip
        assert eventually_can_i(release.kubeconfig, release.sa_user, "create", "jobs.batch", namespace)
        assert eventually_can_i(release.kubeconfig, release.web_user, "get", "pods/log", namespace)
        assert not can_i(release.kubeconfig, release.web_user, "create", "jobs.batch", namespace)
        # The chart's provisioner may bind the proxy's role (its `bind` resourceNames): the proxy reads here.
        assert [(s.kind, s.name) for s in bindings[f"{release.fullname}-proxy"].subjects] == [
            ("ServiceAccount", f"{release.fullname}-proxy")
        ]
        assert eventually_can_i(
            release.kubeconfig, release.proxy_user, "list", "endpointslices.discovery.k8s.io", namespace
        )
        assert not can_i(release.kubeconfig, release.proxy_user, "list", "pods", namespace)
        # Outside the prefix the provisioner's code refuses before any call.
        settings.KUBE_NAMESPACE_PREFIX = "kube-"
        with pytest.raises(NamespaceRefused):
            namespace_provision(TeamFactory(slug="system"))
    finally:
        kube_client.reset()
        forget_namespaces()
        with contextlib.suppress(Exception):
            release.core.delete_namespace(f"{prefix}vision", propagation_policy="Background")
