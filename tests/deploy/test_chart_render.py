"""The Helm chart, rendered by Helm's own template engine: structure, security, RBAC, hooks, bad values."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import helm_python
import jsonschema
import pytest
import yaml

from tests.deploy.helm import (
    CHART_DIR,
    CI_VALUES,
    TEST_SEAL,
    Manifest,
    find,
    load_values,
    render,
    render_error,
    with_seal,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# apiVersion of every kind the chart may render, as served by Kubernetes 1.20 (our local cluster).
SERVED_BY_1_20 = {
    "ConfigMap": "v1",
    "Secret": "v1",
    "Service": "v1",
    "ServiceAccount": "v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "Ingress": "networking.k8s.io/v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "ValidatingWebhookConfiguration": "admissionregistration.k8s.io/v1",
}
PORTAL_COMPONENTS = ("web", "worker", "beat", "tracker", "provisioner")
VALUE_SETS = [pytest.param(None, id="default-values")] + [pytest.param(p, id=p.stem) for p in CI_VALUES]
SECRET_KEY = "a-test-secret-key-that-is-long-enough-0123456789"


def values_of(path: Path | None) -> dict[str, Any]:
    return load_values(path) if path else {}


def pod_specs(manifests: list[Manifest]) -> dict[str, dict[str, Any]]:
    """Pod spec of every workload object, by '<Kind>/<name>'."""
    specs = {}
    for m in manifests:
        if m.kind in {"Deployment", "StatefulSet", "DaemonSet", "Job"}:
            specs[f"{m.kind}/{m.name}"] = m.obj["spec"]["template"]["spec"]
    return specs


def deployment(manifests: list[Manifest], component: str) -> dict[str, Any]:
    found = [
        m.obj
        for m in manifests
        if m.kind == "Deployment" and m.obj["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    assert len(found) == 1, f"expected one {component} Deployment, found {len(found)}"
    return found[0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def config_map(manifests: list[Manifest]) -> dict[str, str]:
    [cm] = [m.obj for m in manifests if m.kind == "ConfigMap" and m.name.endswith("-config")]
    return cm["data"]


# --- every value set ---------------------------------------------------------------------------------


@pytest.mark.parametrize("values_file", VALUE_SETS)
def test_every_object_is_well_formed_for_kubernetes_1_20(values_file: Path | None) -> None:
    manifests = render(values_of(values_file))
    assert manifests
    seen = set()
    for m in manifests:
        assert SERVED_BY_1_20.get(m.kind) == m.obj["apiVersion"], f"{m.template}: {m.kind}"
        assert DNS_LABEL.match(m.name), m.name
        assert len(m.name) <= 63, m.name
        labels = m.obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/instance"] == "gp"
        assert "app.kubernetes.io/component" in labels
        assert (m.kind, m.name) not in seen, f"{m.kind} {m.name} rendered twice"
        seen.add((m.kind, m.name))


@pytest.mark.parametrize("values_file", VALUE_SETS)
def test_web_worker_beat_tracker_are_separate_deployments_of_one_image(values_file: Path | None) -> None:
    values = values_of(values_file)
    manifests = render(values)
    images = set()
    for component in PORTAL_COMPONENTS:
        dep = deployment(manifests, component)
        selector = dep["spec"]["selector"]["matchLabels"]
        assert selector["app.kubernetes.io/component"] == component
        template_labels = dep["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= template_labels.items()
        [container] = dep["spec"]["template"]["spec"]["containers"]
        images.add(container["image"])
    assert len(images) == 1
    commands = {
        c: deployment(manifests, c)["spec"]["template"]["spec"]["containers"][0]["command"] for c in PORTAL_COMPONENTS
    }
    assert commands["web"][:2] == ["gunicorn", "portal.wsgi:application"]
    assert commands["worker"][:4] == ["celery", "-A", "portal", "worker"]
    assert commands["beat"][:4] == ["celery", "-A", "portal", "beat"]
    assert commands["tracker"] == ["python", "manage.py", "track"]
    # Exactly one beat and one tracker, never two at once during a rollout.
    for single in ("beat", "tracker"):
        dep = deployment(manifests, single)
        assert dep["spec"]["replicas"] == 1
        assert dep["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment(manifests, "web")["spec"]["replicas"] == values.get("web", {}).get("replicas", 2)


@pytest.mark.parametrize("values_file", VALUE_SETS)
def test_every_pod_is_non_root_read_only_and_drops_all_capabilities(values_file: Path | None) -> None:
    values = values_of(values_file)
    specs = pod_specs(render(values))
    assert specs
    # The one exception, only when asked for: the agent reading the kubelet's root-only pod directories
    # (agent.volumeUsage) runs as uid 0 with DAC_READ_SEARCH alone (tested on its own below).
    root_agent = ((values or {}).get("agent") or {}).get("volumeUsage", {}).get("enabled", False)
    for where, spec in specs.items():
        as_root = root_agent and where.startswith("DaemonSet/") and where.endswith("-agent")
        assert spec["securityContext"]["runAsNonRoot"] is not as_root, where
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert spec.get("hostNetwork") is not True, where
        assert spec.get("hostPID") is not True, where
        for container in spec["containers"]:
            ctx = container["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False, where
            assert ctx["readOnlyRootFilesystem"] is True, where
            assert ctx["capabilities"]["drop"] == ["ALL"], where
            assert ctx["capabilities"].get("add", []) == (["DAC_READ_SEARCH"] if as_root else []), where
            assert container["resources"]["requests"], where
            mounts = {v["mountPath"]: v["name"] for v in container.get("volumeMounts", [])}
            if where.startswith(("Deployment/", "Job/")):
                volumes = {v["name"]: v for v in spec["volumes"]}
                assert "emptyDir" in volumes[mounts["/tmp"]], f"{where}: /tmp must be a writable emptyDir"


@pytest.mark.parametrize("values_file", VALUE_SETS)
def test_only_processes_that_call_the_api_get_a_token(values_file: Path | None) -> None:
    manifests = render(values_of(values_file))
    automount = {
        c: deployment(manifests, c)["spec"]["template"]["spec"]["automountServiceAccountToken"]
        for c in PORTAL_COMPONENTS
    }
    assert automount == {"web": True, "worker": True, "beat": False, "tracker": True, "provisioner": True}
    for m in manifests:
        if m.kind in {"Job", "StatefulSet", "DaemonSet"}:
            assert m.obj["spec"]["template"]["spec"]["automountServiceAccountToken"] is False, m.name
        if m.kind == "ServiceAccount":
            assert m.obj["automountServiceAccountToken"] is False


@pytest.mark.parametrize("values_file", VALUE_SETS)
def test_pods_roll_when_their_configuration_changes(values_file: Path | None) -> None:
    values = values_of(values_file)
    before = render(values)
    changed = copy.deepcopy(values)
    changed.setdefault("config", {})["logLevel"] = "WARNING"
    after = render(changed)
    rescaled = copy.deepcopy(values)
    rescaled.setdefault("worker", {})["replicas"] = 7
    unchanged = render(rescaled)
    for component in PORTAL_COMPONENTS:

        def checksum(manifests: list[Manifest], c: str = component) -> str:
            return deployment(manifests, c)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

        assert re.fullmatch(r"[0-9a-f]{64}", checksum(before))
        assert checksum(before) != checksum(after), component
        assert checksum(before) == checksum(unchanged), component


@pytest.mark.parametrize("values_file", VALUE_SETS)
def test_web_probes_ask_healthz_with_an_allowed_host(values_file: Path | None) -> None:
    manifests = render(values_of(values_file))
    [container] = deployment(manifests, "web")["spec"]["template"]["spec"]["containers"]
    readiness = container["readinessProbe"]["httpGet"]
    assert readiness["path"] == "/healthz"
    assert readiness["port"] == "http"
    [host_header] = readiness["httpHeaders"]
    assert host_header["name"] == "Host"
    assert host_header["value"] in config_map(manifests)["ALLOWED_HOSTS"].split(",")
    assert container["livenessProbe"]["tcpSocket"]["port"] == "http"
    assert container["startupProbe"]
    assert {"name": "http", "containerPort": 8000, "protocol": "TCP"} in container["ports"]


@pytest.mark.parametrize("values_file", VALUE_SETS)
def test_helm_lint_strict_for_kubernetes_1_20_finds_nothing_above_info(values_file: Path | None) -> None:
    report = helm_python.lint(
        CHART_DIR, with_seal(values_of(values_file)), strict=True, kube_version="1.20.2", namespace="portal"
    )
    assert report["errors"] == []
    worse_than_info = [m for m in report["messages"] if m["severity"] > 1]  # Helm: 1 info, 2 warning, 4 error
    assert not worse_than_info, worse_than_info


# --- RBAC ----------------------------------------------------------------------------------------------


def test_rbac_is_exactly_the_rules_file_split_by_exposure() -> None:
    manifests = render({})
    workloads_role, reader_role, proxy_role = "gp-gpuportal-workloads", "gp-gpuportal-reader", "gp-gpuportal-proxy"
    text = (CHART_DIR / "files" / "rbac-rules.yaml").read_text()
    text = text.replace("{{WORKLOADS_ROLE}}", workloads_role).replace("{{READER_ROLE}}", reader_role)
    rules = yaml.safe_load(text.replace("{{PROXY_ROLE}}", proxy_role))
    for key in ("engine", "provisioner", "workloads", "reader", "proxy"):
        assert find(manifests, "ClusterRole", f"gp-gpuportal-{key}")["rules"] == rules[key], key
    # Two cluster-wide bindings: the engine's reads and the provisioner's; the web and the proxy get none.
    bindings = {m.name: m.obj for m in manifests if m.kind == "ClusterRoleBinding"}
    assert set(bindings) == {"gp-gpuportal-engine", "gp-gpuportal-provisioner"}
    assert bindings["gp-gpuportal-engine"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "gp-gpuportal", "namespace": "portal"}
    ]
    assert bindings["gp-gpuportal-provisioner"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "gp-gpuportal-provisioner", "namespace": "portal"}
    ]
    assert {v for r in rules["proxy"] for v in r["verbs"]} <= {"get", "list", "watch"}
    for name, binding in bindings.items():
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
    # The app is told which roles the provisioner binds in team namespaces, and to whom.
    config = config_map(manifests)
    assert config["KUBE_WORKLOADS_CLUSTERROLE"] == workloads_role
    assert config["KUBE_READER_CLUSTERROLE"] == reader_role
    assert config["KUBE_SERVICE_ACCOUNT"] == "portal/gp-gpuportal"
    assert config["KUBE_WEB_SERVICE_ACCOUNT"] == "portal/gp-gpuportal-web"
    assert config["KUBE_PROXY_CLUSTERROLE"] == proxy_role
    assert config["KUBE_PROXY_SERVICE_ACCOUNT"] == "portal/gp-gpuportal-proxy"
    assert not [m for m in manifests if m.kind in {"Role", "RoleBinding"}]
    # Only the provisioner may create namespaces or RoleBindings or `bind`, and `bind` only these three roles.
    writers = {
        key
        for key in rules
        for rule in rules[key]
        if set(rule["verbs"]) & {"bind", "escalate", "create"}
        and set(rule["resources"]) & {"namespaces", "rolebindings", "clusterroles", "clusterrolebindings", "roles"}
    }
    assert writers == {"provisioner"}
    assert [r for r in rules["provisioner"] if "bind" in r["verbs"]] == [
        {
            "apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles"],
            "verbs": ["bind"],
            "resourceNames": [workloads_role, reader_role, proxy_role],
        }
    ]
    # The web's role reads only: users' secrets are sealed for the engine, which writes them.
    writes = [r for r in rules["reader"] if set(r["verbs"]) - {"get", "list", "watch"}]
    assert writes == []
    assert not [r for r in rules["reader"] if "secrets" in r["resources"]]
    assert {v for r in rules["engine"] for v in r["verbs"]} <= {"get", "list", "watch"}


def test_each_process_runs_as_the_identity_its_exposure_allows() -> None:
    manifests = render({})

    def pod(component: str) -> dict[str, Any]:
        return deployment(manifests, component)["spec"]["template"]["spec"]

    assert pod("web")["serviceAccountName"] == "gp-gpuportal-web"
    assert pod("beat")["serviceAccountName"] == "gp-gpuportal-web"
    assert pod("beat")["automountServiceAccountToken"] is False
    assert pod("worker")["serviceAccountName"] == "gp-gpuportal"
    assert pod("tracker")["serviceAccountName"] == "gp-gpuportal"
    provisioner = pod("provisioner")
    assert provisioner["serviceAccountName"] == "gp-gpuportal-provisioner"
    assert provisioner["automountServiceAccountToken"] is True
    [container] = provisioner["containers"]
    assert container["command"][:4] == ["celery", "-A", "portal", "worker"]
    assert container["command"][container["command"].index("--queues") + 1] == "provision"
    assert "ports" not in container
    # No Service selects the provisioner.
    for service in (m.obj for m in manifests if m.kind == "Service"):
        assert service["spec"]["selector"].get("app.kubernetes.io/component") != "provisioner"
    # Pre-provisioned clusters: no provisioner, no identity that may create namespaces or bindings.
    off = render({"provisioner": {"enabled": False}})
    assert not [m for m in off if "provisioner" in m.name]
    assert {m.name for m in off if m.kind == "ClusterRoleBinding"} == {"gp-gpuportal-engine"}


def test_only_the_worker_holds_the_private_half_of_the_seal_pair() -> None:
    manifests = render({})
    assert config_map(manifests)["PORTAL_SEAL_PUBLIC_KEY"] == TEST_SEAL["publicKey"]
    sealed = find(manifests, "Secret", "gp-gpuportal-seal")
    assert sealed["stringData"] == {"private-key": TEST_SEAL["privateKey"]}
    assert "helm.sh/hook" not in (sealed["metadata"].get("annotations") or {})
    holders = []
    for name, spec in pod_specs(manifests).items():
        volumes = [v for v in spec.get("volumes", []) if v.get("secret", {}).get("secretName") == "gp-gpuportal-seal"]
        env = [e["name"] for c in spec["containers"] for e in c.get("env", [])]
        if volumes or "PORTAL_SEAL_PRIVATE_KEY_FILE" in env:
            holders.append(name)
    assert holders == ["Deployment/gp-gpuportal-worker"]
    worker = deployment(manifests, "worker")["spec"]["template"]["spec"]
    [container] = worker["containers"]
    assert {"name": "PORTAL_SEAL_PRIVATE_KEY_FILE", "value": "/etc/gpuportal/seal/private-key"} in container["env"]
    assert {"name": "seal", "mountPath": "/etc/gpuportal/seal", "readOnly": True} in container["volumeMounts"]
    # The migration seals registry passwords stored in the clear: it gets the public half too.
    migrate = find(manifests, "Job", "gp-gpuportal-migrate")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "PORTAL_SEAL_PUBLIC_KEY", "value": TEST_SEAL["publicKey"]} in migrate["env"]
    # A Secret the admin manages instead: the chart makes none and mounts that one's key.
    own = render(
        {"seal": {"publicKey": TEST_SEAL["publicKey"], "existingSecret": "portal-seal", "existingSecretKey": "k"}}
    )
    assert not [m for m in own if m.kind == "Secret" and m.name == "gp-gpuportal-seal"]
    [volume] = [v for v in deployment(own, "worker")["spec"]["template"]["spec"]["volumes"] if v["name"] == "seal"]
    assert volume["secret"]["secretName"] == "portal-seal"
    assert volume["secret"]["items"] == [{"key": "k", "path": "private-key"}]


def test_admission_policy_guards_the_provisioner_where_the_cluster_has_it() -> None:
    # helm template knows no cluster: "auto" renders nothing; "always" renders the policy and its binding.
    assert not [m for m in render({}) if m.kind.startswith("ValidatingAdmissionPolicy")]
    manifests = render({"rbac": {"admissionPolicy": "always"}})
    policy = find(manifests, "ValidatingAdmissionPolicy", "gp-gpuportal-provisioner-prefix")["spec"]
    [condition] = policy["matchConditions"]
    assert (
        condition["expression"]
        == 'request.userInfo.username == "system:serviceaccount:portal:gp-gpuportal-provisioner"'
    )
    expressions = [v["expression"] for v in policy["validations"]]
    assert 'startsWith("gpuportal-")' in expressions[0]
    assert '["gp-gpuportal-workloads", "gp-gpuportal-reader", "gp-gpuportal-proxy"]' in expressions[1]
    resources = {r for rule in policy["matchConstraints"]["resourceRules"] for r in rule["resources"]}
    assert {"namespaces", "rolebindings"} <= resources
    binding = find(manifests, "ValidatingAdmissionPolicyBinding", "gp-gpuportal-provisioner-prefix")["spec"]
    assert binding == {"policyName": "gp-gpuportal-provisioner-prefix", "validationActions": ["Deny"]}


def test_rbac_and_service_account_can_be_left_to_the_admin() -> None:
    manifests = render({"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "portal-sa"}})
    assert not [m for m in manifests if m.kind in {"ClusterRole", "ClusterRoleBinding", "ServiceAccount"}]
    spec = deployment(manifests, "web")["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "portal-sa-web"
    assert deployment(manifests, "worker")["spec"]["template"]["spec"]["serviceAccountName"] == "portal-sa"
    assert "serviceAccount.name is required" in render_error({"serviceAccount": {"create": False}})


# --- secrets and external services ---------------------------------------------------------------------


def test_default_install_generates_a_secret_key_and_database_password_once() -> None:
    manifests = render({})
    secret = find(manifests, "Secret", "gp-gpuportal")
    data = secret["stringData"]
    assert len(data["SECRET_KEY"]) == 64
    assert len(data["POSTGRES_PASSWORD"]) == 32
    assert data["DATABASE_URL"] == (
        f"postgres://gpuportal:{data['POSTGRES_PASSWORD']}@gp-gpuportal-postgresql:5432/gpuportal"
    )
    # A hook before the migration Job, which needs it before the release's own objects exist.
    assert secret["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < 0
    # The bundled Redis asks for a generated password; REDIS_URL, which carries it, is in the Secret too.
    assert len(data["REDIS_PASSWORD"]) == 32
    assert data["REDIS_URL"] == f"redis://:{data['REDIS_PASSWORD']}@gp-gpuportal-redis:6379/0"
    assert "REDIS_URL" not in config_map(manifests)
    [redis] = find(manifests, "StatefulSet", "gp-gpuportal-redis")["spec"]["template"]["spec"]["containers"]
    assert redis["command"][-2:] == ["--requirepass", "$(REDIS_PASSWORD)"]
    assert env_of(redis)["REDIS_PASSWORD"] == {"secretKeyRef": {"name": "gp-gpuportal", "key": "REDIS_PASSWORD"}}
    [web] = deployment(manifests, "web")["spec"]["template"]["spec"]["containers"]
    assert env_of(web)["REDIS_URL"] == {"secretKeyRef": {"name": "gp-gpuportal", "key": "REDIS_URL"}}
    postgres = find(manifests, "StatefulSet", "gp-gpuportal-postgresql")
    [container] = postgres["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["POSTGRES_PASSWORD"] == {
        "secretKeyRef": {"name": "gp-gpuportal", "key": "POSTGRES_PASSWORD"}
    }


def test_external_services_from_urls_in_values() -> None:
    manifests = render(load_values(CHART_DIR / "ci" / "external-services.yaml"))
    assert not [m for m in manifests if m.kind == "StatefulSet"]
    data = find(manifests, "Secret", "gp-gpuportal")["stringData"]
    assert data["DATABASE_URL"] == "postgres://portal:s3cret%40x@db.example.internal:5432/portal"
    assert data["REDIS_URL"] == "redis://:s3cret@redis.example.internal:6379/1"
    assert "REDIS_URL" not in config_map(manifests)
    [container] = deployment(manifests, "worker")["spec"]["template"]["spec"]["containers"]
    assert env_of(container)["REDIS_URL"] == {"secretKeyRef": {"name": "gp-gpuportal", "key": "REDIS_URL"}}


def test_existing_secrets_are_referenced_and_no_secret_is_rendered() -> None:
    manifests = render(load_values(CHART_DIR / "ci" / "existing-secrets.yaml"))
    # The one Secret the chart always makes itself: the admission guard's serving certificate (no user data).
    assert [m.name for m in manifests if m.kind == "Secret"] == ["gp-gpuportal-admission-guard-tls"]
    for where, spec in pod_specs(manifests).items():
        env = env_of(spec["containers"][0])
        if where.endswith("-admission-guard"):
            assert env == {}, "the guard holds no secret of the portal's"
            continue
        assert env["SECRET_KEY"] == {"secretKeyRef": {"name": "portal-credentials", "key": "django-secret-key"}}, where
        assert env["DATABASE_URL"] == {"secretKeyRef": {"name": "portal-credentials", "key": "database-url"}}, where
        assert env["REDIS_URL"] == {"secretKeyRef": {"name": "portal-credentials", "key": "redis-url"}}, where


def test_bundled_database_password_is_url_encoded() -> None:
    manifests = render({"postgresql": {"auth": {"password": "p@ss/word with spaces"}}})
    data = find(manifests, "Secret", "gp-gpuportal")["stringData"]
    assert data["POSTGRES_PASSWORD"] == "p@ss/word with spaces"
    assert data["DATABASE_URL"].startswith("postgres://gpuportal:p%40ss%2Fword+with+spaces@")


# --- hooks: migrations and seed ---------------------------------------------------------------------------


def test_migrations_run_before_install_and_upgrade_with_an_external_database() -> None:
    manifests = render(load_values(CHART_DIR / "ci" / "external-services.yaml"))
    job = find(manifests, "Job", "gp-gpuportal-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    [container] = pod["containers"]
    assert container["command"] == ["python", "manage.py", "migrate", "--noinput"]
    # Before a first install the ConfigMap does not exist yet, so the settings are inlined.
    env = env_of(container)
    assert "envFrom" not in container
    assert env["KUBE_WORKLOADS_CLUSTERROLE"] == "gp-gpuportal-workloads"
    assert env["DATABASE_URL"] == {"secretKeyRef": {"name": "gp-gpuportal", "key": "DATABASE_URL"}}


def test_migrations_with_the_bundled_database_run_after_it_exists() -> None:
    job = find(render({}), "Job", "gp-gpuportal-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"


def test_gpu_types_quotas_and_registries_are_seeded_from_values() -> None:
    values = load_values(CHART_DIR / "ci" / "full.yaml")
    manifests = render(values)
    seed_file = yaml.safe_load(find(manifests, "ConfigMap", "portal-seed")["data"]["seed.yaml"])
    assert seed_file == {
        "gpu_types": values["seed"]["gpuTypes"],
        "teams": values["seed"]["teams"],
        "default_quotas": values["seed"]["defaultQuotas"],
        "images": values["seed"]["images"],
        "allowed_registries": values["seed"]["allowedRegistries"],
    }
    job = find(manifests, "Job", "portal-seed")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "post-install,post-upgrade"
    migrate = find(manifests, "Job", "portal-migrate")
    assert int(annotations["helm.sh/hook-weight"]) > int(migrate["metadata"]["annotations"]["helm.sh/hook-weight"])
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "manage.py", "seed", "--file", "/etc/gpuportal/seed/seed.yaml"]
    mount = next(v for v in container["volumeMounts"] if v["name"] == "seed")
    assert mount == {"name": "seed", "mountPath": "/etc/gpuportal/seed", "readOnly": True}


def test_full_values_wire_ingress_hosts_extra_env_and_the_agent() -> None:
    manifests = render(load_values(CHART_DIR / "ci" / "full.yaml"))
    config = config_map(manifests)
    assert config["ALLOWED_HOSTS"].split(",") == [
        "portal-web",
        "portal-web.portal.svc",
        "gpus.example.org",
        "portal.internal",
    ]
    assert config["CSRF_TRUSTED_ORIGINS"] == "https://gpus.example.org,https://portal.internal"
    assert config["SITE_URL"] == "https://gpus.example.org"
    assert config["KUBE_NAMESPACE_PREFIX"] == "lab-"
    assert config["PORTAL_MAX_GPUS_PER_WORKLOAD"] == "8"
    ingress = find(manifests, "Ingress", "portal-web")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]
    assert backend == {"service": {"name": "portal-web", "port": {"name": "http"}}}
    agent = find(manifests, "DaemonSet", "portal-agent")["spec"]["template"]["spec"]
    proc = next(v for v in agent["volumes"] if v["name"] == "host-proc")
    assert proc["hostPath"]["path"] == "/proc"
    assert next(m for m in agent["containers"][0]["volumeMounts"] if m["name"] == "host-proc")["readOnly"] is True
    assert agent["automountServiceAccountToken"] is False
    assert agent["runtimeClassName"] == "nvidia"
    agent_env = env_of(agent["containers"][0])
    assert agent_env["HOST_PROC"] == "/host/proc"
    assert agent_env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert agent_env["PORTAL_URL"] == "http://portal-web.portal.svc:8080"
    # No shared secret: each pod sends its own projected token, for the portal's audience, expiring.
    assert agent_env["AGENT_TOKEN_FILE"] == "/var/run/secrets/gpuportal/agent/token"
    token = next(v for v in agent["volumes"] if v["name"] == "token")
    assert token["projected"] == {
        "sources": [
            {"serviceAccountToken": {"audience": "gpuportal-agent", "expirationSeconds": 3600, "path": "token"}}
        ]
    }
    assert agent["serviceAccountName"] == "portal-agent"
    assert not any("secret" in v for v in agent["volumes"])
    # The portal checks that token (TokenReview) and reads the agent pod's node: in this namespace only.
    config = find(manifests, "ConfigMap", "portal-config")["data"]
    assert config["AGENT_SERVICE_ACCOUNT"] == "portal/portal-agent"
    assert config["AGENT_DAEMONSET"] == "portal-agent"
    pods = find(manifests, "RoleBinding", "portal-agent-pods")
    assert pods["metadata"]["namespace"] == "portal"
    assert pods["subjects"] == [{"kind": "ServiceAccount", "name": "portal-web", "namespace": "portal"}]
    review = find(manifests, "ClusterRoleBinding", "portal-agent-review")
    assert review["subjects"] == pods["subjects"]
    web = deployment(manifests, "web")["spec"]["template"]["spec"]
    assert web["imagePullSecrets"] == [{"name": "registry-pull"}]
    assert web["containers"][0]["image"] == "registry.example.org/research/gpuportal:2026.11.1"
    assert {"secretRef": {"name": "portal-extra"}} in web["containers"][0]["envFrom"]


def test_only_this_release_reaches_the_bundled_database_and_redis() -> None:
    manifests = render({})
    for component, port in (("postgresql", 5432), ("redis", 6379)):
        policy = find(manifests, "NetworkPolicy", f"gp-gpuportal-{component}")["spec"]
        assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == component
        [rule] = policy["ingress"]
        assert rule["from"] == [
            {
                "podSelector": {
                    "matchLabels": {"app.kubernetes.io/name": "gpuportal", "app.kubernetes.io/instance": "gp"}
                }
            }
        ]
        assert rule["ports"] == [{"port": port, "protocol": "TCP"}]
    external = render(load_values(CHART_DIR / "ci" / "external-services.yaml"))
    assert not [m for m in external if m.kind == "NetworkPolicy" and ("postgresql" in m.name or "redis" in m.name)]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


@pytest.mark.parametrize("values_file", VALUE_SETS)
def test_every_pod_the_chart_runs_is_covered_by_a_network_policy(values_file: Path | None) -> None:
    values = values_of(values_file)
    values.setdefault("agent", {})["enabled"] = True
    manifests = render(values)
    policies = [m.obj["spec"] for m in manifests if m.kind == "NetworkPolicy"]
    pods = [
        (m.name, m.obj["spec"]["template"]["metadata"]["labels"])
        for m in manifests
        if m.kind in {"Deployment", "StatefulSet", "DaemonSet", "Job"}
    ]
    assert len(pods) >= 8
    for name, labels in pods:
        covering = [p for p in policies if "Ingress" in p["policyTypes"] and _selects(p["podSelector"], labels)]
        assert covering, f"{name} is not covered by any NetworkPolicy"
        allowed = [rule for p in covering for rule in p.get("ingress", [])]
        component = labels["app.kubernetes.io/component"]
        if component in {"worker", "beat", "tracker", "provisioner", "migrate", "seed"}:
            assert allowed == [], f"{name} accepts connections: {allowed}"
    # The agent's metrics port: only from the monitoring namespace.
    [agent] = [m.obj["spec"] for m in manifests if m.kind == "NetworkPolicy" and m.name.endswith("-agent")]
    port = (values.get("agent") or {}).get("metricsPort", 9400)
    assert agent["ingress"] == [
        {
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
            "ports": [{"port": port, "protocol": "TCP"}],
        }
    ]
    [web] = [m.obj["spec"] for m in manifests if m.kind == "NetworkPolicy" and m.name.endswith("-web")]
    assert web["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}]


def test_workspaces_are_off_by_default_and_wired_from_values() -> None:
    default = config_map(render({}))
    # Empty means off in portal/settings.py: no claims, no /home or /team mounts.
    assert default["WORKSPACE_STORAGE_CLASS"] == ""
    assert (default["WORKSPACE_HOME_GIB"], default["WORKSPACE_TEAM_GIB"]) == ("10", "50")
    manifests = render({"config": {"workspaceStorageClass": "cephfs", "workspaceHomeGib": 20, "workspaceTeamGib": 200}})
    data = config_map(manifests)
    assert (data["WORKSPACE_STORAGE_CLASS"], data["WORKSPACE_HOME_GIB"], data["WORKSPACE_TEAM_GIB"]) == (
        "cephfs",
        "20",
        "200",
    )
    # The processes that render workloads read it from the ConfigMap.
    for component in ("web", "worker"):
        [container] = deployment(manifests, component)["spec"]["template"]["spec"]["containers"]
        assert {"configMapRef": {"name": "gp-gpuportal-config"}} in container["envFrom"]


def test_agent_is_off_by_default() -> None:
    assert not [m for m in render({}) if m.kind == "DaemonSet"]


def test_agent_reports_workspace_use_only_when_asked_and_then_as_root_with_one_read_capability() -> None:
    """Off (the default): non-root, no kubelet mount, volume measuring off. On: the kubelet's pods
    directory read-only with host-to-container propagation, uid 0, every capability but DAC_READ_SEARCH
    dropped, nothing writable, no privilege escalation."""
    plain = render({"agent": {"enabled": True}})
    agent = find(plain, "DaemonSet", "gp-gpuportal-agent")["spec"]["template"]["spec"]
    container = agent["containers"][0]
    assert agent["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "kubelet-pods" not in {v["name"] for v in agent["volumes"]}
    assert env_of(container)["VOLUME_INTERVAL_SECONDS"] == "0"
    assert "KUBELET_ROOT" not in env_of(container)

    on = render({"agent": {"enabled": True, "volumeUsage": {"enabled": True, "kubeletRoot": "/data/kubelet"}}})
    agent = find(on, "DaemonSet", "gp-gpuportal-agent")["spec"]["template"]["spec"]
    container = agent["containers"][0]
    assert agent["securityContext"]["runAsUser"] == 0
    assert agent["securityContext"]["runAsNonRoot"] is False
    assert "fsGroup" not in agent["securityContext"]
    assert agent["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["DAC_READ_SEARCH"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["privileged"] is False
    volume = next(v for v in agent["volumes"] if v["name"] == "kubelet-pods")
    assert volume["hostPath"] == {"path": "/data/kubelet/pods", "type": "Directory"}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "kubelet-pods")
    assert mount == {
        "name": "kubelet-pods",
        "mountPath": "/host/kubelet/pods",
        "readOnly": True,
        "mountPropagation": "HostToContainer",
    }
    env = env_of(container)
    # The agent reads <KUBELET_ROOT>/pods: the mount above.
    assert env["KUBELET_ROOT"] == "/host/kubelet"
    assert env["VOLUME_INTERVAL_SECONDS"] == "60"
    assert env["VOLUME_MAX_ENTRIES"] == "200000"
    assert agent["automountServiceAccountToken"] is False


# --- bad values are refused, with a message that names the value --------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"web": {"replicas": -1}},
            "at '/web/replicas': minimum: got -1, want 0",
            id="negative-web-replicas",
        ),
        pytest.param(
            {"worker": {"replicas": -3}},
            "at '/worker/replicas': minimum: got -3, want 0",
            id="negative-worker-replicas",
        ),
        pytest.param({"web": {"replicas": "two"}}, "/web/replicas", id="replicas-not-a-number"),
        pytest.param(
            {"secret": {"generateSecretKey": False}},
            "secret.secretKey is required when secret.existingSecret is empty",
            id="missing-secret-key",
        ),
        pytest.param({"secret": {"secretKey": "short"}}, "use at least 32 random characters", id="short-secret-key"),
        pytest.param(
            {
                "seed": {
                    "gpuTypes": [
                        {
                            "slug": "p100",
                            "display_name": "P100",
                            "node_label_key": "gputype",
                            "node_label_value": "p100",
                        }
                    ],
                    "defaultQuotas": [{"team": "vision", "gpu_type": "v100", "max_gpus": 4}],
                }
            },
            'seed.defaultQuotas[0].gpu_type "v100" is not a GPU type in seed.gpuTypes (known: p100)',
            id="unknown-gpu-type-in-quotas",
        ),
        pytest.param(
            {"seed": {"defaultQuotas": [{"team": "vision", "gpu_type": "k2", "max_gpus": 1}]}},
            'seed.defaultQuotas[0].gpu_type "k2" is not a GPU type in seed.gpuTypes (known: none)',
            id="quota-without-gpu-types",
        ),
        pytest.param(
            {
                "seed": {
                    "gpuTypes": [
                        {
                            "slug": "k2",
                            "display_name": "K2",
                            "node_label_key": "gputype",
                            "node_label_value": "k2",
                        },
                        {
                            "slug": "k2",
                            "display_name": "K2 again",
                            "node_label_key": "gputype",
                            "node_label_value": "k2",
                        },
                    ]
                }
            },
            'seed.gpuTypes[1].slug "k2" appears twice',
            id="duplicate-gpu-type",
        ),
        pytest.param(
            {
                "seed": {
                    "gpuTypes": [
                        {"slug": "k2", "display_name": "K2", "node_label_value": "grid"},
                        {
                            "slug": "k2-big",
                            "display_name": "K2 big",
                            "node_label_key": "gputype",
                            "node_label_value": "grid",
                        },
                    ]
                }
            },
            'seed.gpuTypes[1].node_label_value: gputype=grid is already the node label of GPU type "k2"',
            id="gpu-types-sharing-a-node-label",
        ),
        pytest.param(
            {"seed": {"defaultQuotas": [{"team": "vision", "gpu_type": "k2", "max_gpus": -1}]}},
            "at '/seed/defaultQuotas/0/max_gpus': minimum: got -1, want 0",
            id="negative-quota",
        ),
        pytest.param(
            {
                "seed": {
                    "gpuTypes": [{"slug": "P 100", "display_name": "x", "node_label_key": "k", "node_label_value": "v"}]
                }
            },
            "/seed/gpuTypes/0/slug",
            id="bad-gpu-type-slug",
        ),
        pytest.param(
            {"postgresql": {"enabled": False}},
            "postgresql.enabled is false, so an external database is needed",
            id="no-database",
        ),
        pytest.param(
            {"redis": {"enabled": False}},
            "redis.enabled is false, so an external Redis is needed",
            id="no-redis",
        ),
        pytest.param({"externalDatabase": {"url": "mysql://x@y/z"}}, "/externalDatabase/url", id="not-a-postgres-url"),
        pytest.param({"replicaCount": 2}, "additional properties 'replicaCount' not allowed", id="unknown-key"),
        pytest.param({"config": {"logLevel": "LOUD"}}, "/config/logLevel", id="bad-log-level"),
        pytest.param(
            {"config": {"workspaceStorageClass": "Fast SSD"}},
            "/config/workspaceStorageClass",
            id="bad-workspace-storage-class",
        ),
        pytest.param({"config": {"workspaceHomeGib": 0}}, "/config/workspaceHomeGib", id="zero-home-workspace"),
        pytest.param({"ingress": {"enabled": True, "hosts": []}}, "ingress.hosts is empty", id="ingress-without-hosts"),
        pytest.param({"seal": {"privateKey": TEST_SEAL["privateKey"]}}, "seal.publicKey is required", id="no-seal-key"),
        pytest.param(
            {"seal": {"publicKey": TEST_SEAL["publicKey"]}},
            "seal.privateKey or seal.existingSecret is required",
            id="no-private-seal-key",
        ),
        pytest.param(
            {"seal": {**TEST_SEAL, "existingSecret": "mine"}},
            "seal.privateKey and seal.existingSecret are both set",
            id="two-private-seal-keys",
        ),
        pytest.param({"seal": {**TEST_SEAL, "publicKey": "not-a-key"}}, "/seal/publicKey", id="malformed-seal-key"),
    ],
)
def test_bad_values_are_refused_with_a_clear_message(values: dict[str, Any], message: str) -> None:
    assert message in render_error(values)


# --- the schema and the documentation ----------------------------------------------------------------------

# Values whose content is passed through as Kubernetes wants it: documented as a whole, not key by key.
OPAQUE_KEYS = {
    "resources",
    "podSecurityContext",
    "securityContext",
    "nodeSelector",
    "affinity",
    "annotations",
}


def documented_keys(tree: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in OPAQUE_KEYS:
            keys.extend(documented_keys(value, f"{path}."))
        else:
            keys.append(path)
    return keys


def test_values_schema_is_a_valid_json_schema_and_accepts_the_defaults() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(yaml.safe_load((CHART_DIR / "values.yaml").read_text()))
    for path in CI_VALUES:
        # CI files are partial: they validate as overrides, key by key (additionalProperties still applies).
        for key in load_values(path):
            assert key in schema["properties"], f"{path.name}: {key}"


def test_every_value_is_commented_in_values_yaml_and_in_the_readme_table() -> None:
    text = (CHART_DIR / "values.yaml").read_text()
    lines = text.splitlines()
    readme = (CHART_DIR / "README.md").read_text()
    table_keys = set(re.findall(r"^\| `([^`]+)` \|", readme, flags=re.MULTILINE))
    keys = documented_keys(yaml.safe_load(text))
    missing_in_readme = [k for k in keys if k not in table_keys]
    assert not missing_in_readme, f"not in the helm/README.md values table: {missing_in_readme}"
    stale = sorted(table_keys - set(keys))
    assert not stale, f"in the helm/README.md table but not in values.yaml: {stale}"
    # Each key line has a comment right above it.
    line_of = key_lines(lines)
    uncommented = [k for k in keys if not lines[line_of[k] - 1].lstrip().startswith("#")]
    assert not uncommented, f"values.yaml keys without a comment: {uncommented}"


def key_lines(lines: list[str]) -> dict[str, int]:
    """Dotted path of every mapping key in a block-style YAML file -> its line index."""
    found: dict[str, int] = {}
    stack: list[tuple[int, str]] = []
    for index, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z0-9_.-]+):", line)
        if not match:
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group(2)))
        found.setdefault(".".join(name for _, name in stack), index)
    return found


def test_the_values_examples_in_the_readme_render() -> None:
    readme = (CHART_DIR.parent / "README.md").read_text()
    section = readme[readme.index("## Deploy to a cluster") : readme.index("## docker-compose")]
    examples = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL)]
    assert len(examples) >= 3
    merged: dict[str, Any] = {}
    for example in examples:
        manifests = render(example)
        assert deployment(manifests, "web")
        merged.update(example)
    assert deployment(render(merged), "web")


# --- the provisioner's admission guard as a webhook (Kubernetes < 1.26) ----------------------------------


def test_the_guard_webhook_is_rendered_where_the_policy_is_not_and_matches_the_portals_own() -> None:
    from admission.rules import Guard, webhook_configuration

    manifests = render({})  # the renderer's cluster serves no ValidatingAdmissionPolicy
    assert not [m for m in manifests if m.kind == "ValidatingAdmissionPolicy"]
    rendered = find(manifests, "ValidatingWebhookConfiguration", "gp-gpuportal-admission-guard")
    ca = rendered["webhooks"][0]["clientConfig"]["caBundle"]
    tls = find(manifests, "Secret", "gp-gpuportal-admission-guard-tls")
    assert tls["data"]["ca.crt"] == ca
    guard = Guard(
        user="system:serviceaccount:portal:gp-gpuportal-provisioner",
        prefix="gpuportal-",
        roles=frozenset({"gp-gpuportal-workloads", "gp-gpuportal-reader", "gp-gpuportal-proxy"}),
    )
    service = {"name": "gp-gpuportal-admission-guard", "namespace": "portal", "port": 443}
    expected = webhook_configuration(name="x", guard=guard, ca_bundle=ca, service=service)
    assert rendered["webhooks"] == expected["webhooks"]
    guard_pod = find(manifests, "Deployment", "gp-gpuportal-admission-guard")["spec"]["template"]["spec"]
    assert guard_pod["automountServiceAccountToken"] is False
    assert guard_pod["containers"][0]["command"][:3] == ["python", "-m", "admission"]
    assert find(manifests, "NetworkPolicy", "gp-gpuportal-admission-guard")["spec"]["ingress"][0]["ports"] == [
        {"port": "https", "protocol": "TCP"}
    ]


@pytest.mark.parametrize(
    ("values", "webhook"),
    [
        ({"rbac": {"admissionWebhook": "never"}}, False),
        ({"rbac": {"admissionPolicy": "always"}}, False),
        ({"rbac": {"admissionPolicy": "always", "admissionWebhook": "always"}}, True),
        ({"provisioner": {"enabled": False}}, False),
    ],
)
def test_the_guard_webhook_is_left_out_where_asked_or_where_the_policy_serves(values, webhook) -> None:
    kinds = [m.kind for m in render(values)]
    assert ("ValidatingWebhookConfiguration" in kinds) is webhook


# --- where the hook Jobs run, and catalog entries that know their base path ---------------------------------


def test_the_hook_jobs_take_a_node_selector_tolerations_and_affinity() -> None:
    # Every other pod of the chart can be placed; the migration and seed pods could not (on a cluster whose
    # GPU nodes are tainted or whose system nodes are labelled, they landed wherever there was room).
    placement = {
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    }  # fmt: skip
    manifests = render({"migrations": placement, "seed": placement})
    for job in ("gp-gpuportal-migrate", "gp-gpuportal-seed"):
        pod = find(manifests, "Job", job)["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == placement["nodeSelector"], job
        assert pod["tolerations"] == placement["tolerations"], job
        assert pod["affinity"] == placement["affinity"], job
    default = render({})
    for job in ("gp-gpuportal-migrate", "gp-gpuportal-seed"):
        pod = find(default, "Job", job)["spec"]["template"]["spec"]
        assert not {"nodeSelector", "tolerations", "affinity"} & set(pod), job


def test_a_catalog_entry_in_the_seed_may_say_how_its_app_learns_its_base_path() -> None:
    # JupyterLab behind /w/<uid>/ needs --ServerApp.base_url: without base_url_args the schema refused the
    # entry, and a chart-installed portal could not offer a working notebook.
    lab = {
        "reference": "registry.example.org/jupyter/lab:4",
        "title": "JupyterLab",
        "suits": "service",
        "default_port": 8888,
        "base_url_args": ["--ServerApp.base_url={base_url}"],
        "base_url_env": {"APP_PREFIX": "{base_path}"},
        "read_only_root": False,
    }
    seed = find(render({"seed": {"images": [lab]}}), "ConfigMap", "gp-gpuportal-seed")
    [stored] = yaml.safe_load(seed["data"]["seed.yaml"])["images"]
    assert stored["base_url_args"] == ["--ServerApp.base_url={base_url}"]
    assert stored["base_url_env"] == {"APP_PREFIX": "{base_path}"}
    assert "base_url_args" in render_error({"seed": {"images": [{**lab, "base_url_args": "--x"}]}})
