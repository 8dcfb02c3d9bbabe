"""The portal's own identities in a cluster: four service accounts (engine, web, proxy, provisioner) with
exactly the rules of helm/files/rbac-rules.yaml (the web also checks node agents' tokens: agent-review,
agent-pods). The Helm chart creates the same objects; tests and
`make run` use this to run the portal's processes as those accounts instead of as cluster admin.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

RULES_FILE = Path(__file__).resolve().parents[1] / "helm" / "files" / "rbac-rules.yaml"

# Identity -> (its ServiceAccount's name suffix, the rule list bound to it cluster-wide or None). The web and
# the proxy have nothing cluster-wide: the provisioner binds `reader` and `proxy` to them in team namespaces.
IDENTITIES = {
    "engine": ("", "engine"),
    "web": ("-web", None),
    "proxy": ("-proxy", None),
    "provisioner": ("-provisioner", "provisioner"),
}


@dataclass(frozen=True)
class PortalNames:
    """The names the chart gives an installation's accounts and roles ("<fullname>..." there)."""

    fullname: str

    def account(self, identity: str) -> str:
        return f"{self.fullname}{IDENTITIES[identity][0]}"

    def role(self, rules: str) -> str:
        return f"{self.fullname}-{rules}"


def load_rules(workloads_role: str, reader_role: str = "", proxy_role: str = "") -> dict[str, list[dict[str, Any]]]:
    text = (
        RULES_FILE.read_text()
        .replace("{{WORKLOADS_ROLE}}", workloads_role)
        .replace("{{READER_ROLE}}", reader_role)
        .replace("{{PROXY_ROLE}}", proxy_role)
    )
    return yaml.safe_load(text)


def _policy_rules(rules: list[dict[str, Any]]) -> list[k8s.V1PolicyRule]:
    return [
        k8s.V1PolicyRule(
            api_groups=r.get("apiGroups"),
            resources=r.get("resources"),
            verbs=r["verbs"],
            resource_names=r.get("resourceNames"),
        )
        for r in rules
    ]


def _apply(create, replace) -> None:
    try:
        create()
    except ApiException as exc:
        if exc.status != 409:
            raise
        replace()


def install_portal_identity(
    admin: k8s.ApiClient, *, namespace: str, fullname: str, timeout: float = 60
) -> dict[str, str]:
    """Create the four accounts (engine, web, proxy, provisioner), the five ClusterRoles and the two
    cluster-wide bindings, as the chart does; return each identity's token."""
    core, rbac = k8s.CoreV1Api(admin), k8s.RbacAuthorizationV1Api(admin)
    names = PortalNames(fullname)
    rules = load_rules(names.role("workloads"), names.role("reader"), names.role("proxy"))
    _apply(lambda: core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace))), lambda: None)
    for key, role_rules in rules.items():
        name = names.role(key)
        role = k8s.V1ClusterRole(metadata=k8s.V1ObjectMeta(name=name), rules=_policy_rules(role_rules))
        _apply(
            lambda role=role: rbac.create_cluster_role(role),
            lambda role=role, name=name: rbac.replace_cluster_role(name, role),
        )
    for identity, (_, bound) in IDENTITIES.items():
        account = names.account(identity)
        _apply(
            lambda account=account: core.create_namespaced_service_account(
                namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=account))
            ),
            lambda: None,
        )
        if bound is None:
            continue
        binding = k8s.V1ClusterRoleBinding(
            metadata=k8s.V1ObjectMeta(name=names.role(bound)),
            role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=names.role(bound)),
            subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name=account, namespace=namespace)],
        )
        _apply(
            lambda binding=binding: rbac.create_cluster_role_binding(binding),
            lambda binding=binding: rbac.replace_cluster_role_binding(binding.metadata.name, binding),
        )
    install_agent_review(admin, namespace=namespace, fullname=names.fullname)
    return {identity: account_token(core, namespace, names.account(identity), timeout) for identity in IDENTITIES}


def install_agent_review(
    admin: k8s.ApiClient, *, namespace: str, fullname: str, agent_namespace: str | None = None
) -> None:
    """Let the web check node agents' own tokens, as the chart does: `agent-review` cluster-wide and
    `agent-pods` in the agent's namespace (the portal's own namespace unless said otherwise)."""
    rbac = k8s.RbacAuthorizationV1Api(admin)
    names = PortalNames(fullname)
    web = [k8s.RbacV1Subject(kind="ServiceAccount", name=names.account("web"), namespace=namespace)]
    ref = "rbac.authorization.k8s.io"
    cluster_binding = k8s.V1ClusterRoleBinding(
        metadata=k8s.V1ObjectMeta(name=names.role("agent-review")),
        role_ref=k8s.V1RoleRef(api_group=ref, kind="ClusterRole", name=names.role("agent-review")),
        subjects=web,
    )
    _apply(
        lambda: rbac.create_cluster_role_binding(cluster_binding),
        lambda: rbac.replace_cluster_role_binding(cluster_binding.metadata.name, cluster_binding),
    )
    where = agent_namespace or namespace
    binding = k8s.V1RoleBinding(
        metadata=k8s.V1ObjectMeta(name=names.role("agent-pods"), namespace=where),
        role_ref=k8s.V1RoleRef(api_group=ref, kind="ClusterRole", name=names.role("agent-pods")),
        subjects=web,
    )
    _apply(
        lambda: rbac.create_namespaced_role_binding(where, binding),
        lambda: rbac.replace_namespaced_role_binding(binding.metadata.name, where, binding),
    )


def account_token(core: k8s.CoreV1Api, namespace: str, account: str, timeout: float = 60) -> str:
    # Kubernetes 1.20 puts the account's token in a secret once the token controller gets to it.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sa = core.read_namespaced_service_account(account, namespace)
        for ref in sa.secrets or []:
            secret = core.read_namespaced_secret(ref.name, namespace)
            if secret.type == "kubernetes.io/service-account-token" and (secret.data or {}).get("token"):
                return base64.b64decode(secret.data["token"]).decode()
        time.sleep(0.1)
    raise TimeoutError(f"no token for service account {namespace}/{account} after {timeout:.0f}s")


def kubeconfig_for_token(*, server: str, ca_pem: bytes, token: str, name: str = "gpuportal") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": name,
                    "cluster": {"server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()},
                }
            ],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
        }
    )
