"""A gang job's GPU use: its rank 1 runs on another node than rank 0 (the workload's own pod); that
node's agent's readings of rank 1's processes count for the gang, and a stranger's pod UID does not."""

from __future__ import annotations

import uuid

import pytest

from agent.simulated import BusyGpu
from jobs.models import GangRank, State
from telemetry.models import WorkloadGpuMinute
from tests.telemetry.conftest import running_workload
from tests.telemetry.helpers import make_report, post

pytestmark = pytest.mark.django_db


def test_the_other_ranks_gpu_use_counts_for_the_gang(client, people, agent_token):
    gang = running_workload(people, gpus=4, nodes=2)
    gang.node_name = "gpu-p100-2"  # rank 0, the workload's own pod, runs elsewhere
    gang.save(update_fields=["node_name"])
    rank1 = GangRank.objects.create(
        workload=gang, rank=1, phase=State.RUNNING, pod_uid=str(uuid.uuid4()), node_name="gpu-p100-1",
        started_at=gang.started_at,
    )  # fmt: skip
    report = make_report("gpu-p100-1", busy={0: BusyGpu(pod_uid=rank1.pod_uid), 1: BusyGpu(pod_uid=str(uuid.uuid4()))})
    response = post(client, report, agent_token)
    assert response.status_code == 202, response.content
    assert response.json()["workloads"] == [gang.uid]
    minute = WorkloadGpuMinute.objects.get(workload=gang)
    assert minute.gpu_readings == 1  # rank 1's GPU, not the stranger's
    assert minute.node_name == "gpu-p100-1"

    # A rank of an earlier attempt (released after the start window) counts no more.
    gang.attempt = 1
    gang.save(update_fields=["attempt"])
    later = make_report("gpu-p100-1", busy={0: BusyGpu(pod_uid=rank1.pod_uid)}, at=report.timestamp.replace(second=30))
    assert post(client, later, agent_token).json()["workloads"] == []
