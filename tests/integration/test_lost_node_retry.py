"""A lost node, as the real Kubernetes control plane of the local cluster handles it: the taint manager marks
the pod it takes away with a DisruptionTarget condition and deletes it; the node's kubelet is gone, so
nothing confirms the pod's end and it stays Terminating (a finalizer holds it here, as the dead kubelet
would). Kubernetes from 1.26 counts it as the one failure backoffLimit 0 allows and fails the Job with
BackoffLimitExceeded (the portal reads the pod's DisruptionTarget condition); the local cluster's 1.20 Job
controller counts it as neither active nor failed and makes a new pod (the portal sees the attempt's pod
replaced, jobs/services/cluster/replaced_pods.py). Either way a restartable job runs again as its next
attempt, and the GPU-hours its lost run threw away are on its timeline and in usage."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

import pytest
from kubernetes import client as k8s

from jobs.models import RunSegment, State, WorkloadEvent
from tests.integration.test_retry_and_health import FOREVER, _pod

pytestmark = [pytest.mark.cluster, pytest.mark.celery]

HOLD = "gpuportal.dev/test-dead-kubelet"


def _lose_node_under(kube_api, pod: k8s.V1Pod) -> None:
    core = k8s.CoreV1Api(kube_api)
    name, namespace = pod.metadata.name, pod.metadata.namespace
    core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": [*(pod.metadata.finalizers or []), HOLD]}})
    condition = {
        "type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
        "message": "Taint manager: deleting due to NoExecute taint",
        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }  # fmt: skip
    core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [condition]}})
    core.delete_namespaced_pod(name, namespace)


def _release(kube_api, pod: k8s.V1Pod) -> None:
    core = k8s.CoreV1Api(kube_api)
    with contextlib.suppress(k8s.ApiException):
        held = core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        kept = [f for f in held.metadata.finalizers or [] if f != HOLD]
        core.patch_namespaced_pod(
            pod.metadata.name,
            pod.metadata.namespace,
            [{"op": "replace", "path": "/metadata/finalizers", "value": kept}],
        )


def test_a_restartable_job_whose_node_is_lost_runs_again_with_its_lost_work_counted(engine, kube_api):
    job = engine.submit(name="lostnode", restartable=True, env=FOREVER)
    engine.wait_for(job, State.RUNNING, timeout=90)
    pod = _pod(kube_api, job)
    try:
        _lose_node_under(kube_api, pod)
        engine.wait_until(job, lambda w: w.attempt == 1 and w.state == State.RUNNING, "running its next attempt", 120)
    finally:
        _release(kube_api, pod)
    retried = WorkloadEvent.objects.filter(workload=job, from_state=State.RUNNING, to_state=State.QUEUED).get()
    words = {"DeletionByTaintManager": "its node became unreachable", "PodLost": "its pod was lost with its node"}
    assert retried.reason in words, retried.reason
    assert words[retried.reason] in retried.message, retried.message
    assert "Retry 1 of 3" in retried.message
    assert "lost since its last checkpoint (none: since its start)" in retried.message
    segment = RunSegment.objects.get(workload=job, attempt=0)
    ran = job.gpu_count * (segment.finished_at - segment.started_at).total_seconds()
    assert segment.lost_gpu_seconds == pytest.approx(ran, abs=0.01)  # no checkpoint: all of the run
    assert job.lost_gpu_seconds == pytest.approx(segment.lost_gpu_seconds)
