"""Shared GPUs on real nodes (issue 40): a GPU time-sliced four ways runs two workloads at once, a MIG
1g.10gb slice reaches its job as NVIDIA's plugin hands one over (NVIDIA_VISIBLE_DEVICES=MIG-<uuid>), and
the team's usage and budget count GPU-equivalents while its quota counts devices. The kubelet, containerd
and runc are real; the GPUs are our device plugin's (no GPU on this machine); see
tests/realnode_fixtures.py (`sliced_nodes`)."""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agent.cgroups import resolve_pid
from agent.nvml import NvmlSampler
from agent.report import build_report
from jobs.models import State, Workload
from jobs.services.logs.container_logs import LogsUnavailable, workload_logs
from jobs.services.usage.accounting import month_to_date_hours
from localcluster.images import IMAGES
from telemetry.models import GpuState
from telemetry.services.ingest import report_ingest
from tests.agent.fakes import FakeNvmlLibrary

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]

REPORT_AND_WAIT = """
import os, time
print("devices=" + os.environ.get("NVIDIA_VISIBLE_DEVICES", "<none>"), flush=True)
time.sleep(float(os.environ.get("HOLD_SECONDS", "30")))
"""


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _submit(api: APIClient, gpu_type: str, **spec):
    body = {
        "gpu_type": gpu_type,
        "gpu_count": 1,
        "image": IMAGES["python"],
        "command": ["python", "-c", REPORT_AND_WAIT],
    }
    return api.post("/api/v1/workloads/", body | spec, format="json")


def _devices_of(workload: Workload) -> str:
    deadline = time.monotonic() + 90
    log = ""
    while time.monotonic() < deadline:
        with contextlib.suppress(LogsUnavailable):
            log = workload_logs(workload)
        for line in log.splitlines():
            if line.startswith("devices="):
                return line.split("=", 1)[1]
        time.sleep(0.5)
    raise AssertionError(f"no devices line in the log of {workload.uid}:\n{log}")


def test_two_workloads_run_at_once_on_one_time_sliced_gpu_and_count_a_quarter_each(sliced_engine):
    api = _api(sliced_engine.owner)
    node = next(s for s in sliced_engine.real_nodes.specs if s.name == "real-t4-1")
    the_gpu = sliced_engine.real_nodes.device_ids("real-t4-1")  # one physical GPU
    assert len(the_gpu) == 1
    assert len(node.offer.devices) == 4

    responses = [_submit(api, "real-t4-shared", env=[{"name": "HOLD_SECONDS", "value": "25"}]) for _ in range(2)]
    assert [r.status_code for r in responses] == [201, 201], [r.content for r in responses]
    workloads = [Workload.objects.get(uid=r.json()["uid"]) for r in responses]
    for workload in workloads:
        sliced_engine.wait_for(workload, State.RUNNING, State.FAILED, State.SUCCEEDED, timeout=240)
    devices = [_devices_of(w) for w in workloads]
    for workload in workloads:
        workload.refresh_from_db()
    # Both run at the same moment, on the one node that has the GPU, and both were handed that GPU.
    assert [w.state for w in workloads] == [State.RUNNING, State.RUNNING]
    assert {w.node_name for w in workloads} == {"real-t4-1"}
    assert devices == the_gpu * 2

    for workload in workloads:
        sliced_engine.wait_for(workload, State.SUCCEEDED, State.FAILED, timeout=240)
        assert workload.state == State.SUCCEEDED, workload.message
    # Usage: two share-hours are half a GPU-hour; the budget counts the GPU-equivalents.
    start = timezone.localdate().isoformat()
    body = api.get(f"/api/v1/usage/?start={start}&group_by=gpu_type").json()
    row = next(r for r in body["rows"] if r["key"] == "real-t4-shared")
    assert row["gpu_hours"] > 0
    assert row["gpu_equivalent_hours"] == pytest.approx(row["gpu_hours"] / 4, rel=1e-3)
    assert row["weighted_gpu_hours"] == pytest.approx(row["gpu_equivalent_hours"], rel=1e-3)
    assert month_to_date_hours(sliced_engine.team) == pytest.approx(body["total_weighted_gpu_hours"], rel=1e-2)
    assert month_to_date_hours(sliced_engine.team) < body["total_gpu_hours"]


def test_a_mig_slice_job_gets_its_slice_and_takes_one_per_container(sliced_engine):
    api = _api(sliced_engine.owner)
    refused = _submit(api, "real-a100-1g", gpu_count=2)
    assert refused.status_code == 400
    assert "one per container" in str(refused.json()["error"]["fields"]["gpu_count"]), refused.content
    assert not Workload.objects.filter(gpu_type__slug="real-a100-1g").exists()

    response = _submit(api, "real-a100-1g", env=[{"name": "HOLD_SECONDS", "value": "20"}])
    assert response.status_code == 201, response.content
    workload = Workload.objects.get(uid=response.json()["uid"])
    sliced_engine.wait_for(workload, State.RUNNING, State.FAILED, State.SUCCEEDED, timeout=240)
    devices = _devices_of(workload)
    offer = next(s for s in sliced_engine.real_nodes.specs if s.name == "real-a100-1").offer
    assert devices.startswith("MIG-"), devices
    assert devices in {d.visible for d in offer.devices}
    assert workload.node_name == "real-a100-1"

    # The agent's side: NVML (a stand-in for the library: no GPU here) lists the container's real process
    # on the slice it was given; the agent resolves the pod from the process's real cgroup and reports it.
    workload.refresh_from_db()
    pid = _host_pid_of(workload.pod_uid)
    mig = [
        {"uuid": d.visible, "gi": 1 + n, "used": 0, "procs": [(pid, 1024)] if d.visible == devices else []}
        for n, d in enumerate(offer.devices)
    ]
    nvml = FakeNvmlLibrary([{"uuid": offer.devices[0].gpu, "util": 0, "used": 0, "temp": 40, "power": 1, "mig": mig}])
    raw = NvmlSampler(nvml).sample()
    pods = {p.pid: resolve_pid(p.pid, Path("/proc")) for gpu in raw.gpus for p in gpu.all_processes()}
    report = build_report(
        raw,
        node="real-a100-1",
        simulated=False,
        timestamp=datetime.now(UTC),
        interval_seconds=5.0,
        agent_version="test",
        pods={pid: pod for pid, pod in pods.items() if pod},
    )
    (gpu,) = report.gpus
    held = {m.uuid: m.pod_uids for m in gpu.mig_devices if m.pod_uids}
    assert held == {devices: [workload.pod_uid]}
    report_ingest(report=report)
    (state,) = GpuState.objects.filter(node__name="real-a100-1")
    assert [m["pod_uids"] for m in state.mig_devices if m["pod_uids"]] == [[workload.pod_uid]]

    sliced_engine.wait_for(workload, State.SUCCEEDED, State.FAILED, timeout=240)
    assert workload.state == State.SUCCEEDED, workload.message


def _host_pid_of(pod_uid: str) -> int:
    """The host PID of the pod's python process (its cgroup path names the pod)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cgroup = (entry / "cgroup").read_text()
            if f"pod{pod_uid}" in cgroup and b"python" in (entry / "cmdline").read_bytes():
                return int(entry.name)
    raise AssertionError(f"no process of pod {pod_uid} on this machine")
