"""The provisioner's admission guard, enforced by the real API server (1.20, no ValidatingAdmissionPolicy):
the provisioner's own token cannot make a namespace outside the portal's prefix or bind its roles outside
team namespaces; normal provisioning and everyone else's requests go on; a guard that is down holds up
nothing in the cluster's own namespaces and lets none of the provisioner's requests through elsewhere."""

from __future__ import annotations

import contextlib
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


@pytest.fixture
def provisioner(portal_account: PortalIdentity) -> Iterator[k8s.ApiClient]:
    if not portal_account.admission_guard:
        pytest.skip("this cluster runs no admission guard (an external cluster: the chart's webhook is for those)")
    api = config.new_client_from_config(config_file=str(portal_account.kubeconfigs["provisioner"]))
    try:
        yield api
    finally:
        api.close()


def _refusal(call) -> str:
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status in (400, 403, 500), refused.value.body
    return refused.value.body or ""


def _grab(portal_account: PortalIdentity, namespace: str) -> k8s.V1RoleBinding:
    """What a stolen provisioner token would do: bind the workloads role to itself somewhere else."""
    return objects.make_role_binding(
        namespace,
        cluster_role=portal_account.workloads_role,
        service_account=portal_account.service_accounts["provisioner"],
        name=f"grab-{uuid.uuid4().hex[:6]}",
    )


def test_the_provisioners_token_cannot_leave_the_team_namespaces(portal_account, provisioner, kube_api):
    core, rbac = k8s.CoreV1Api(provisioner), k8s.RbacAuthorizationV1Api(provisioner)
    squat = f"squat-{uuid.uuid4().hex[:6]}"
    body = _refusal(lambda: core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=squat))))
    assert f"may act only in namespaces named {portal_account.namespace_prefix}" in body
    for namespace in ("kube-system", "default"):
        body = _refusal(lambda ns=namespace: rbac.create_namespaced_role_binding(ns, _grab(portal_account, ns)))
        assert "may act only in namespaces named" in body, namespace
    quota = k8s.V1ResourceQuota(
        metadata=k8s.V1ObjectMeta(name="starve"), spec=k8s.V1ResourceQuotaSpec(hard={"pods": "0"})
    )
    assert "may act only" in _refusal(lambda: core.create_namespaced_resource_quota("kube-system", quota))
    # Nor may it make kube-system look like a team's, or take the guard's label off a namespace.
    relabel = {"metadata": {"labels": {"gpuportal.io/admission-guard": None, "x": "y"}}}
    assert "may act only" in _refusal(lambda: core.patch_namespace("kube-system", relabel))
    admin_rbac = k8s.RbacAuthorizationV1Api(kube_api)
    assert not [
        b for b in admin_rbac.list_namespaced_role_binding("kube-system").items if b.metadata.name.startswith("grab-")
    ]
    with pytest.raises(ApiException) as gone:
        k8s.CoreV1Api(kube_api).read_namespace(squat)
    assert gone.value.status == 404


def test_provisioning_still_works_and_binds_only_the_portals_roles(portal_account, provisioner, kube_api, db):
    from tests.engine.factories import TeamFactory

    team = TeamFactory(slug=f"guard-{uuid.uuid4().hex[:6]}")
    namespace = provision_now(portal_account, team)
    try:
        assert namespace.startswith(portal_account.namespace_prefix)
        rbac = k8s.RbacAuthorizationV1Api(provisioner)
        # Inside its own team namespace, still only its three roles: `view` is refused (RBAC and the guard).
        other_role = objects.make_role_binding(
            namespace, cluster_role="view", service_account=portal_account.service_accounts["provisioner"], name="v"
        )
        _refusal(lambda: rbac.create_namespaced_role_binding(namespace, other_role))
    finally:
        with contextlib.suppress(Exception):
            k8s.CoreV1Api(kube_api).delete_namespace(namespace, propagation_policy="Background")


def test_other_users_are_not_checked_by_the_guard(portal_account, provisioner, kube_api):
    core, rbac = k8s.CoreV1Api(kube_api), k8s.RbacAuthorizationV1Api(kube_api)
    name = f"ops-{uuid.uuid4().hex[:6]}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    try:
        binding = objects.make_role_binding(name, cluster_role="view", service_account=f"{name}/default", name="ops")
        rbac.create_namespaced_role_binding(name, binding)
    finally:
        core.delete_namespace(name, propagation_policy="Background")


def test_a_guard_that_is_down_wedges_nothing_of_the_cluster_and_lets_nothing_through(
    portal_account, provisioner, kube_api, kube_cluster: Any
):
    if not getattr(kube_cluster, "owns_processes", False):
        pytest.skip("needs a cluster this session started (it stops the guard)")
    admin_rbac = k8s.RbacAuthorizationV1Api(kube_api)
    rbac = k8s.RbacAuthorizationV1Api(provisioner)
    kube_cluster.stop_component("admission-guard")
    try:
        # The cluster's own namespaces (labelled lenient) are written as ever.
        mine = objects.make_role_binding(
            "kube-system",
            cluster_role="view",
            service_account="kube-system/default",
            name=f"ops-{uuid.uuid4().hex[:6]}",
        )
        admin_rbac.create_namespaced_role_binding("kube-system", mine)
        admin_rbac.delete_namespaced_role_binding(mine.metadata.name, "kube-system")
        # Everywhere else the provisioner's requests fail closed.
        body = _refusal(lambda: rbac.create_namespaced_role_binding("default", _grab(portal_account, "default")))
        assert "webhook" in body
    finally:
        kube_cluster.start_component("admission-guard")
