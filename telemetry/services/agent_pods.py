"""Agents inside the cluster prove which node they run on with their own pod's service-account token.

The DaemonSet mounts a projected token (audience AGENT_TOKEN_AUDIENCE, expiring, rotated by the kubelet)
and the agent sends it as its bearer token. The portal asks the API server (TokenReview) whose token it
is; a token bound to a pod names that pod in the review's extra info, and the pod's spec.nodeName is the
only node it may report for. No pod holds any credential but its own, so root on one GPU node can speak
for that node alone, and only while the pod exists.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from jobs.kube import client as kube

log = logging.getLogger(__name__)

POD_NAME_KEY = "authentication.kubernetes.io/pod-name"
POD_UID_KEY = "authentication.kubernetes.io/pod-uid"


@dataclass(frozen=True)
class AgentPod:
    """An agent identified by its pod: it may report for `node_name` alone."""

    node_name: str
    pod_name: str

    @property
    def label(self) -> str:
        return f"pod {self.pod_name}"


class ReviewUnavailable(RuntimeError):
    """The API server could not be asked (down, or the portal lacks the rights): the agent retries."""


def agent_pod_identify(token: str) -> AgentPod | None:
    """The agent pod `token` belongs to, or None if it is no live agent pod's own token."""
    account = settings.AGENT_SERVICE_ACCOUNT
    if not account or not token or len(token) > 16384:
        return None
    key = "agent-pod:" + hashlib.sha256(token.encode()).hexdigest()
    cached = cache.get(key)
    if cached:
        return AgentPod(*cached)
    namespace, _, name = account.partition("/")
    try:
        pod = _review(token, namespace, name)
    except ApiException as exc:
        log.error("agent token review failed: %s %s", exc.status, exc.reason)
        raise ReviewUnavailable() from None
    except (HTTPError, OSError, kube.KubeConfigError) as exc:
        log.error("agent token review failed: %s", exc)
        raise ReviewUnavailable() from None
    if pod is not None:
        ttl = min(settings.AGENT_TOKEN_REVIEW_CACHE_SECONDS, _seconds_left(token))
        if ttl > 0:
            cache.set(key, (pod.node_name, pod.pod_name), ttl)
    return pod


def _authenticated(status, audience: str) -> bool:
    return bool(status and status.authenticated and audience in (status.audiences or []))


def _bound_pod(status, audience: str, username: str) -> tuple[str, str] | None:
    """(name, uid) of the pod a reviewed token is bound to, if it authenticated for `audience` as the agent's
    service account `username`."""
    if not _authenticated(status, audience):
        return None
    user = status.user
    if user.username != username:
        log.warning("agent token refused: it belongs to %s, not the agent's account", user.username)
        return None
    extra = user.extra or {}
    pod_name = (extra.get(POD_NAME_KEY) or [""])[0]
    pod_uid = (extra.get(POD_UID_KEY) or [""])[0]
    if not pod_name or not pod_uid:
        # A token of the account that no pod is bound to (a Secret's legacy token, a hand-made TokenRequest).
        log.warning("agent token refused: the account's token is not bound to a pod")
        return None
    return pod_name, pod_uid


def _review(token: str, namespace: str, account: str) -> AgentPod | None:
    api = kube.api_client()
    audience = settings.AGENT_TOKEN_AUDIENCE
    review = k8s.AuthenticationV1Api(api).create_token_review(
        k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token, audiences=[audience])),
        _request_timeout=kube.timeout(),
    )
    bound = _bound_pod(review.status, audience, f"system:serviceaccount:{namespace}:{account}")
    if bound is None:
        return None
    pod_name, pod_uid = bound
    try:
        pod = k8s.CoreV1Api(api).read_namespaced_pod(pod_name, namespace, _request_timeout=kube.timeout())
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    if pod.metadata.uid != pod_uid or not pod.spec.node_name or not _of_the_daemonset(pod):
        log.warning("agent token refused: pod %s/%s is not a running agent of the DaemonSet", namespace, pod_name)
        return None
    return AgentPod(node_name=pod.spec.node_name, pod_name=f"{namespace}/{pod_name}")


def _of_the_daemonset(pod: k8s.V1Pod) -> bool:
    wanted = settings.AGENT_DAEMONSET
    if not wanted:
        return True
    return any(
        ref.kind == "DaemonSet" and ref.name == wanted and ref.controller for ref in pod.metadata.owner_references or []
    )


def _seconds_left(token: str) -> float:
    """Seconds until the (already reviewed) token expires, from its own claims; 0 if it cannot be read."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return float(claims["exp"]) - time.time()
    except (IndexError, ValueError, KeyError, TypeError):
        return 0.0
