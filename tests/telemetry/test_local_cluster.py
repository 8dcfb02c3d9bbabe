"""End to end on the local GPU cluster: the node simulator pushes simulated agent reports over HTTP to a
live portal, and a running workload's GPU use is attributed to it through its pod's UID."""

from __future__ import annotations

import time

import pytest
import requests
from kubernetes import client as k8s

from devtools.local_telemetry import local_cluster_connect, local_cluster_disconnect
from jobs.models import State, Workspace
from jobs.services.cancel import workload_cancel
from jobs.templatetags.portal_ui import binary_size
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


def _service_pod_ip(kube_api, workload) -> str:
    pods = k8s.CoreV1Api(kube_api).list_namespaced_pod(
        workload.namespace, label_selector=f"gpuportal.dev/workload={workload.uid}"
    )
    running = [p for p in pods.items if p.status.phase == "Running" and p.status.pod_ip]
    return running[0].status.pod_ip if running else ""


def test_a_file_written_into_a_home_shows_as_used_bytes_in_admin(engine, publishing, kube_api, settings, admin_client):
    # Nothing mocked: the simulator measures the claim's real directory and pushes it in its node's agent
    # report; the portal learns the claim's volume from the API server and stores the use on the workspace.
    settings.WORKSPACE_STORAGE_CLASS = "gpuportal-local"
    settings.WORKSPACE_HOME_GIB = 1
    owner = engine.owner.get_username()
    service = engine.submit(kind="service", port=8888, gpu_type="k2", gpu_count=1)
    engine.wait_for(service, State.RUNNING, timeout=90)
    ip = wait_until(lambda: _service_pod_ip(kube_api, service))
    home = Workspace.objects.get(namespace=service.namespace, claim_name=service.mounts[0]["claim"])

    def measured(at_least: int) -> Workspace | None:
        home.refresh_from_db()
        return home if home.used_bytes is not None and home.used_bytes >= at_least else None

    wait_until(lambda: measured(0), timeout=90)
    service.refresh_from_db()
    assert home.volume_name.startswith("pvc-")
    assert home.used_bytes < 256 * 1024  # an empty home: its directory's own blocks
    assert home.used_measured_on == service.node_name
    first_measured_at = home.used_measured_at

    put = requests.put(f"http://{ip}:8888/_files/home/{owner}/weights.bin", data=b"w" * 256 * 1024, timeout=10)
    assert put.status_code == 201, put.text
    full = wait_until(lambda: measured(256 * 1024))
    assert full.used_measured_at > first_measured_at

    page = admin_client.get("/admin/jobs/workspace/?o=-5")  # sorted by use, fullest first
    assert page.status_code == 200
    text = page.content.decode()
    assert f"{binary_size(full.used_bytes)} / 1.0 GiB" in text
    workload_cancel(workload=service, by=engine.owner)
