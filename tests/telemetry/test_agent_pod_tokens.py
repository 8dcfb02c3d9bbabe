"""Agents in the cluster report with their own pod's service-account token, checked by the real API server
(TokenReview) and mapped to the pod's node: an agent's token speaks for its own node and no other."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from jobs.kube import client as kube
from telemetry.models import TelemetryNode
from tests.telemetry.helpers import make_report, post

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]

AUDIENCE = "gpuportal-agent"


def _token(core: k8s.CoreV1Api, namespace: str, account: str, pod: k8s.V1Pod | None, audience: str = AUDIENCE) -> str:
    """A token as the kubelet projects it into a pod: bound to the pod, for one audience, expiring."""
    bound = pod and k8s.V1BoundObjectReference(
        kind="Pod", api_version="v1", name=pod.metadata.name, uid=pod.metadata.uid
    )
    spec = k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=[audience], expiration_seconds=600, bound_object_ref=bound)
    )
    return core.create_namespaced_service_account_token(account, namespace, spec).status.token


@pytest.fixture
def agents(portal_account: Any, kube_api: Any, settings: Any) -> Iterator[dict[str, Any]]:
    """An agent DaemonSet on two GPU nodes in the portal's namespace; the portal checks tokens as its web."""
    namespace, run = portal_account.system_namespace, uuid.uuid4().hex[:6]
    core, apps = k8s.CoreV1Api(kube_api), k8s.AppsV1Api(kube_api)
    account, name = f"agent-{run}", f"agent-{run}"
    nodes = ["gpu-p100-1", "gpu-p100-2"]
    core.create_namespaced_service_account(namespace, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=account)))
    labels = {"app": name}
    container = k8s.V1Container(name="agent", image="gpuportal/agent:test", command=["python", "-m", "agent"])
    # One term per node (a node field selector takes one value); terms are ORed.
    pins = [
        k8s.V1NodeSelectorTerm(
            match_fields=[k8s.V1NodeSelectorRequirement(key="metadata.name", operator="In", values=[n])]
        )
        for n in nodes
    ]
    template = k8s.V1PodTemplateSpec(
        metadata=k8s.V1ObjectMeta(labels=labels),
        spec=k8s.V1PodSpec(
            service_account_name=account,
            automount_service_account_token=False,
            containers=[container],
            tolerations=[k8s.V1Toleration(operator="Exists")],
            affinity=k8s.V1Affinity(
                node_affinity=k8s.V1NodeAffinity(
                    required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(node_selector_terms=pins)
                )
            ),
        ),
    )
    daemonset = k8s.V1DaemonSet(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1DaemonSetSpec(selector=k8s.V1LabelSelector(match_labels=labels), template=template),
    )
    apps.create_namespaced_daemon_set(namespace, daemonset)
    deadline = time.monotonic() + 60
    while True:
        pods = core.list_namespaced_pod(namespace, label_selector=f"app={name}").items
        placed = {p.spec.node_name: p for p in pods if p.spec.node_name}
        if set(placed) == set(nodes):
            break
        assert time.monotonic() < deadline, f"the DaemonSet's pods were not placed: {[p.spec.node_name for p in pods]}"
        time.sleep(0.2)
    # A pod of the same account that is no agent of the DaemonSet, placed on a third node by hand.
    stray = core.create_namespaced_pod(
        namespace,
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name=f"stray-{run}"),
            spec=k8s.V1PodSpec(
                service_account_name=account,
                automount_service_account_token=False,
                node_name="gpu-k2-1",
                containers=[container],
                tolerations=[k8s.V1Toleration(operator="Exists")],
            ),
        ),
    )
    settings.AGENT_SERVICE_ACCOUNT = f"{namespace}/{account}"
    settings.AGENT_DAEMONSET = name
    settings.AGENT_TOKEN_AUDIENCE = AUDIENCE
    settings.KUBECONFIG = str(portal_account.kubeconfigs["web"])  # the web's own least-privilege account
    kube.reset()
    try:
        yield {"core": core, "namespace": namespace, "account": account, "pods": placed, "stray": stray}
    finally:
        settings.KUBECONFIG = str(portal_account.kubeconfig)
        kube.reset()
        apps.delete_namespaced_daemon_set(name, namespace)
        core.delete_namespaced_pod(stray.metadata.name, namespace)
        core.delete_namespaced_service_account(account, namespace)


def test_an_agents_own_token_reports_for_its_node_and_no_other(client, people, agents):
    core, namespace, account = agents["core"], agents["namespace"], agents["account"]
    first = _token(core, namespace, account, agents["pods"]["gpu-p100-1"])

    assert post(client, make_report("gpu-p100-1"), first).status_code == 202
    forged = post(client, make_report("gpu-p100-2"), first)
    assert forged.status_code == 403
    assert forged.json()["error"]["message"] == "This agent may not report for this node."
    assert not TelemetryNode.objects.filter(name="gpu-p100-2").exists()

    second = _token(core, namespace, account, agents["pods"]["gpu-p100-2"])
    assert post(client, make_report("gpu-p100-2"), second).status_code == 202


def test_tokens_that_are_not_an_agent_pods_own_are_refused(client, people, agents):
    core, namespace, account = agents["core"], agents["namespace"], agents["account"]
    pod = agents["pods"]["gpu-p100-1"]
    refused = {
        "another audience": _token(core, namespace, account, pod, audience="https://kubernetes.default.svc"),
        "bound to no pod": _token(core, namespace, account, None),
        "a pod outside the DaemonSet": _token(core, namespace, account, agents["stray"]),
        "another account's pod token": _token(core, namespace, "default", None),
        "not a token": "eyJhbGciOiJSUzI1NiJ9.e30.c2ln",
    }
    for what, token in refused.items():
        node = "gpu-k2-1" if what == "a pod outside the DaemonSet" else "gpu-p100-1"
        assert post(client, make_report(node), token).status_code == 401, what
    assert not TelemetryNode.objects.exists()
