"""End to end on the local GPU cluster: the node simulator pushes simulated agent reports over HTTP to a
live portal, and a running workload's GPU use is attributed to it through its pod's UID."""

from __future__ import annotations

import time

import pytest

from devtools.local_telemetry import local_cluster_connect, local_cluster_disconnect
from jobs.models import State
from jobs.services.cancel import workload_cancel
from telemetry.models import GpuState, TelemetryNode, WorkloadGpuMinute
from telemetry.selectors import workload_gpu_summary

pytestmark = [pytest.mark.cluster, pytest.mark.celery]


@pytest.fixture
def publishing(kube_cluster, live_server):
    state_dir = getattr(kube_cluster, "state_dir", None)
    if state_dir is None:
        pytest.skip("an external cluster (LOCALCLUSTER_KUBECONFIG): its simulator's state directory is not ours")
    name = f"test-{id(live_server)}"
    local_cluster_connect(state_dir=state_dir, portal_url=live_server.url, name=name, interval_seconds=1.0)
    yield
    local_cluster_disconnect(state_dir=state_dir, name=name)


def wait_until(condition, timeout: float = 45.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.25)
    pytest.fail(f"not within {timeout:.0f}s", pytrace=False)


def test_a_running_simulated_service_gets_gpu_samples_attributed(engine, publishing):
    workload = engine.submit(
        name="idle-notebook", kind="service", port=8888, gpu_type="k2", gpu_count=2, env={"SIM_GPU_UTILIZATION": "3"}
    )
    engine.wait_for(workload, State.RUNNING)
    assert workload.pod_uid

    minute = wait_until(lambda: WorkloadGpuMinute.objects.filter(workload=workload).first())
    assert minute.node_name == workload.node_name
    assert minute.simulated
    assert minute.gpu_readings % 2 == 0
    summary = wait_until(lambda: (s := workload_gpu_summary(workload))["samples"] >= 2 and s)
    assert summary["utilization_percent_avg"] == 3.0
    assert summary["simulated"] is True

    node = TelemetryNode.objects.get(name=workload.node_name)
    assert node.simulated
    assert node.cuda_driver_version == "11.4"  # the k2 pool's driver, as the simulated agent reports it
    held = GpuState.objects.filter(node=node, pod_uids__contains=[workload.pod_uid])
    assert held.count() == 2
    assert all(g.uuid.startswith("GPU-SIM-") for g in held)

    workload_cancel(workload=workload, by=engine.owner)
    # Once cancelled, its pod's readings are no longer attributed to it.
    engine.wait_for(workload, State.CANCELLED)
