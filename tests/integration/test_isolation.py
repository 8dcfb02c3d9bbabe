"""One team can never disturb another's work through the cluster: objects that merely look like a
workload's (its labels, outside its team namespace) change nothing, and the reaper never acts on them."""

from __future__ import annotations

import time

import pytest
from kubernetes import client as k8s

from jobs.kube import names
from jobs.models import State

pytestmark = [pytest.mark.cluster, pytest.mark.celery]


def _impostor_of(real: k8s.V1Pod, *, namespace: str) -> dict:
    """A pod anyone allowed to create pods in `namespace` could make: the real pod's labels, its node,
    and a container that exits 1 after a second."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"impostor-{real.metadata.name}"[:63],
            "namespace": namespace,
            "labels": real.metadata.labels,
        },
        "spec": {
            "nodeName": real.spec.node_name,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": real.spec.containers[0].image,
                    "env": [{"name": "SIM_RUN_SECONDS", "value": "1"}, {"name": "SIM_EXIT_CODE", "value": "1"}],
                }
            ],
        },
    }


def test_a_look_alike_pod_in_another_namespace_changes_nothing(engine, kube_api):
    core, apps = k8s.CoreV1Api(kube_api), k8s.AppsV1Api(kube_api)
    workload = engine.submit(kind="service", port=8888, gpu_type="k2", gpu_count=1)
    engine.wait_for(workload, State.RUNNING)
    real = core.list_namespaced_pod(workload.namespace, label_selector=f"{names.LABEL_WORKLOAD}={workload.uid}").items[
        0
    ]
    impostor = _impostor_of(real, namespace="default")
    core.create_namespaced_pod("default", impostor)
    try:
        deadline = time.monotonic() + 30
        while core.read_namespaced_pod(impostor["metadata"]["name"], "default").status.phase != "Failed":
            assert time.monotonic() < deadline, "the simulated kubelet never ended the impostor pod"
            time.sleep(0.2)
        # The tracker sees the impostor's every change within a fraction of a second; give it several.
        time.sleep(3)
        workload.refresh_from_db()
        assert (workload.state, workload.pod_uid) == (State.RUNNING, real.metadata.uid)
        assert (
            apps.read_namespaced_deployment(workload.k8s_name, workload.namespace).metadata.deletion_timestamp is None
        )
        log = engine.processes.log("tracker")
        assert log.count(f"ignoring Pod default/{impostor['metadata']['name']}") == 1, log[-2000:]
    finally:
        core.delete_namespaced_pod(impostor["metadata"]["name"], "default", grace_period_seconds=0)
