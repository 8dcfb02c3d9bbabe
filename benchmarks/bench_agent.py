"""The GPU node agent: time of a sampling pass, and the agent's resident memory after an hour.

Lines printed:
  agent_sample_ms_simulated       one pass (sample, attribute, build the report) per GPU, simulated
                                  source, 8 GPUs with 4 busy; median of 500 passes. Says nothing about
                                  NVML's own latency, which only a real GPU can give.
  agent_pass_ms_simulated         the same pass for the whole 8-GPU node
  agent_sample_ms                 the same with real NVML, per GPU — only printed where NVML works
  agent_cgroup_resolve_us         attributing one PID to its pod from a real cgroup file
  agent_rss_mb_baseline           the agent process's RSS after start-up, before its first sample
  agent_rss_mb                    ... after 720 samples (an hour at 5 s) pushed to a live portal
                                  stand-in and scraped every third pass
  agent_rss_mb_portal_down        ... after 720 samples with the portal down (buffer full, 720 reports)
The RSS figures come from a separate process (`python -m benchmarks.bench_agent --rss-child`) so they
are the agent's own, not the benchmark harness's.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agent.cgroups import resolve_pid
from agent.loop import AgentLoop
from agent.metrics import LatestReport
from agent.simulated import BusyGpu, SimulatedSampler
from agent.stats import AgentStats

GPUS = 8
PASSES = 500
HOUR_OF_SAMPLES = 720  # 3600 s / 5 s
REPO = Path(__file__).resolve().parents[1]


# What this module prints (benchmarks/__main__.py prints a missing one as an ERROR line).
FIGURES = (
    "agent_sample_ms_simulated",
    "agent_pass_ms_simulated",
    "agent_cgroup_resolve_us",
    "agent_rss_mb_baseline",
    "agent_rss_mb",
    "agent_rss_mb_portal_down",
)


def _busy() -> dict[int, BusyGpu]:
    return {i: BusyGpu(pod_uid=f"00000000-0000-4000-8000-{i:012d}") for i in range(0, GPUS, 2)}


def _pass_ms(loop: AgentLoop) -> float:
    timings = []
    for _ in range(PASSES):
        started = time.perf_counter()
        loop.tick()
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


def _loop(sampler: Any, host_proc: Path) -> AgentLoop:
    return AgentLoop(
        node_name="bench-node",
        sampler=sampler,
        interval_seconds=5,
        host_proc=host_proc,
        latest=LatestReport(),
        stats=AgentStats(),
    )


def run(ctx: object) -> Iterator[tuple[str, float]]:
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        host_proc = Path(tmp)
        sampler = SimulatedSampler("bench-node", GPUS, "Tesla P100-PCIE-16GB", "12.2", busy_fn=_busy, seed=1)
        pass_ms = _pass_ms(_loop(sampler, host_proc))
        yield "agent_sample_ms_simulated", pass_ms / GPUS
        yield "agent_pass_ms_simulated", pass_ms

        from agent.nvml import NvmlSampler, NvmlUnavailable

        try:
            nvml = NvmlSampler()
        except NvmlUnavailable as exc:
            print(f"# agent_sample_ms not measured: NVML not available here ({exc})", file=sys.stderr)
        else:
            try:
                count = max(1, len(nvml.sample().gpus))
                yield "agent_sample_ms", _pass_ms(_loop(nvml, Path("/proc"))) / count
            finally:
                nvml.close()

        cid = "0123456789abcdef" * 4
        pids = range(1000, 1200)
        for pid in pids:
            (host_proc / str(pid)).mkdir()
            (host_proc / str(pid) / "cgroup").write_text(
                f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                f"5f1c2d3e_4b5a_4c6d_8e7f_{pid:012d}.slice/cri-containerd-{cid}.scope\n"
            )
        started = time.perf_counter()
        for _ in range(10):
            for pid in pids:
                resolve_pid(pid, host_proc)
        yield "agent_cgroup_resolve_us", (time.perf_counter() - started) / (10 * len(pids)) * 1e6

    with _Receiver() as portal_url:
        up = _rss_child(portal_url)
    down = _rss_child("http://127.0.0.1:9")  # discard port: nothing listens, every push fails
    for label, child in (("portal up", up), ("portal down", down)):
        print(
            f"# agent_rss child, {label}: {HOUR_OF_SAMPLES} samples, {child['sent']} reports sent, "
            f"{child['buffered']} buffered",
            file=sys.stderr,
        )
    yield "agent_rss_mb_baseline", up["baseline_mb"]
    yield "agent_rss_mb", up["after_mb"]
    yield "agent_rss_mb_portal_down", down["after_mb"]


def _rss_child(portal_url: str) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_agent", "--rss-child", portal_url],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


class _Receiver:
    """A stand-in portal in this (the parent) process, so its memory is not counted as the agent's."""

    def __enter__(self) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(201)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_port}"

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _rss_child_main(portal_url: str) -> None:
    """An agent as `python -m agent` builds it (metrics server, pusher), ticked an hour's worth."""
    from prometheus_client import generate_latest

    from agent.metrics import AgentCollector, make_registry, serve_metrics
    from agent.push import Pusher

    stats, latest = AgentStats(), LatestReport()
    sampler = SimulatedSampler("bench-node", GPUS, "Tesla P100-PCIE-16GB", "12.2", busy_fn=_busy, seed=1)
    registry = make_registry(AgentCollector("bench-node", latest, stats, simulated=True))
    _, stop_metrics = serve_metrics(registry, 0, addr="127.0.0.1")
    pusher = Pusher(portal_url, lambda: "bench-token", stats, max_reports=HOUR_OF_SAMPLES, timeout_seconds=2)
    loop = AgentLoop(
        node_name="bench-node",
        sampler=sampler,
        interval_seconds=5,
        host_proc=Path("/proc"),
        latest=latest,
        stats=stats,
        pusher=pusher,
        now=lambda: datetime.now(UTC),
    )
    baseline = _rss_mb()
    for n in range(HOUR_OF_SAMPLES):
        loop.tick()
        if pusher.due():
            pusher.flush()
        if n % 3 == 0:  # Prometheus scraping every 15 s
            generate_latest(registry)
    after = _rss_mb()
    stop_metrics()
    snapshot = stats.snapshot()
    print(
        json.dumps(
            {
                "baseline_mb": round(baseline, 1),
                "after_mb": round(after, 1),
                "sent": snapshot.reports_sent_total,
                "buffered": snapshot.buffer_length,
            }
        )
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--rss-child"]:
        _rss_child_main(sys.argv[2])
    else:
        for name, value in run(None):
            print(f"{name}: {value:.6g}")
