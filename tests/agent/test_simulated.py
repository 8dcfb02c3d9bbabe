"""The simulated source: honest labelling and plausible readings driven by which GPUs are busy."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent.report import Report, build_report
from agent.simulated import BusyGpu, SimulatedSampler

POD = "5f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f"


def _report(sampler: SimulatedSampler) -> Report:
    return build_report(
        sampler.sample(),
        node=sampler.node_name,
        simulated=sampler.simulated,
        timestamp=datetime.now(UTC),
        interval_seconds=5,
        agent_version="0.1.0",
    )


def test_busy_gpus_look_busy_and_are_attributed_to_their_pod():
    busy = {1: BusyGpu(pod_uid=POD, container_id="c" * 64)}
    sampler = SimulatedSampler("sim-node-1", 4, "Tesla P100-PCIE-16GB", "12.2", busy_fn=lambda: busy, seed=1)
    for _ in range(10):  # let the temperatures settle
        report = _report(sampler)

    assert report.simulated is True
    assert report.cuda_driver_version == "12.2"
    assert [g.name for g in report.gpus] == ["Tesla P100-PCIE-16GB"] * 4
    assert all(g.uuid and g.uuid.startswith("GPU-SIM-") for g in report.gpus)
    idle, hot = report.gpus[0], report.gpus[1]
    assert idle.utilization_gpu_percent == 0
    assert idle.processes == ()
    assert idle.memory_used_bytes < 64 * 1024**2
    assert 85 <= hot.utilization_gpu_percent <= 100
    assert hot.memory_total_bytes == 16 * 1024**3
    assert 0.5 * hot.memory_total_bytes < hot.memory_used_bytes < hot.memory_total_bytes
    assert hot.temperature_celsius > idle.temperature_celsius + 30
    assert hot.power_draw_watts > 150 > 40 > idle.power_draw_watts
    assert hot.power_limit_watts == 250
    assert hot.sm_clock_mhz > idle.sm_clock_mhz
    assert hot.pod_uids == [POD]
    assert hot.processes[0].container_id == "c" * 64
    # The report it makes is valid under the schema the portal checks.
    assert Report.from_dict(report.to_dict()) == report


def test_a_gpu_held_but_idle_reads_as_held_and_idle():
    # What the idle-service policy must catch: a notebook holding a GPU and doing nothing.
    busy = {0: BusyGpu(pod_uid=POD, utilization_percent=2)}
    gpu = _report(SimulatedSampler("n", 1, "NVIDIA A100-SXM4-40GB", "12.2", busy_fn=lambda: busy)).gpus[0]
    assert gpu.utilization_gpu_percent == 2
    assert gpu.pod_uids == [POD]
    assert gpu.memory_used_bytes > 0.5 * 40 * 1024**3  # frameworks reserve memory even when idle


def test_busy_fn_is_asked_every_pass():
    busy: dict[int, BusyGpu] = {}
    sampler = SimulatedSampler("n", 2, "Tesla P100-PCIE-16GB", "11.8", busy_fn=lambda: busy)
    assert _report(sampler).gpus[0].utilization_gpu_percent == 0
    busy[0] = BusyGpu(pod_uid=POD)
    assert _report(sampler).gpus[0].utilization_gpu_percent >= 85
    del busy[0]
    assert _report(sampler).gpus[0].processes == ()


def test_uuids_are_stable_per_node_and_distinct_across_nodes():
    a1 = _report(SimulatedSampler("node-a", 2, "GRID K2", "10.2")).gpus
    a2 = _report(SimulatedSampler("node-a", 2, "GRID K2", "10.2")).gpus
    b = _report(SimulatedSampler("node-b", 2, "GRID K2", "10.2")).gpus
    assert [g.uuid for g in a1] == [g.uuid for g in a2]
    assert not {g.uuid for g in a1} & {g.uuid for g in b}


def test_unknown_model_gets_generic_figures_and_bad_cuda_is_refused():
    gpu = _report(SimulatedSampler("n", 1, "Some Future GPU", "13.0")).gpus[0]
    assert gpu.memory_total_bytes
    assert gpu.power_limit_watts
    with pytest.raises(ValueError, match="cuda_version"):
        SimulatedSampler("n", 1, "GRID K2", "12")
