"""Sample -> report -> stored metrics: real agent reports posted to the ingest endpoint, then the stored
rows and the pages that show them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from agent.simulated import BusyGpu
from jobs.models import GpuNode, State
from telemetry.models import AgentToken, GpuState, TelemetryNode, WorkloadGpuMinute
from tests.telemetry.conftest import running_workload
from tests.telemetry.helpers import make_report, post

pytestmark = pytest.mark.django_db


def test_a_report_is_stored_per_gpu_and_attributed_to_the_workload(client, people, agent_token):
    workload = running_workload(people)
    GpuNode.objects.filter(name="gpu-p100-1").update(cuda_driver_version="")
    report = make_report(busy={0: BusyGpu(pod_uid=workload.pod_uid), 1: BusyGpu(pod_uid=workload.pod_uid)})

    response = post(client, report, agent_token)

    assert response.status_code == 202, response.content
    assert response.json() == {
        "stored": True,
        "node": "gpu-p100-1",
        "gpus": 4,
        "workloads": [workload.uid],
        "workspaces": 0,
    }
    node = TelemetryNode.objects.get(name="gpu-p100-1")
    assert (node.simulated, node.cuda_driver_version, node.driver_version) == (True, "12.2", "535.104.05")
    assert node.last_report_at == report.timestamp
    states = {g.index: g for g in GpuState.objects.filter(node=node)}
    assert sorted(states) == [0, 1, 2, 3]
    for gpu in report.gpus:
        stored = states[gpu.index]
        assert stored.utilization_gpu_percent == gpu.utilization_gpu_percent
        assert stored.memory_used_bytes == gpu.memory_used_bytes
        assert stored.temperature_celsius == gpu.temperature_celsius
        assert stored.power_draw_watts == gpu.power_draw_watts
        assert stored.sm_clock_mhz == gpu.sm_clock_mhz
        assert stored.uuid.startswith("GPU-SIM-")
    assert states[0].pod_uids == [workload.pod_uid]
    assert states[2].pod_uids == []
    # The node's CUDA driver version now feeds the CUDA-fit check at submit.
    assert GpuNode.objects.get(name="gpu-p100-1").cuda_driver_version == "12.2"

    minute = WorkloadGpuMinute.objects.get(workload=workload)
    busy = [g for g in report.gpus if g.index in (0, 1)]
    assert minute.team_id == people.team.id
    assert minute.minute == report.timestamp.replace(second=0, microsecond=0)
    assert (minute.reports, minute.gpu_readings) == (1, 2)
    assert minute.utilization_sum == sum(g.utilization_gpu_percent for g in busy)
    assert minute.utilization_max == max(g.utilization_gpu_percent for g in busy)
    assert minute.memory_used_bytes_max == sum(p.used_memory_bytes for g in busy for p in g.processes)
    assert minute.memory_total_bytes == 2 * 16 * 1024**3
    assert minute.busy_gpu_seconds == pytest.approx(minute.utilization_sum / 100 * 5.0)
    assert minute.observed_gpu_seconds == 10.0
    assert minute.simulated


def test_reports_in_one_minute_merge_and_a_repeated_report_is_not_counted_twice(client, people, agent_token):
    workload = running_workload(people)
    t0 = timezone.now().replace(second=10, microsecond=0) - timedelta(minutes=2)
    first = make_report(busy={0: BusyGpu(pod_uid=workload.pod_uid, utilization_percent=40)}, at=t0)
    second = make_report(
        busy={0: BusyGpu(pod_uid=workload.pod_uid, utilization_percent=80)}, at=t0 + timedelta(seconds=5)
    )

    assert post(client, first, agent_token).status_code == 202
    assert post(client, second, agent_token).status_code == 202
    again = post(client, second, agent_token)  # the agent retried after a timeout

    assert again.status_code == 202
    assert again.json()["stored"] is False
    minute = WorkloadGpuMinute.objects.get(workload=workload)
    assert (minute.reports, minute.gpu_readings, minute.utilization_sum, minute.utilization_max) == (2, 2, 120.0, 80)
    assert minute.busy_gpu_seconds == pytest.approx(1.2 * 5)
    assert TelemetryNode.objects.get().reports_total == 2


def test_only_pods_of_running_portal_workloads_are_attributed(client, people, agent_token):
    mine = running_workload(people, name="mine")
    finished = running_workload(people, name="done", state=State.SUCCEEDED)
    report = make_report(
        busy={
            0: BusyGpu(pod_uid=mine.pod_uid),
            1: BusyGpu(pod_uid=finished.pod_uid),
            2: BusyGpu(pod_uid="0f0e0d0c-not-a-portal-pod"),
            3: BusyGpu(pod_uid=None),  # a process outside any pod
        }
    )

    response = post(client, report, agent_token)

    assert response.json()["workloads"] == [mine.uid]
    assert list(WorkloadGpuMinute.objects.values_list("workload_id", flat=True)) == [mine.id]
    assert GpuState.objects.get(index=2).pod_uids == ["0f0e0d0c-not-a-portal-pod"]
    assert GpuState.objects.get(index=3).pod_uids == []


def test_each_workload_gets_its_own_gpus(client, people, agent_token):
    a = running_workload(people, name="a", gpus=1)
    b = running_workload(people, name="b", gpus=3)
    report = make_report(
        busy={0: BusyGpu(pod_uid=a.pod_uid, utilization_percent=10)}
        | {i: BusyGpu(pod_uid=b.pod_uid, utilization_percent=90) for i in (1, 2, 3)}
    )
    post(client, report, agent_token)
    rows = {r.workload_id: r for r in WorkloadGpuMinute.objects.all()}
    assert (rows[a.id].gpu_readings, rows[a.id].utilization_sum) == (1, 10.0)
    assert (rows[b.id].gpu_readings, rows[b.id].utilization_sum) == (3, 270.0)


def test_a_lost_gpu_and_a_gpu_that_disappears(client, people, agent_token):
    t0 = timezone.now() - timedelta(seconds=30)
    post(client, make_report(gpus=4, at=t0), agent_token)
    report = make_report(gpus=3, at=t0 + timedelta(seconds=5)).to_dict()
    report["gpus"][1] = {"index": 1, "uuid": "GPU-SIM-x", "name": "Tesla P100-PCIE-16GB", "state": "lost",
                         "errors": ["GPU is lost"], "processes": []}  # fmt: skip

    assert post(client, report, agent_token).status_code == 202

    states = {g.index: g for g in GpuState.objects.all()}
    assert sorted(states) == [0, 1, 2]
    assert states[1].lost
    assert states[1].utilization_gpu_percent is None


def test_the_nodes_page_shows_live_health_and_says_it_is_simulated(client, people, agent_token):
    workload = running_workload(people, name="resnet")
    post(client, make_report(busy={0: BusyGpu(pod_uid=workload.pod_uid)}), agent_token)

    client.force_login(people.teammate)
    page = client.get("/nodes/").content.decode()
    assert "gpu-p100-1" in page
    assert "Simulated data" in page
    assert "simulated</span>" in page
    assert f"resnet ({workload.uid})" in page
    assert "tm-busy" in page
    assert "tm-idle" in page
    assert "CUDA 12.2" in page

    client.force_login(people.outsider)
    page = client.get("/nodes/").content.decode()
    assert "resnet" not in page
    assert "another team&#x27;s workload" in page

    client.logout()
    assert client.get("/nodes/").status_code == 302


def test_a_silent_node_is_marked_stale(client, people, agent_token):
    post(client, make_report(), agent_token)
    TelemetryNode.objects.update(received_at=timezone.now() - timedelta(minutes=5))
    client.force_login(people.owner)
    page = client.get("/nodes/").content.decode()
    assert "No recent report" in page


# --- authentication and bad bodies ------------------------------------------------------------------


def test_a_missing_wrong_or_revoked_token_is_401(client, people, agent_token):
    report = make_report()
    missing = post(client, report, None)
    assert missing.status_code == 401
    assert missing["WWW-Authenticate"].startswith("Bearer")
    assert post(client, report, "gpa_not-a-token").status_code == 401
    assert post(client, report, None, HTTP_AUTHORIZATION=f"Basic {agent_token}").status_code == 401
    AgentToken.objects.update(revoked_at=timezone.now())
    assert post(client, report, agent_token).status_code == 401
    assert not TelemetryNode.objects.exists()


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.pop("schema"), "schema"),
        (lambda r: r.update(node=""), "node"),
        (lambda r: r.update(timestamp="yesterday"), "timestamp"),
        (lambda r: r["gpus"][1].update(memory_used_bytes="12 GiB"), "gpus[1].memory_used_bytes"),
        (lambda r: r["gpus"][0].update(utilization_gpu_percent=140), "gpus[0].utilization_gpu_percent"),
        (lambda r: r["gpus"][2]["processes"].append({"pid": "x"}), "gpus[2].processes[0].pid"),
        (lambda r: r.update(cuda_driver_version="twelve"), "cuda_driver_version"),
        (lambda r: r.update(timestamp=(datetime.now(UTC) + timedelta(hours=1)).isoformat()), "timestamp"),
    ],
)
def test_a_bad_report_is_400_naming_the_field(client, people, agent_token, mutate, field):
    body = make_report().to_dict()
    mutate(body)
    response = post(client, body, agent_token)
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == [field]
    assert response.json()["error"]["message"].startswith(field + ":")
    assert not GpuState.objects.exists()


def test_not_json_and_not_an_object_are_400(client, people, agent_token):
    assert post(client, b"{not json", agent_token).json() == {
        "error": {"status": 400, "code": "invalid", "message": "body: not JSON", "fields": {"body": ["body: not JSON"]}}
    }
    assert list(post(client, "[1, 2]", agent_token).json()["error"]["fields"]) == ["report"]


def test_a_huge_body_is_413(client, people, agent_token, settings):
    settings.TELEMETRY_MAX_REPORT_BYTES = 4096
    body = make_report().to_dict()
    body["padding"] = "x" * 5000  # unknown fields are allowed; size is not
    response = post(client, body, agent_token)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"


def test_only_post_is_allowed(client, agent_token):
    response = client.get("/api/v1/agent/reports", HTTP_AUTHORIZATION=f"Bearer {agent_token}")
    assert response.status_code == 405
    assert response["Allow"] == "POST"


# --- issuing tokens -------------------------------------------------------------------------------


def test_the_management_command_prints_a_token_once_and_stores_only_its_digest(client, people, capsys):
    call_command("agent_token", "issue", "cluster A nodes", "--node", "gpu-p100-1")
    token = capsys.readouterr().out.strip()
    row = AgentToken.objects.get(name="cluster A nodes")
    assert token.startswith("gpa_")
    assert token not in (row.token_hash, row.prefix)
    assert post(client, make_report(), token).status_code == 202
    call_command("agent_token", "list")
    assert token not in capsys.readouterr().out
    call_command("agent_token", "revoke", row.prefix)
    assert post(client, make_report(at=datetime.now(UTC)), token).status_code == 401


def test_an_admin_issues_a_token_and_sees_it_once(admin_client):
    refused = admin_client.post("/admin/telemetry/agenttoken/add/", {"name": "rack 7"})
    assert refused.status_code == 200
    assert "node_name" in refused.context["adminform"].form.errors
    response = admin_client.post(
        "/admin/telemetry/agenttoken/add/", {"name": "rack 7", "node_name": "gpu-p100-1"}, follow=True
    )
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    token = shown[0].split(": ", 1)[1].split(" ")[0]
    row = AgentToken.objects.get(name="rack 7")
    assert row.prefix == token[:12]
    change_page = admin_client.get(f"/admin/telemetry/agenttoken/{row.id}/change/").content.decode()
    assert token not in change_page
    admin_client.post("/admin/telemetry/agenttoken/", {"action": "revoke", "_selected_action": [row.id]}, follow=True)
    row.refresh_from_db()
    assert row.revoked_at is not None


def test_the_workload_chart_json_and_partial(client, people, agent_token):
    workload = running_workload(people)
    t0 = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=3)
    for minute, util in enumerate((90, 10, 50)):
        at = t0 + timedelta(minutes=minute, seconds=1)
        post(
            client,
            make_report(busy={0: BusyGpu(pod_uid=workload.pod_uid, utilization_percent=util)}, at=at),
            agent_token,
        )
    client.force_login(people.teammate)
    data = client.get(f"/telemetry/workloads/{workload.uid}/gpu.json").json()
    assert [p["utilization"] for p in data["series"]["points"]] == [90, 10, 50]
    assert data["series"]["simulated"] is True
    assert data["summary"]["utilization_percent_avg"] == 50.0
    assert data["summary"]["utilization_percent_last"] == 50.0
    assert data["summary"]["samples"] == 3
    partial = client.get(f"/telemetry/workloads/{workload.uid}/gpu/").content.decode()
    assert "<polyline" in partial
    assert "simulated" in partial
    assert json.loads(json.dumps(data))  # plain JSON all the way down

    client.force_login(people.outsider)
    assert client.get(f"/telemetry/workloads/{workload.uid}/gpu.json").status_code == 404
    assert client.get(f"/telemetry/workloads/{workload.uid}/gpu/").status_code == 404


def _mig_report(node: str, pod_uid: str, *, slice_utilization: int | None) -> dict:
    """A report of one A100 in MIG mode: slice 0 (GPU instance 7) runs `pod_uid`, slice 1 is free."""
    from agent.report import GpuReading, MigReading, ProcessReading

    holder = ProcessReading(pid=4242, used_memory_bytes=2 * 1024**3, pod_uid=pod_uid, container_id="c1")
    gpu = GpuReading(
        index=0,
        uuid="GPU-a100",
        name="NVIDIA A100-SXM4-80GB",
        utilization_gpu_percent=None,
        memory_used_bytes=2 * 1024**3,
        memory_total_bytes=80 * 1024**3,
        mig_enabled=True,
        mig_devices=(
            MigReading(
                index=0,
                uuid="MIG-one",
                gpu_instance_id=7,
                memory_used_bytes=2 * 1024**3,
                memory_total_bytes=10 * 1024**3,
                utilization_gpu_percent=slice_utilization,
                processes=(holder,),
            ),
            MigReading(
                index=1, uuid="MIG-two", gpu_instance_id=8, memory_used_bytes=0, memory_total_bytes=10 * 1024**3
            ),
        ),
    )
    report = make_report(node, gpus=1)
    wire = report.to_dict()
    wire["simulated"] = False
    wire["gpus"] = [gpu.to_dict()]
    return wire


def test_a_gpus_mig_slices_and_who_holds_them_are_stored_and_shown(client, people, agent_token):
    workload = running_workload(people, name="small-notebook")
    response = post(client, _mig_report(workload.node_name, workload.pod_uid, slice_utilization=None), agent_token)
    assert response.status_code == 202, response.content
    # The driver could not say the slice's utilisation: no reading, so no idle evidence either.
    assert response.json()["workloads"] == []
    assert not WorkloadGpuMinute.objects.filter(workload=workload).exists()
    (state,) = GpuState.objects.all()
    assert state.pod_uids == [workload.pod_uid]
    assert [(m["index"], m["gpu_instance_id"], m["pod_uids"]) for m in state.mig_devices] == [
        (0, 7, [workload.pod_uid]),
        (1, 8, []),
    ]

    client.force_login(people.teammate)
    page = client.get("/nodes/").content.decode()
    assert "MIG slices of GPU 0" in page
    assert "Slice 0 (GPU instance 7)" in page
    assert f"small-notebook ({workload.uid})" in page
    client.force_login(people.outsider)
    page = client.get("/nodes/").content.decode()
    assert "small-notebook" not in page
    assert "another team&#x27;s workload" in page


def test_a_slice_with_a_utilisation_reading_counts_for_its_holder(client, people, agent_token):
    workload = running_workload(people)
    response = post(client, _mig_report(workload.node_name, workload.pod_uid, slice_utilization=64), agent_token)
    assert response.json()["workloads"] == [workload.uid]
    minute = WorkloadGpuMinute.objects.get(workload=workload)
    assert (minute.gpu_readings, minute.utilization_max) == (1, 64)
    assert minute.memory_total_bytes == 10 * 1024**3  # the slice's memory, not the whole GPU's
