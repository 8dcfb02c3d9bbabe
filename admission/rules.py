"""What the provisioner may do, decided from one AdmissionReview request. Pure: no I/O, no Django.

The same rules as the chart's ValidatingAdmissionPolicy: the provisioner's account may create or change
namespaces named with the portal's prefix only, act (quotas, limit ranges, network policies, role
bindings) only inside such namespaces, and bind only the portal's three ClusterRoles. Every other user's
request is allowed: RBAC already decides what they may do, and 1.20 has no matchConditions to keep their
requests from reaching this webhook.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

# Objects in a namespace labelled `<GUARD_LABEL>=lenient` are checked by a webhook that fails open
# (Ignore): the cluster's own namespaces, whose writes must never wait on the portal. Everything else the
# guard checks fails closed while it cannot be reached.
GUARD_LABEL = "gpuportal.io/admission-guard"
LENIENT = "lenient"


@dataclass(frozen=True)
class Guard:
    """Whose requests are checked, and against what: the provisioner's user name, the team prefix, and the
    ClusterRoles it may bind."""

    user: str
    prefix: str
    roles: frozenset[str]

    def path(self) -> str:
        """The webhook path that carries this guard (the registration, which only an admin can write, is
        where the guard's settings live; the server itself keeps no state):
        `/provisioner/<namespace>/<account>/<prefix>/<role>...`, the prefix and each role in lowercase
        base32, since the API server takes only DNS-subdomain path segments (a prefix ends with "-")."""
        _, _, rest = self.user.partition("system:serviceaccount:")
        namespace, _, account = rest.partition(":")
        encoded = "/".join(segment_encode(v) for v in [self.prefix, *sorted(self.roles)])
        return f"/provisioner/{namespace}/{account}/{encoded}"


def segment_encode(value: str) -> str:
    """Lowercase unpadded base32: a valid path segment for any value (helm: `b32enc | lower | trimAll "="`)."""
    return base64.b32encode(value.encode()).decode().lower().rstrip("=")


def _segment_decode(segment: str) -> str:
    return base64.b32decode(segment.upper() + "=" * (-len(segment) % 8)).decode()


def guard_from_path(path: str) -> Guard | None:
    """The Guard a request path names (Guard.path)."""
    parts = path.split("?")[0].strip("/").split("/")
    if len(parts) < 5 or parts[0] != "provisioner" or not all(parts[1:]):
        return None
    namespace, account = parts[1], parts[2]
    try:
        prefix, *roles = (_segment_decode(p) for p in parts[3:])
    except (ValueError, UnicodeDecodeError):
        return None
    if not prefix:
        return None
    return Guard(user=f"system:serviceaccount:{namespace}:{account}", prefix=prefix, roles=frozenset(roles))


def _namespace_of(request: dict[str, Any], resource: str, body: dict[str, Any]) -> str:
    """The namespace the request acts in (a namespace's own name for one)."""
    if resource == "namespaces":
        return request.get("name") or (body.get("metadata") or {}).get("name") or ""
    return request.get("namespace") or ""


def refusal(request: dict[str, Any], guard: Guard) -> str | None:
    """Why the guard refuses this request, or None to allow it."""
    if (request.get("userInfo") or {}).get("username") != guard.user:
        return None
    resource = (request.get("resource") or {}).get("resource", "")
    body = request.get("object") or {}
    where = _namespace_of(request, resource, body)
    if not where.startswith(guard.prefix):
        return f"the portal's provisioner may act only in namespaces named {guard.prefix}<team>"
    if resource == "rolebindings":
        ref = body.get("roleRef") or {}
        if ref.get("kind") != "ClusterRole" or ref.get("name") not in guard.roles:
            return "the portal's provisioner may bind only the workloads, reader and proxy roles"
    return None


def review_answer(review: dict[str, Any], guard: Guard) -> dict[str, Any]:
    """The AdmissionReview (v1) response to a request the API server sent."""
    request = review.get("request") or {}
    why = refusal(request, guard)
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": why is None}
    if why is not None:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": why}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def webhook_configuration(
    *,
    name: str,
    guard: Guard,
    ca_bundle: str,
    url: str | None = None,
    service: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration that sends the provisioner's kinds of request to the guard.

    Namespaces: always, failing closed (a namespace is written rarely, and a lenient variant would let a
    new namespace labelled lenient slip past while the guard is down). Objects in namespaces: failing
    closed, except in namespaces labelled lenient (the cluster's own), where they fail open: still checked
    whenever the guard answers, but never held up by it. 1.20 cannot select by user, so other users'
    requests of these kinds reach the guard too, which allows them at once.
    """
    ca = ca_bundle
    namespace_rule = {
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
        "resources": ["namespaces"], "scope": "Cluster",
    }  # fmt: skip
    object_rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
         "resources": ["resourcequotas", "limitranges"], "scope": "Namespaced"},
        {"apiGroups": ["rbac.authorization.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
         "resources": ["rolebindings"], "scope": "Namespaced"},
        {"apiGroups": ["networking.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
         "resources": ["networkpolicies"], "scope": "Namespaced"},
    ]  # fmt: skip
    client: dict[str, Any] = {"caBundle": ca}
    if url:
        client["url"] = url.rstrip("/") + guard.path()
    else:
        client["service"] = {**(service or {}), "path": guard.path()}
    strict = {"matchExpressions": [{"key": GUARD_LABEL, "operator": "NotIn", "values": [LENIENT]}]}
    lenient = {"matchExpressions": [{"key": GUARD_LABEL, "operator": "In", "values": [LENIENT]}]}

    def webhook(suffix: str, rules: list[dict[str, Any]], policy: str, namespaces: dict | None) -> dict[str, Any]:
        return {
            "name": f"{suffix}.provisioner.guard.gpuportal.io",
            "clientConfig": client,
            "rules": rules,
            "failurePolicy": policy,
            "matchPolicy": "Equivalent",
            **({"namespaceSelector": namespaces} if namespaces else {}),
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }

    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": labels or {}},
        "webhooks": [
            webhook("namespaces", [namespace_rule], "Fail", None),
            webhook("objects", object_rules, "Fail", strict),
            webhook("objects-lenient", object_rules, "Ignore", lenient),
        ],
    }
