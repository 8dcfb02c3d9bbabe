"""The agent's sampling loop: sample, attribute processes to pods, report, repeat.

Nothing that goes wrong in one pass ends the loop: a failed pass is logged (once per outage, not
every few seconds) and counted, and the next pass tries again on schedule.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import agent
from agent.cgroups import PodRef, resolve_pid
from agent.metrics import LatestReport
from agent.push import Pusher
from agent.readings import RawSample, Sampler
from agent.report import Report, VolumeReading, build_report
from agent.stats import AgentStats
from agent.volumes import VolumeMeter

log = logging.getLogger(__name__)


class AgentLoop:
    def __init__(
        self,
        *,
        node_name: str,
        sampler: Sampler,
        interval_seconds: float,
        host_proc: Path,
        latest: LatestReport,
        stats: AgentStats,
        pusher: Pusher | None = None,
        volumes: VolumeMeter | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.node_name = node_name
        self.sampler = sampler
        self.interval_seconds = interval_seconds
        self.host_proc = host_proc
        self.latest = latest
        self.stats = stats
        self.pusher = pusher
        self.volumes = volumes
        self._now = now
        self._failing = False

    def tick(self) -> Report | None:
        """One pass; returns the report, or None when the pass failed as a whole."""
        started = time.perf_counter()
        try:
            raw = self.sampler.sample()
        except Exception as exc:
            # NVML errors and anything unexpected alike: the DaemonSet pod must stay up and retry.
            self.stats.add(sample_failures_total=1, nvml_errors_total=1)
            self.latest.nvml_available = False
            if not self._failing:
                log.error("sampling failed, will retry every %.0fs: %s", self.interval_seconds, exc)
            self._failing = True
            return None
        if self._failing:
            log.info("sampling works again")
        self._failing = False
        report = build_report(
            raw,
            node=self.node_name,
            simulated=self.sampler.simulated,
            timestamp=self._now(),
            interval_seconds=self.interval_seconds,
            agent_version=agent.__version__,
            pods=self._resolve_pods(raw),
            volumes=self._measure_volumes(),
        )
        self.latest.set(report)
        self.latest.nvml_available = not self.sampler.simulated
        self.stats.add(samples_total=1, nvml_errors_total=raw.nvml_errors)
        self.stats.set(last_sample_seconds=time.perf_counter() - started, last_sample_timestamp=time.time())
        if self.pusher is not None:
            self.pusher.enqueue(report)
        return report

    def _measure_volumes(self) -> tuple[VolumeReading, ...]:
        """The volumes' use when it is time to measure it again; () otherwise (the report leaves it out)."""
        if self.volumes is None or not self.volumes.due():
            return ()
        try:
            return self.volumes.measure()
        except Exception:
            # Telemetry of the GPUs matters more: report them without the volumes this time.
            log.exception("measuring volumes failed")
            return ()

    def _resolve_pods(self, raw: RawSample) -> dict[int, PodRef]:
        pods: dict[int, PodRef] = {}
        for gpu in raw.gpus:
            for process in gpu.all_processes():
                if process.pod is None and process.pid not in pods:
                    pod = resolve_pid(process.pid, self.host_proc)
                    if pod is not None:
                        pods[process.pid] = pod
        return pods

    def run(self, stop: threading.Event) -> None:
        """Tick every interval until `stop` is set; a slow pass delays the next, never doubles up."""
        next_tick = time.monotonic()
        while not stop.is_set():
            try:
                self.tick()
            except Exception:
                # A bug in one pass must not take the node's monitoring down; the traceback says where.
                self.stats.add(sample_failures_total=1)
                log.exception("sampling pass failed unexpectedly")
            next_tick += self.interval_seconds
            delay = next_tick - time.monotonic()
            if delay < 0:
                # Behind schedule (a pass took longer than the interval): start afresh from now.
                next_tick = time.monotonic()
                delay = 0
            stop.wait(delay)
