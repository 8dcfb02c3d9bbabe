"""Raw readings -> report (a pure function), and the report's wire schema both ways."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from agent.cgroups import PodRef
from agent.readings import RawGpu, RawProcess, RawSample
from agent.report import (
    SCHEMA,
    GpuReading,
    Report,
    ReportError,
    build_report,
    format_cuda_version,
    parse_cuda_version,
)
from tests.agent.fakes import GIB, p100

WHEN = datetime(2026, 11, 22, 3, 0, 5, tzinfo=UTC)
POD = "5f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f"
CID = "9a0b" * 16


def _report(raw: RawSample, pods: dict[int, PodRef] | None = None, simulated: bool = False) -> Report:
    return build_report(
        raw,
        node="gpu-node-1",
        simulated=simulated,
        timestamp=WHEN,
        interval_seconds=5.0,
        agent_version="0.1.0",
        pods=pods,
    )


def test_converts_units_and_attributes_processes_to_pods():
    raw = RawSample(
        driver_version="535.104.05",
        cuda_driver_version=12020,
        gpus=(
            p100(1, util=3),
            p100(
                0,
                processes=[
                    RawProcess(pid=4242, used_memory_bytes=11 * GIB),
                    RawProcess(pid=17, used_memory_bytes=None),
                ],
            ),
        ),
    )
    report = _report(raw, pods={4242: PodRef(pod_uid=POD, container_id=CID)})

    body = report.to_dict()
    assert body["schema"] == SCHEMA
    assert body["node"] == "gpu-node-1"
    assert body["simulated"] is False
    assert body["timestamp"] == "2026-11-22T03:00:05+00:00"
    assert body["driver_version"] == "535.104.05"
    assert body["cuda_driver_version"] == "12.2"
    assert [gpu["index"] for gpu in body["gpus"]] == [0, 1]  # sorted by index
    gpu0 = body["gpus"][0]
    assert gpu0["state"] == "ok"
    assert gpu0["power_draw_watts"] == 211.5
    assert gpu0["power_limit_watts"] == 250.0
    assert gpu0["memory_used_bytes"] == 12 * GIB
    assert gpu0["processes"] == [
        {"pid": 17, "used_memory_bytes": None, "pod_uid": None, "container_id": None},
        {"pid": 4242, "used_memory_bytes": 11 * GIB, "pod_uid": POD, "container_id": CID},
    ]
    assert body["gpus"][1]["utilization_gpu_percent"] == 3
    # The wire format is plain JSON.
    assert json.loads(json.dumps(body)) == body


def test_lost_gpu_is_reported_as_lost_and_the_others_still_read():
    raw = RawSample(
        driver_version="535.104.05",
        cuda_driver_version=12020,
        gpus=(
            p100(0),
            RawGpu(index=1, uuid="GPU-lost", name="Tesla P100-PCIE-16GB", lost=True, errors=("GPU is lost",)),
        ),
    )
    gpus = _report(raw).gpus
    assert gpus[0].state == "ok"
    assert gpus[0].utilization_gpu_percent == 97
    assert gpus[1] == GpuReading(
        index=1, uuid="GPU-lost", name="Tesla P100-PCIE-16GB", state="lost", errors=("GPU is lost",)
    )


def test_unsupported_readings_stay_null():
    raw = RawSample(
        driver_version=None,
        cuda_driver_version=None,
        gpus=(p100(0, ecc_uncorrected_volatile=None, xid_errors=None, power_draw_milliwatts=None),),
    )
    body = _report(raw).to_dict()
    assert body["driver_version"] is None
    assert body["cuda_driver_version"] is None
    gpu = body["gpus"][0]
    assert gpu["ecc_uncorrected_volatile"] is None
    assert gpu["xid_errors"] is None
    assert gpu["power_draw_watts"] is None


def test_process_pod_from_the_source_wins_over_cgroup_lookup():
    own = PodRef(pod_uid="sim-pod")
    raw = RawSample("x", 12020, gpus=(p100(0, processes=[RawProcess(pid=1, used_memory_bytes=1, pod=own)]),))
    report = _report(raw, pods={1: PodRef(pod_uid="other")}, simulated=True)
    assert report.gpus[0].processes[0].pod_uid == "sim-pod"
    assert report.simulated is True


def test_timestamp_is_normalised_to_utc_and_must_be_aware():
    raw = RawSample("x", 12020)
    local = WHEN.astimezone(timezone(timedelta(hours=2)))
    assert _report_at(raw, local).timestamp == WHEN
    with pytest.raises(ValueError, match="timezone-aware"):
        _report_at(raw, WHEN.replace(tzinfo=None))


def _report_at(raw: RawSample, when: datetime) -> Report:
    return build_report(raw, node="n", simulated=False, timestamp=when, interval_seconds=5, agent_version="0")


@pytest.mark.parametrize(
    ("raw", "text"),
    [(12020, "12.2"), (11080, "11.8"), (12000, "12.0"), (10010, "10.1"), (None, None), (0, None)],
)
def test_cuda_version_formatting(raw, text):
    assert format_cuda_version(raw) == text


def test_cuda_versions_compare_numerically():
    assert parse_cuda_version("12.10") > parse_cuda_version("12.9")
    assert parse_cuda_version("12") is None
    assert parse_cuda_version("twelve.2") is None


def _valid_body() -> dict:
    raw = RawSample(
        "535.104.05",
        12020,
        gpus=(p100(0, processes=[RawProcess(pid=4242, used_memory_bytes=GIB)]), RawGpu(index=1, lost=True)),
    )
    return json.loads(json.dumps(_report(raw, pods={4242: PodRef(pod_uid=POD, container_id=CID)}).to_dict()))


def test_from_dict_round_trips():
    body = _valid_body()
    report = Report.from_dict(body)
    assert report.to_dict() == body
    assert report.gpus[0].pod_uids == [POD]


def test_from_dict_ignores_unknown_fields_so_newer_agents_are_accepted():
    body = _valid_body()
    body["future_field"] = 1
    body["gpus"][0]["fan_speed_percent"] = 40
    assert Report.from_dict(body).node == "gpu-node-1"


def _set(body: dict, path: tuple, value: object) -> dict:
    target = body
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return body


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("schema",), "gpuportal.agent.report/v0", "schema: expected"),
        (("node",), "", "node: must not be empty"),
        (("node",), _DELETE, "node: expected a string"),
        (("simulated",), "no", "simulated: expected true or false"),
        (("timestamp",), "yesterday", "timestamp: not an RFC 3339 time"),
        (("timestamp",), "2026-11-22T03:00:05", "timestamp: must carry a UTC offset"),
        (("cuda_driver_version",), "12", "cuda_driver_version: expected a version"),
        (("gpus",), {}, "gpus: expected a list"),
        (("gpus", 0, "state"), "melted", "gpus[0].state: expected one of ok, lost"),
        (("gpus", 0, "memory_used_bytes"), "12G", "gpus[0].memory_used_bytes: expected an integer or null"),
        (
            ("gpus", 0, "utilization_gpu_percent"),
            140,
            "gpus[0].utilization_gpu_percent: 140 is outside 0..100",
        ),
        (("gpus", 0, "power_draw_watts"), True, "gpus[0].power_draw_watts: expected a number"),
        (("gpus", 0, "power_draw_watts"), -3, "gpus[0].power_draw_watts: must not be negative"),
        (("gpus", 0, "processes", 0, "pid"), None, "gpus[0].processes[0].pid: expected an integer"),
        (("gpus", 0, "processes", 0, "pod_uid"), 7, "gpus[0].processes[0].pod_uid: expected a string"),
        (("gpus", 1, "index"), 0, "gpus: the same GPU index appears twice"),
    ],
)
def test_from_dict_names_the_offending_field(path, value, message):
    body = _set(_valid_body(), path, value)
    with pytest.raises(ReportError, match=re.escape(message)):
        Report.from_dict(body)


def test_from_dict_refuses_a_non_object():
    with pytest.raises(ReportError, match="report: expected an object"):
        Report.from_dict([1, 2])


def test_mig_devices_are_reported_and_attributed_to_their_pods():
    from agent.readings import RawMigDevice

    pod = PodRef(pod_uid="pod-a", container_id="c-a")
    raw = RawSample(
        driver_version="550.54",
        cuda_driver_version=12040,
        gpus=(
            RawGpu(
                index=0,
                uuid="GPU-0",
                name="NVIDIA A100-SXM4-80GB",
                mig_enabled=True,
                mig_devices=(
                    RawMigDevice(index=1, uuid="MIG-b", gpu_instance_id=9, compute_instance_id=0, memory_used_bytes=0),
                    RawMigDevice(
                        index=0,
                        uuid="MIG-a",
                        gpu_instance_id=7,
                        compute_instance_id=0,
                        memory_used_bytes=512,
                        memory_total_bytes=10 * 1024**3,
                        processes=(RawProcess(pid=4242, used_memory_bytes=512),),
                    ),
                ),
            ),
        ),
    )
    report = build_report(
        raw,
        node="real-a100-1",
        simulated=False,
        timestamp=datetime(2026, 11, 28, 3, 0, tzinfo=UTC),
        interval_seconds=5.0,
        agent_version="0.1.0",
        pods={4242: pod},
    )
    (gpu,) = report.gpus
    assert [(m.index, m.uuid, m.gpu_instance_id) for m in gpu.mig_devices] == [(0, "MIG-a", 7), (1, "MIG-b", 9)]
    assert gpu.mig_devices[0].pod_uids == ["pod-a"]
    assert gpu.pod_uids == ["pod-a"]  # the GPU is held through its slice
    wire = report.to_dict()
    assert wire["gpus"][0]["mig_devices"][0]["processes"][0]["pod_uid"] == "pod-a"
    assert Report.from_dict(wire) == report  # the portal reads back what the agent sent
