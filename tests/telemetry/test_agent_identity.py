"""Agent identity: a token speaks for one node; a node's readings count only for workloads running on it;
reports are bounded in size and time; the idle policy acts only on readings from the service's own node."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from agent.simulated import BusyGpu
from jobs.models import Kind, State
from telemetry.models import AgentToken, GpuState, IdlePolicy, TelemetryNode, WorkloadGpuMinute
from telemetry.services.idle import idle_check
from telemetry.services.tokens import agent_token_issue
from tests.telemetry.conftest import running_workload
from tests.telemetry.helpers import make_report, post

pytestmark = pytest.mark.django_db


def test_a_token_bound_to_a_node_may_not_report_for_another(client, people):
    _row, token = agent_token_issue(name="p100-1's agent", node="gpu-p100-1")
    forged = post(client, make_report("gpu-p100-2"), token)
    assert forged.status_code == 403
    assert not TelemetryNode.objects.filter(name="gpu-p100-2").exists()
    assert post(client, make_report("gpu-p100-1"), token).status_code == 202


def test_a_token_issued_before_tokens_named_their_node_speaks_for_none(client, people):
    """Such a token used to bind to whichever node reported with it first."""
    _row, token = agent_token_issue(name="old", node="gpu-p100-1")
    AgentToken.objects.update(node_name="")
    assert post(client, make_report("gpu-p100-1"), token).status_code == 403
    assert post(client, make_report("gpu-p100-2"), token).status_code == 403
    assert not GpuState.objects.exists()


def test_a_token_cannot_be_issued_without_a_node(client, people):
    with pytest.raises(ValueError, match="node"):
        agent_token_issue(name="any node", node="")


def test_issuing_a_nodes_token_again_revokes_the_old_one(client, people):
    _old, old = agent_token_issue(name="first", node="gpu-p100-1")
    _new, new = agent_token_issue(name="rotated", node="gpu-p100-1")
    assert post(client, make_report("gpu-p100-1"), old).status_code == 401
    assert post(client, make_report("gpu-p100-1"), new).status_code == 202
    assert AgentToken.objects.filter(node_name="gpu-p100-1", revoked_at__isnull=True).count() == 1


def test_a_process_counts_only_for_a_workload_on_the_reporting_node(client, people):
    workload = running_workload(people)  # runs on gpu-p100-1
    _row, token = agent_token_issue(name="p100-2's agent", node="gpu-p100-2")
    report = make_report("gpu-p100-2", busy={0: BusyGpu(pod_uid=workload.pod_uid, utilization_percent=99)})
    response = post(client, report, token)
    assert response.status_code == 202
    assert response.json()["workloads"] == []
    assert not WorkloadGpuMinute.objects.filter(workload=workload).exists()


def test_a_report_with_more_gpus_than_a_node_has_is_refused(client, people, agent_token, settings):
    response = post(client, make_report(gpus=settings.TELEMETRY_MAX_GPUS_PER_REPORT + 1), agent_token)
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["gpus"]
    assert not GpuState.objects.exists()


def test_a_report_from_the_future_is_refused(client, people, agent_token):
    response = post(client, make_report(at=datetime.now(UTC) + timedelta(hours=2)), agent_token)
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["timestamp"]


def test_the_idle_policy_ignores_readings_from_a_node_the_service_does_not_run_on(people):
    t0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    IdlePolicy.objects.create(
        team=people.team, threshold_percent=5, warn_after_hours=Decimal(1), stop_after_hours=Decimal(1)
    )
    service = running_workload(people, name="notebook", kind=Kind.SERVICE, gpus=1, started_at=t0)
    # Minutes of zero use, recorded as coming from another node (a node's agent that was once trusted to
    # speak about this pod, or rows from before a reschedule).
    WorkloadGpuMinute.objects.bulk_create(
        WorkloadGpuMinute(
            workload=service,
            team=people.team,
            minute=t0 + timedelta(minutes=m),
            node_name="gpu-p100-2",
            simulated=True,
            reports=1,
            gpu_readings=1,
            utilization_sum=0,
            utilization_max=0,
            memory_used_bytes_max=0,
            memory_used_bytes_last=0,
            memory_total_bytes=1,
            busy_gpu_seconds=0,
            observed_gpu_seconds=60,
        )
        for m in range(4 * 60)
    )
    for hours in (1.5, 2.5, 3.5):
        with time_machine.travel(t0 + timedelta(hours=hours), tick=False):
            assert idle_check()["warned"] + idle_check()["stopped"] == 0
    service.refresh_from_db()
    assert service.state == State.RUNNING
    assert not service.events.filter(reason__startswith="Idle").exists()
