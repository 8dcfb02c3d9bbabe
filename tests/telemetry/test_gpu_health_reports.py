"""GPU health from the agents' reports (POST /api/v1/agent/reports): a GPU reported lost marks its node,
restartable work there is retried, other work there is told, and healthy reports in a row clear the mark."""

from __future__ import annotations

import pytest

from jobs.models import GpuHealthMark, State, WorkloadEvent
from jobs.services.cluster.node_health import nodes_to_avoid
from tests.telemetry.conftest import running_workload
from tests.telemetry.helpers import make_report, post

pytestmark = pytest.mark.django_db

READINGS = (
    "utilization_gpu_percent", "utilization_memory_percent", "memory_used_bytes", "memory_total_bytes",
    "temperature_celsius", "power_draw_watts", "power_limit_watts", "sm_clock_mhz", "ecc_uncorrected_volatile",
    "xid_errors", "last_xid",
)  # fmt: skip


def _with_gpu_lost(index: int = 0) -> dict:
    body = make_report().to_dict()
    gpu = body["gpus"][index]
    gpu["state"] = "lost"
    gpu.update(dict.fromkeys(READINGS))
    gpu["processes"] = []
    return body


def test_a_lost_gpu_marks_its_node_retries_restartable_work_and_tells_the_rest(client, people, agent_token, settings):
    settings.PORTAL_GPU_HEALTHY_REPORTS_TO_CLEAR = 3
    restartable = running_workload(people, name="resumes", restartable=True)  # on gpu-p100-1
    plain = running_workload(people, name="plain")
    assert post(client, make_report(), agent_token).status_code == 202
    assert nodes_to_avoid() == ()
    assert post(client, _with_gpu_lost(), agent_token).status_code == 202
    mark = GpuHealthMark.objects.get()
    assert (mark.node_name, mark.gpu_index, mark.cause, mark.is_open) == ("gpu-p100-1", 0, "lost", True)
    assert nodes_to_avoid() == ("gpu-p100-1",)
    restartable.refresh_from_db()
    plain.refresh_from_db()
    assert (restartable.state, restartable.reason, restartable.attempt) == (State.QUEUED, "GpuFault", 1)
    assert plain.state == State.RUNNING
    assert WorkloadEvent.objects.filter(workload=plain, reason="GpuUnhealthy").exists()
    # The same failure again opens no second mark; healthy reports in a row close it.
    assert post(client, _with_gpu_lost(), agent_token).status_code == 202
    assert GpuHealthMark.objects.count() == 1
    for _ in range(3):
        assert post(client, make_report(), agent_token).status_code == 202
    mark.refresh_from_db()
    assert mark.cleared_how == GpuHealthMark.Cleared.RECOVERED
    assert nodes_to_avoid() == ()
