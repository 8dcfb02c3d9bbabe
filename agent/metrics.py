"""Prometheus metrics on /metrics, computed at scrape time from the latest report.

A custom collector on the agent's own registry (not the global one, so nothing else a library
registers leaks into the output and tests can run several agents in one process). Every GPU series
is labelled node, gpu (index), uuid, model and pod_uid: the pod holding the GPU, "" when no process
is attributed, several UIDs comma-joined in the rare case of a shared GPU. Readings that NVML does
not support are left out rather than exported as a made-up 0.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

import agent
from agent.report import GpuReading, Report
from agent.stats import AgentStats

# Prometheus scrapes a DaemonSet's metrics port from another pod, so the agent listens on every interface.
ALL_INTERFACES = "0.0.0.0"  # noqa: S104
_GPU_LABELS = ["node", "gpu", "uuid", "model", "pod_uid"]
# (metric name, help, attribute of GpuReading, factor into base units)
_GPU_GAUGES: list[tuple[str, str, str, float]] = [
    (
        "gpuportal_gpu_utilization_percent",
        "GPU busy time over NVML's last sample period",
        "utilization_gpu_percent",
        1,
    ),
    (
        "gpuportal_gpu_memory_utilization_percent",
        "Time the GPU's memory was read or written",
        "utilization_memory_percent",
        1,
    ),
    ("gpuportal_gpu_memory_used_bytes", "GPU memory in use", "memory_used_bytes", 1),
    ("gpuportal_gpu_memory_total_bytes", "GPU memory installed", "memory_total_bytes", 1),
    ("gpuportal_gpu_temperature_celsius", "GPU core temperature", "temperature_celsius", 1),
    ("gpuportal_gpu_power_draw_watts", "Power the GPU draws", "power_draw_watts", 1),
    ("gpuportal_gpu_power_limit_watts", "Power limit the driver enforces", "power_limit_watts", 1),
    ("gpuportal_gpu_sm_clock_hertz", "Streaming multiprocessor clock", "sm_clock_mhz", 1e6),
    (
        "gpuportal_gpu_ecc_uncorrected_volatile_errors",
        "Uncorrected ECC errors since the driver loaded",
        "ecc_uncorrected_volatile",
        1,
    ),
]


@dataclass
class LatestReport:
    """The newest report, swapped atomically by the loop and read by scrapes."""

    report: Report | None = None
    # False for the simulated source, and after a pass that NVML failed as a whole until one succeeds.
    nvml_available: bool = False

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def set(self, report: Report) -> None:
        with self._lock:
            self.report = report

    def get(self) -> Report | None:
        with self._lock:
            return self.report


def _gauges(label_sets: list[tuple[GpuReading, list[str]]]) -> Iterator[GaugeMetricFamily]:
    """One family per reading of `_GPU_GAUGES`, a sample per GPU that has it."""
    for name, help_text, attribute, factor in _GPU_GAUGES:
        family = GaugeMetricFamily(name, help_text, labels=_GPU_LABELS)
        for gpu, labels in label_sets:
            value = getattr(gpu, attribute)
            if value is not None:
                family.add_metric(labels, float(value) * factor)
        yield family


def _xid_errors(label_sets: list[tuple[GpuReading, list[str]]]) -> CounterMetricFamily:
    xid = CounterMetricFamily(
        "gpuportal_gpu_xid_errors",
        "XID critical errors since the agent started",
        labels=[*_GPU_LABELS, "last_xid"],
    )
    for gpu, labels in label_sets:
        if gpu.xid_errors is not None:
            xid.add_metric([*labels, "" if gpu.last_xid is None else str(gpu.last_xid)], gpu.xid_errors)
    return xid


def _memory_by_container(gpu: GpuReading) -> dict[tuple[str, str], int]:
    """GPU memory the processes of each (pod, container) hold on `gpu`."""
    by_container: dict[tuple[str, str], int] = {}
    for process in gpu.processes:
        if process.pod_uid and process.used_memory_bytes is not None:
            key = (process.pod_uid, process.container_id or "")
            by_container[key] = by_container.get(key, 0) + process.used_memory_bytes
    return by_container


class AgentCollector(Collector):
    def __init__(self, node: str, latest: LatestReport, stats: AgentStats, *, simulated: bool) -> None:
        self._node = node
        self._latest = latest
        self._stats = stats
        self._simulated = simulated

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | InfoMetricFamily]:
        report = self._latest.get()
        yield from self._agent_metrics(report)
        if report is not None:
            yield from self._gpu_metrics(report)

    def _agent_metrics(
        self, report: Report | None
    ) -> Iterator[GaugeMetricFamily | CounterMetricFamily | InfoMetricFamily]:
        info = InfoMetricFamily("gpuportal_agent", "The agent, the node's driver, and whether readings are simulated")
        info.add_metric(
            [],
            {
                "node": self._node,
                "version": agent.__version__,
                "simulated": "true" if self._simulated else "false",
                "driver_version": (report.driver_version if report else None) or "",
                "cuda_driver_version": (report.cuda_driver_version if report else None) or "",
            },
        )
        yield info
        labels = ["node"]
        nvml = GaugeMetricFamily("gpuportal_agent_nvml_available", "1 when NVML answered on this node", labels=labels)
        nvml.add_metric([self._node], 1.0 if self._latest.nvml_available else 0.0)
        yield nvml
        stats = self._stats.snapshot()
        counters = [
            ("gpuportal_agent_samples", "Sampling passes completed", stats.samples_total),
            (
                "gpuportal_agent_sample_failures",
                "Sampling passes that failed as a whole",
                stats.sample_failures_total,
            ),
            (
                "gpuportal_agent_nvml_errors",
                "NVML calls that failed (not counting 'not supported')",
                stats.nvml_errors_total,
            ),
            ("gpuportal_agent_reports_sent", "Reports the portal accepted", stats.reports_sent_total),
            (
                "gpuportal_agent_reports_dropped",
                "Reports dropped, oldest first, because the buffer was full",
                stats.reports_dropped_total,
            ),
            (
                "gpuportal_agent_reports_rejected",
                "Reports the portal refused as invalid (not retried)",
                stats.reports_rejected_total,
            ),
            (
                "gpuportal_agent_push_failures",
                "Push attempts that failed and will be retried",
                stats.push_failures_total,
            ),
        ]
        for name, help_text, value in counters:
            counter = CounterMetricFamily(name, help_text, labels=labels)
            counter.add_metric([self._node], value)
            yield counter
        gauges = [
            ("gpuportal_agent_buffer_reports", "Reports waiting to be pushed", stats.buffer_length),
            (
                "gpuportal_agent_last_sample_duration_seconds",
                "How long the last sampling pass took",
                stats.last_sample_seconds,
            ),
            (
                "gpuportal_agent_last_sample_timestamp_seconds",
                "Unix time of the last good sample",
                stats.last_sample_timestamp,
            ),
        ]
        for name, help_text, value in gauges:
            gauge = GaugeMetricFamily(name, help_text, labels=labels)
            gauge.add_metric([self._node], value)
            yield gauge

    def _gpu_metrics(self, report: Report) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        label_sets = [(gpu, self._labels(report, gpu)) for gpu in report.gpus]
        up = GaugeMetricFamily("gpuportal_gpu_up", "1 when the GPU answers, 0 when it is lost", labels=_GPU_LABELS)
        for gpu, labels in label_sets:
            up.add_metric(labels, 1.0 if gpu.state == "ok" else 0.0)
        yield up
        yield from _gauges(label_sets)
        yield _xid_errors(label_sets)
        # Per pod: what each pod's processes hold on each GPU (a pod can span GPUs and, rarely, share one).
        pod_memory = GaugeMetricFamily(
            "gpuportal_gpu_pod_memory_used_bytes",
            "GPU memory used by a pod's processes",
            labels=["node", "gpu", "uuid", "model", "pod_uid", "container_id"],
        )
        for gpu in report.gpus:
            for (pod_uid, container_id), used in sorted(_memory_by_container(gpu).items()):
                labels = [report.node, str(gpu.index), gpu.uuid or "", gpu.name or "", pod_uid, container_id]
                pod_memory.add_metric(labels, float(used))
        yield pod_memory

    @staticmethod
    def _labels(report: Report, gpu: GpuReading) -> list[str]:
        return [report.node, str(gpu.index), gpu.uuid or "", gpu.name or "", ",".join(gpu.pod_uids)]


def make_registry(collector: AgentCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def serve_metrics(registry: CollectorRegistry, port: int, addr: str = ALL_INTERFACES) -> tuple[int, Callable[[], None]]:
    """Serve /metrics in a daemon thread; returns the bound port (useful with port 0) and a stop function."""
    server, thread = start_http_server(port, addr=addr, registry=registry)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return server.server_port, stop
