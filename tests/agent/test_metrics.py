"""/metrics scraped over real HTTP from the agent's own registry."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.cgroups import PodRef
from agent.metrics import AgentCollector, LatestReport, make_registry, serve_metrics
from agent.readings import RawGpu, RawProcess, RawSample
from agent.report import build_report
from agent.stats import AgentStats
from tests.agent.fakes import GIB, p100

POD = "5f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f"
CID = "ab" * 32


@pytest.fixture
def served() -> Iterator[tuple[str, LatestReport, AgentStats]]:
    latest, stats = LatestReport(), AgentStats()
    registry = make_registry(AgentCollector("gpu-node-1", latest, stats, simulated=False))
    port, stop = serve_metrics(registry, 0, addr="127.0.0.1")
    yield f"http://127.0.0.1:{port}/metrics", latest, stats
    stop()


def _scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - a local test server
        assert response.status == 200
        text = response.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def _value(samples: dict, name: str, **labels: str) -> float:
    matches = [value for found, value in samples[name] if all(found.get(k) == v for k, v in labels.items())]
    assert len(matches) == 1, (name, labels, samples.get(name))
    return matches[0]


def test_gpu_metrics_carry_node_gpu_uuid_model_and_pod(served):
    url, latest, stats = served
    raw = RawSample(
        "535.104.05",
        12020,
        gpus=(
            p100(0, processes=[RawProcess(pid=4242, used_memory_bytes=11 * GIB)]),
            p100(1, util=2),
            RawGpu(index=2, uuid="GPU-lost", name="Tesla P100-PCIE-16GB", lost=True),
        ),
    )
    latest.set(
        build_report(
            raw,
            node="gpu-node-1",
            simulated=False,
            timestamp=datetime.now(UTC),
            interval_seconds=5,
            agent_version="0.1.0",
            pods={4242: PodRef(pod_uid=POD, container_id=CID)},
        )
    )
    latest.nvml_available = True
    stats.add(samples_total=3, nvml_errors_total=2, reports_sent_total=1, reports_dropped_total=4)
    stats.set(buffer_length=7)

    samples = _scrape(url)

    gpu0 = samples["gpuportal_gpu_utilization_percent"][0][0]
    assert gpu0 == {
        "node": "gpu-node-1",
        "gpu": "0",
        "uuid": "GPU-00000000-1111-2222-3333-444444444444",
        "model": "Tesla P100-PCIE-16GB",
        "pod_uid": POD,
    }
    assert _value(samples, "gpuportal_gpu_utilization_percent", gpu="0") == 97
    assert _value(samples, "gpuportal_gpu_utilization_percent", gpu="1", pod_uid="") == 2
    assert _value(samples, "gpuportal_gpu_power_draw_watts", gpu="0") == 211.5
    assert _value(samples, "gpuportal_gpu_sm_clock_hertz", gpu="0") == 1328e6
    assert _value(samples, "gpuportal_gpu_memory_total_bytes", gpu="1") == 16 * GIB
    assert _value(samples, "gpuportal_gpu_pod_memory_used_bytes", pod_uid=POD, container_id=CID) == 11 * GIB
    # The lost GPU: up 0, and no made-up readings.
    assert _value(samples, "gpuportal_gpu_up", gpu="2") == 0
    assert _value(samples, "gpuportal_gpu_up", gpu="0") == 1
    assert all(labels["gpu"] != "2" for labels, _ in samples["gpuportal_gpu_utilization_percent"])
    assert _value(samples, "gpuportal_gpu_xid_errors_total", gpu="0") == 0
    # The agent's own metrics.
    info = _value(samples, "gpuportal_agent_info", simulated="false", cuda_driver_version="12.2")
    assert info == 1
    assert _value(samples, "gpuportal_agent_nvml_available") == 1
    assert _value(samples, "gpuportal_agent_samples_total") == 3
    assert _value(samples, "gpuportal_agent_nvml_errors_total") == 2
    assert _value(samples, "gpuportal_agent_reports_sent_total") == 1
    assert _value(samples, "gpuportal_agent_reports_dropped_total") == 4
    assert _value(samples, "gpuportal_agent_buffer_reports") == 7


def test_before_the_first_sample_only_the_agent_metrics_are_served(served):
    url, _, _ = served
    samples = _scrape(url)
    assert _value(samples, "gpuportal_agent_samples_total") == 0
    assert _value(samples, "gpuportal_agent_nvml_available") == 0
    assert not any(name.startswith("gpuportal_gpu_") for name in samples)


def test_simulated_agent_says_so_in_its_info_metric():
    latest, stats = LatestReport(), AgentStats()
    registry = make_registry(AgentCollector("sim-node", latest, stats, simulated=True))
    port, stop = serve_metrics(registry, 0, addr="127.0.0.1")
    try:
        samples = _scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        stop()
    assert _value(samples, "gpuportal_agent_info", simulated="true", node="sim-node") == 1
