"""A report read from a real GPU (an NVIDIA H200 through NVML, by tests/agent/test_real_nvml.py on a machine
with the driver; kept in tests/agent/data/h200_report.json) is taken by the portal as an agent would send it:
stored per GPU, attributed to the workload whose pod holds the process, shown as real data, and its CUDA
driver version used for the CUDA-fit check."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobs.models import GpuNode
from telemetry.models import GpuState, TelemetryNode, WorkloadGpuMinute
from tests.telemetry.conftest import running_workload
from tests.telemetry.helpers import post

pytestmark = pytest.mark.django_db

CAPTURED = Path(__file__).resolve().parents[1] / "agent" / "data" / "h200_report.json"


def _captured_report(node: str, pod_uid: str) -> dict:
    body = json.loads(CAPTURED.read_text())
    body["node"] = node
    body["timestamp"] = datetime.now(UTC).isoformat()
    # What the agent adds on a Kubernetes node: the pod of the process, read from its cgroup.
    for process in body["gpus"][0]["processes"]:
        process["pod_uid"] = pod_uid
    return body


def test_a_real_h200_report_is_stored_attributed_and_shown_as_real(client, people, agent_token):
    workload = running_workload(people, name="llm-finetune")
    body = _captured_report("gpu-p100-1", workload.pod_uid)
    captured = body["gpus"][0]

    response = post(client, body, agent_token)

    assert response.status_code == 202, response.content
    assert response.json()["workloads"] == [workload.uid]
    node = TelemetryNode.objects.get(name="gpu-p100-1")
    assert (node.simulated, node.driver_version, node.cuda_driver_version) == (False, "580.159.04", "13.0")
    state = GpuState.objects.get(node=node, index=0)
    assert state.uuid == captured["uuid"] == "GPU-4a7328f9-f69c-5aff-8fc0-c531d7277a2f"
    assert state.memory_total_bytes == captured["memory_total_bytes"] > 140 * 10**9
    assert state.utilization_gpu_percent == 100
    assert state.pod_uids == [workload.pod_uid]
    assert GpuNode.objects.get(name="gpu-p100-1").cuda_driver_version == "13.0"

    minute = WorkloadGpuMinute.objects.get(workload=workload)
    assert minute.memory_used_bytes_max == captured["processes"][0]["used_memory_bytes"]
    assert minute.utilization_max == 100
    assert not minute.simulated

    client.force_login(people.teammate)
    page = client.get("/nodes/").content.decode()
    assert "NVIDIA H200" in page
    assert "CUDA 13.0" in page
    assert "Simulated data" not in page
