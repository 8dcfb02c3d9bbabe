"""No road from the portal to cluster-admin, proven against the real API server (the local GPU cluster).

Each of the portal's identities (helm/files/rbac-rules.yaml) is asked, as `kubectl auth can-i --as=...`
asks (a SubjectAccessReview), and really tries, with its own token, the moves that turn a stolen token
into cluster-admin: binding the workloads role in kube-system, `default` or another release's namespace,
creating a namespace, running a Job outside the team namespaces. The web's identity may write nothing at
all: every write verb on every resource the API server serves is asked.

The provisioner is the one identity RBAC cannot confine (Kubernetes has no prefix rule for `create
namespaces` or `create rolebindings`); what it can do is shown here too, and its code's prefix check is
tested in tests/engine/test_team_namespace.py. The local cluster (1.20) has no ValidatingAdmissionPolicy.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config
from kubernetes.client.exceptions import ApiException

from devtools.engine import PortalIdentity, provision_now
from jobs.kube import objects

pytestmark = pytest.mark.cluster

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
# Granted to every authenticated user by Kubernetes' own system:basic-user role; they change nothing.
HARMLESS = {"selfsubjectaccessreviews", "selfsubjectrulesreviews"}


def user(identity: PortalIdentity, which: str) -> str:
    namespace, name = identity.service_accounts[which].split("/")
    return f"system:serviceaccount:{namespace}:{name}"


def can_i(admin: Any, who: str, verb: str, resource: str, namespace: str = "", group: str = "", name: str = "") -> bool:
    """`kubectl auth can-i VERB RESOURCE -n NAMESPACE --as=WHO`, as the API server decides it."""
    review = k8s.V1SubjectAccessReview(
        spec=k8s.V1SubjectAccessReviewSpec(
            user=who,
            groups=["system:serviceaccounts", "system:authenticated"],
            resource_attributes=k8s.V1ResourceAttributes(
                verb=verb, resource=resource, namespace=namespace or None, group=group, name=name or None
            ),
        )
    )
    return bool(k8s.AuthorizationV1Api(admin).create_subject_access_review(review).status.allowed)


def served_resources(admin: Any) -> list[tuple[str, str, bool, set[str]]]:
    """(group, resource, namespaced, verbs) of every resource the API server serves (no subresources)."""
    found = []
    for r in k8s.CoreV1Api(admin).get_api_resources().resources:
        found.append(("", r.name, r.namespaced, set(r.verbs or ())))
    for group in k8s.ApisApi(admin).get_api_versions().groups:
        version = group.preferred_version.group_version
        method, url, headers, _, _ = admin.param_serialize("GET", f"/apis/{version}", auth_settings=["BearerToken"])
        response = admin.call_api(method, url, header_params=headers)
        response.read()
        listing = json.loads(response.data)
        for r in listing["resources"]:
            found.append((group.name, r["name"], r["namespaced"], set(r.get("verbs") or ())))
    return [f for f in found if "/" not in f[1] and f[1] not in HARMLESS]


@pytest.fixture
def escalation_scene(portal_account: PortalIdentity, kube_api: Any, db: Any) -> Iterator[dict[str, Any]]:
    """A provisioned team namespace, and a namespace of another release (its own prefix), made by admin."""
    from tests.engine.factories import TeamFactory

    team = TeamFactory(slug=f"esc-{uuid.uuid4().hex[:6]}")
    team_namespace = provision_now(portal_account, team)
    other = f"otherrelease-team-{uuid.uuid4().hex[:6]}"
    core = k8s.CoreV1Api(kube_api)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=other)))
    clients = {
        which: config.new_client_from_config(config_file=str(path))
        for which, path in portal_account.kubeconfigs.items()
    }
    try:
        yield {"team": team_namespace, "other": other, "clients": clients}
    finally:
        for api in clients.values():
            api.close()
        for namespace in (team_namespace, other):
            with contextlib.suppress(Exception):
                core.delete_namespace(namespace, propagation_policy="Background")


def _refused(call) -> int:
    with pytest.raises(ApiException) as refused:
        call()
    return refused.value.status


def _job(namespace: str) -> dict:
    spec = objects.WorkloadSpec(
        uid=uuid.uuid4().hex[:10], name="escalate", kind="batch", team_slug="x", username="u", namespace=namespace,
        image="ubuntu", gpu_type=objects.GpuTypeSpec("p100", "gputype", "p100", "nvidia.com/gpu", 1000, 1024),
        gpu_count=1, time_limit_seconds=60,
    )  # fmt: skip
    return objects.make_job(spec)


@pytest.mark.parametrize("which", ["engine", "web", "proxy"])
def test_no_reachable_identity_can_bind_or_run_anything_outside_team_namespaces(
    escalation_scene, portal_account, kube_api, which
):
    who = user(portal_account, which)
    api = escalation_scene["clients"][which]
    rbac, core, batch = k8s.RbacAuthorizationV1Api(api), k8s.CoreV1Api(api), k8s.BatchV1Api(api)
    targets = ["kube-system", "default", escalation_scene["other"], escalation_scene["team"]]
    for namespace in targets:
        # The attack of issue 18: bind the workloads role to oneself, then run a Job there.
        assert not can_i(kube_api, who, "create", "rolebindings", namespace, group="rbac.authorization.k8s.io")
        binding = objects.make_role_binding(
            namespace,
            cluster_role=portal_account.workloads_role,
            service_account=portal_account.service_accounts[which],
            name=f"escalate-{uuid.uuid4().hex[:4]}",
        )
        assert _refused(lambda ns=namespace, b=binding: rbac.create_namespaced_role_binding(ns, b)) == 403
        assert not can_i(kube_api, who, "bind", "clusterroles", group="rbac.authorization.k8s.io", name="admin")
    for namespace in targets[:3]:
        assert not can_i(kube_api, who, "create", "jobs", namespace, group="batch")
        assert _refused(lambda ns=namespace: batch.create_namespaced_job(ns, _job(ns))) == 403
        assert not can_i(kube_api, who, "create", "pods", namespace)
    # Namespaces: none at all, prefixed or not.
    for name in (f"evil-{uuid.uuid4().hex[:6]}", f"{portal_account.namespace_prefix}evil-{uuid.uuid4().hex[:4]}"):
        assert not can_i(kube_api, who, "create", "namespaces")
        namespace = k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name))
        assert _refused(lambda ns=namespace: core.create_namespace(ns)) == 403
    # Nor any cluster-wide grant, nor a token of another account.
    for verb, resource in (("create", "clusterrolebindings"), ("create", "clusterroles"), ("escalate", "clusterroles")):
        assert not can_i(kube_api, who, verb, resource, group="rbac.authorization.k8s.io")
    for namespace in targets:
        assert not can_i(kube_api, who, "create", "serviceaccounts/token", namespace)
        assert not can_i(kube_api, who, "get", "secrets", namespace)


def test_the_engine_writes_only_workloads_inside_its_team_namespaces(escalation_scene, portal_account, kube_api):
    who = user(portal_account, "engine")
    team = escalation_scene["team"]
    assert can_i(kube_api, who, "create", "jobs", team, group="batch")
    assert can_i(kube_api, who, "create", "deployments", team, group="apps")
    assert can_i(kube_api, who, "delete", "services", team)
    # It cannot change the quota backstop, the NetworkPolicy or the LimitRange the provisioner set.
    assert not can_i(kube_api, who, "update", "resourcequotas", team)
    assert not can_i(kube_api, who, "update", "networkpolicies", team, group="networking.k8s.io")
    assert not can_i(kube_api, who, "delete", "limitranges", team)
    assert not can_i(kube_api, who, "create", "pods", team)
    assert not can_i(kube_api, who, "patch", "namespaces", name=team)


def test_the_web_identity_writes_nothing_at_all(escalation_scene, portal_account, kube_api):
    who = user(portal_account, "web")
    team = escalation_scene["team"]
    allowed = []
    for group, resource, namespaced, verbs in served_resources(kube_api):
        for verb in sorted(set(WRITE_VERBS) & verbs):
            where = [team, "kube-system", "default"] if namespaced else [""]
            allowed += [(verb, group, resource, ns) for ns in where if can_i(kube_api, who, verb, resource, ns, group)]
    # Not even users' stored secrets: the web seals them for the engine, which writes them. Its one "create"
    # is a TokenReview (asks who a node agent's token belongs to; nothing is stored).
    assert allowed == [("create", "authentication.k8s.io", "tokenreviews", "")]
    for verb in ("get", "create", "update", "delete"):
        assert not can_i(kube_api, who, verb, "secrets", team)
    # What it may do: read its team's pods, logs and events.
    assert can_i(kube_api, who, "get", "pods", team, name="x")
    assert can_i(kube_api, who, "get", "pods/log", team)
    assert can_i(kube_api, who, "list", "events", team)
    assert can_i(kube_api, who, "list", "endpoints", team)
    assert not can_i(kube_api, who, "list", "pods", "kube-system")
    # The agents' pods: one by name in the portal's namespace (the agent's), never a list, never elsewhere.
    assert can_i(kube_api, who, "get", "pods", portal_account.system_namespace, name="agent-x")
    assert not can_i(kube_api, who, "list", "pods", portal_account.system_namespace)
    assert not can_i(kube_api, who, "get", "pods", "kube-system", name="x")
    # And really: with its own token it cannot create a ConfigMap or a Secret in its team's namespace.
    core = k8s.CoreV1Api(escalation_scene["clients"]["web"])
    body = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="probe"))
    assert _refused(lambda: core.create_namespaced_config_map(team, body)) == 403
    secret = objects.make_secret(namespace=team, name="secret-probe", value="x", team_slug="t", instance="i")
    assert _refused(lambda: core.create_namespaced_secret(team, secret)) == 403


def test_the_provisioner_can_make_namespaces_but_never_run_or_grant_more(escalation_scene, portal_account, kube_api):
    """What RBAC leaves to the provisioner's code (prefix) and, on 1.30+, to the chart's admission policy."""
    who = user(portal_account, "provisioner")
    for namespace in ("kube-system", "default", escalation_scene["other"], escalation_scene["team"]):
        for resource, group in (("jobs", "batch"), ("deployments", "apps"), ("pods", ""), ("daemonsets", "apps")):
            assert not can_i(kube_api, who, "create", resource, namespace, group=group), (resource, namespace)
        assert not can_i(kube_api, who, "get", "secrets", namespace)
        assert not can_i(kube_api, who, "create", "serviceaccounts/token", namespace)
    for role in ("admin", "edit", "cluster-admin"):
        assert not can_i(kube_api, who, "bind", "clusterroles", group="rbac.authorization.k8s.io", name=role)
    assert not can_i(kube_api, who, "create", "clusterrolebindings", group="rbac.authorization.k8s.io")
    assert not can_i(kube_api, who, "escalate", "clusterroles", group="rbac.authorization.k8s.io")
    # Binding `admin` with its own token is refused by RBAC's escalation check.
    rbac = k8s.RbacAuthorizationV1Api(escalation_scene["clients"]["provisioner"])
    grab = objects.make_role_binding(
        escalation_scene["other"], cluster_role="admin", service_account=portal_account.service_accounts["provisioner"]
    )
    assert _refused(lambda: rbac.create_namespaced_role_binding(escalation_scene["other"], grab)) == 403
    # The residual power RBAC cannot narrow, stated so a reader of this test knows it is known.
    assert can_i(kube_api, who, "create", "namespaces")
    assert can_i(kube_api, who, "create", "rolebindings", "kube-system", group="rbac.authorization.k8s.io")


def test_the_provisioned_namespace_holds_isolation_quota_and_pod_security(escalation_scene, kube_api):
    team = escalation_scene["team"]
    core = k8s.CoreV1Api(kube_api)
    labels = core.read_namespace(team).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    [limits] = core.list_namespaced_limit_range(team).items
    assert limits.spec.limits[0].max == {"ephemeral-storage": "20Gi"}
    [policy] = k8s.NetworkingV1Api(kube_api).list_namespaced_network_policy(team).items
    assert policy.spec.policy_types == ["Ingress", "Egress"]
    blocked = policy.spec.egress[2].to[0].ip_block
    assert "169.254.169.254/32" in blocked._except
    bindings = {b.metadata.name for b in k8s.RbacAuthorizationV1Api(kube_api).list_namespaced_role_binding(team).items}
    assert bindings == {objects.ROLE_BINDING_NAME, objects.READER_BINDING_NAME, objects.PROXY_BINDING_NAME}


def test_the_proxy_reads_endpoints_in_team_namespaces_and_nowhere_else(escalation_scene, portal_account, kube_api):
    """The proxy's own token: a team namespace's EndpointSlices through the proxy's code path, and a 403 in
    kube-system and in namespaces the portal does not own (it holds no cluster-wide binding at all)."""
    from jobs.kube import client as kube

    api = escalation_scene["clients"]["proxy"]
    team = escalation_scene["team"]
    deadline = time.monotonic() + 10  # RBAC learns of the provisioner's new RoleBinding within a moment
    while True:
        try:
            assert kube.ready_endpoint(team, "no-such-service", api=api) is None  # read, and nothing ready
            break
        except ApiException as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    for namespace in ("kube-system", "default", escalation_scene["other"]):
        with pytest.raises(ApiException) as refused:
            kube.ready_endpoint(namespace, "kube-dns", api=api)
        assert refused.value.status == 403, namespace
        assert _refused(lambda ns=namespace: k8s.CoreV1Api(api).list_namespaced_service(ns)) == 403
    # Nor cluster-wide, nor anything but services and their endpoints in its team namespaces.
    who = user(portal_account, "proxy")
    assert not can_i(kube_api, who, "list", "endpointslices", group="discovery.k8s.io")
    assert not can_i(kube_api, who, "list", "services")
    for resource in ("pods", "pods/log", "events", "secrets", "configmaps"):
        assert not can_i(kube_api, who, "get", resource, team), resource


def test_the_provisioner_gives_namespaces_made_before_the_proxys_binding(escalation_scene, portal_account, kube_api):
    """An upgrade from the cluster-wide proxy: a team namespace without the proxy's RoleBinding gets it when
    the provisioner starts (existing_namespaces_refresh), with the provisioner's own token; namespaces that
    are not this installation's are left alone."""
    from jobs.services.provisioning import existing_namespaces_refresh

    team, rbac = escalation_scene["team"], k8s.RbacAuthorizationV1Api(kube_api)
    rbac.delete_namespaced_role_binding(objects.PROXY_BINDING_NAME, team)
    done = existing_namespaces_refresh(api=escalation_scene["clients"]["provisioner"])
    assert team in done
    assert escalation_scene["other"] not in done
    binding = rbac.read_namespaced_role_binding(objects.PROXY_BINDING_NAME, team)
    assert binding.role_ref.name == portal_account.proxy_role
    assert [s.name for s in binding.subjects] == [portal_account.service_accounts["proxy"].split("/")[1]]
