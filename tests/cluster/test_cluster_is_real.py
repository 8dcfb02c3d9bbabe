"""Proof that the local cluster is real Kubernetes (issue 2, item 5): the real scheduler places GPU pods by
node label and capacity, the real Job controller completes and fails Jobs from pod status, and the real
ResourceQuota admission plugin refuses pods over a namespace's GPU quota."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster.helpers import job_manifest, pod_manifest, wait_for

pytestmark = pytest.mark.cluster


def _job_pods(core: client.CoreV1Api, namespace: str, job: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items


def test_gpu_job_is_bound_to_a_p100_node_runs_and_completes(kube_api, kube_namespace):
    core, batch = client.CoreV1Api(kube_api), client.BatchV1Api(kube_api)
    pod = pod_manifest("x", gpus=2, gputype="p100", annotations={"sim.gpuportal.dev/run-seconds": "2"})
    batch.create_namespaced_job(kube_namespace, job_manifest("train", pod))

    running = wait_for(
        lambda: [p for p in _job_pods(core, kube_namespace, "train") if p.status.phase == "Running"],
        what="the job's pod to run",
    )[0]
    node = core.read_node(running.spec.node_name)
    assert node.metadata.labels["gputype"] == "p100"
    assert running.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"
    assert running.status.container_statuses[0].state.running.started_at is not None

    job = wait_for(
        lambda: (j := batch.read_namespaced_job("train", kube_namespace)).status.succeeded == 1 and j,
        what="the job to succeed",
    )
    assert any(c.type == "Complete" and c.status == "True" for c in job.status.conditions)


def test_pod_wanting_more_gpus_than_any_k2_node_stays_pending_with_the_schedulers_reason(kube_api, kube_namespace):
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(kube_namespace, pod_manifest("greedy", gpus=9, gputype="k2"))

    def unschedulable():
        pod = core.read_namespaced_pod("greedy", kube_namespace)
        for cond in pod.status.conditions or []:
            if cond.type == "PodScheduled" and cond.status == "False":
                return cond
        return None

    condition = wait_for(unschedulable, what="the scheduler's verdict")
    assert condition.reason == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in condition.message
    pod = core.read_namespaced_pod("greedy", kube_namespace)
    assert pod.status.phase == "Pending"
    assert not pod.spec.node_name


def test_pod_over_the_namespace_gpu_quota_is_refused_by_the_api_server(kube_api, kube_namespace):
    core = client.CoreV1Api(kube_api)
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "2"}},
    }
    core.create_namespaced_resource_quota(kube_namespace, quota)
    # Admission refuses everything until the quota controller has computed the quota's status.
    wait_for(
        lambda: core.read_namespaced_resource_quota("gpus", kube_namespace).status.hard or {},
        what="the quota controller",
    )
    core.create_namespaced_pod(kube_namespace, pod_manifest("fits", gpus=2, gputype="p100"))

    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(kube_namespace, pod_manifest("over", gpus=1, gputype="p100"))
    assert refused.value.status == 403
    assert "exceeded quota" in refused.value.body
    assert "requests.nvidia.com/gpu" in refused.value.body


def test_pod_with_simulated_exit_code_3_fails_its_job(kube_api, kube_namespace):
    core, batch = client.CoreV1Api(kube_api), client.BatchV1Api(kube_api)
    pod = pod_manifest(
        "x",
        gpus=1,
        gputype="v100",
        annotations={"sim.gpuportal.dev/run-seconds": "1", "sim.gpuportal.dev/exit-code": "3"},
    )
    batch.create_namespaced_job(kube_namespace, job_manifest("crash", pod))

    def failed():
        job = batch.read_namespaced_job("crash", kube_namespace)
        return next((c for c in job.status.conditions or [] if c.type == "Failed" and c.status == "True"), None)

    condition = wait_for(failed, what="the job to fail")
    assert condition.reason == "BackoffLimitExceeded"
    pods = _job_pods(core, kube_namespace, "crash")
    terminated = pods[0].status.container_statuses[0].state.terminated
    assert pods[0].status.phase == "Failed"
    assert terminated.exit_code == 3
    assert terminated.reason == "Error"
