"""The provisioner's admission guard decides from the AdmissionReview alone (admission/rules.py)."""

from __future__ import annotations

import re

import pytest

from admission.rules import Guard, guard_from_path, review_answer, webhook_configuration

GUARD = Guard(
    user="system:serviceaccount:portal:gp-provisioner", prefix="gpuportal-", roles=frozenset({"gp-w", "gp-r", "gp-p"})
)


def _request(resource: str, *, user: str = GUARD.user, namespace: str = "", name: str = "", role: str = "gp-w") -> dict:
    body: dict = {"metadata": {"name": name}}
    if resource == "rolebindings":
        body["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
    return {
        "uid": "u-1", "operation": "CREATE", "userInfo": {"username": user}, "resource": {"resource": resource},
        "namespace": namespace, "name": name, "object": body,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("request_", "allowed"),
    [
        (_request("namespaces", name="gpuportal-lab"), True),
        (_request("namespaces", name="kube-evil"), False),
        (_request("rolebindings", namespace="gpuportal-lab", name="b"), True),
        (_request("rolebindings", namespace="kube-system", name="b"), False),
        (_request("rolebindings", namespace="gpuportal-lab", name="b", role="admin"), False),
        (_request("resourcequotas", namespace="default", name="q"), False),
        (_request("networkpolicies", namespace="gpuportal-lab", name="n"), True),
        # Anyone else: RBAC decides, not the guard.
        (_request("rolebindings", user="admin", namespace="kube-system", name="b", role="admin"), True),
        (_request("namespaces", user="system:serviceaccount:portal:gp", name="kube-evil"), True),
    ],
)
def test_the_guard_allows_the_provisioner_only_its_prefix_and_roles(request_, allowed):
    answer = review_answer({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request_}, GUARD)
    assert answer["response"]["uid"] == "u-1"
    assert answer["response"]["allowed"] is allowed
    if not allowed:
        assert answer["response"]["status"]["code"] == 403


def test_the_path_carries_the_guard_and_nothing_else_passes_for_one():
    assert guard_from_path(GUARD.path()) == GUARD
    # Kubernetes takes only DNS-subdomain path segments; the prefix ends with "-", role names may hold ":".
    odd = Guard(user="system:serviceaccount:ns:sa", prefix="gpuportal-", roles=frozenset({"org:workloads"}))
    for segment in odd.path().strip("/").split("/"):
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", segment), segment
    assert guard_from_path(odd.path()) == odd
    for bad in (
        "/",
        "/provisioner/a/b/c",
        "/other/a/b/mfxa/mfxa/mfxa",
        "/provisioner/a//mfxa/mfxa",
        "/provisioner/a/b/1/2",
    ):
        assert guard_from_path(bad) is None, bad


def test_the_registration_fails_closed_except_for_objects_in_lenient_namespaces():
    config = webhook_configuration(name="g", guard=GUARD, ca_bundle="Q0E=", url="https://127.0.0.1:9443")
    policies = {w["name"].split(".")[0]: w["failurePolicy"] for w in config["webhooks"]}
    assert policies == {"namespaces": "Fail", "objects": "Fail", "objects-lenient": "Ignore"}
    assert all(w["clientConfig"]["url"] == "https://127.0.0.1:9443" + GUARD.path() for w in config["webhooks"])
    namespaces = config["webhooks"][0]
    assert "namespaceSelector" not in namespaces
    assert "objectSelector" not in namespaces
