"""The sampling loop surviving failures, and the whole agent process end to end (simulated source)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pynvml

from agent.loop import AgentLoop
from agent.metrics import LatestReport
from agent.push import Pusher
from agent.readings import RawGpu, RawProcess, RawSample
from agent.report import Report
from agent.stats import AgentStats
from tests.agent.conftest import FakePortal, free_port
from tests.agent.fakes import GIB, ScriptedSampler, p100

REPO = Path(__file__).resolve().parents[2]
UID = "5f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f"
CID = "0123456789abcdef" * 4


def _loop(
    sampler: ScriptedSampler, host_proc: Path, pusher: Pusher | None = None, stats: AgentStats | None = None
) -> AgentLoop:
    return AgentLoop(
        node_name="gpu-node-1",
        sampler=sampler,
        interval_seconds=0.01,
        host_proc=host_proc,
        latest=LatestReport(),
        stats=stats or AgentStats(),
        pusher=pusher,
        now=lambda: datetime(2026, 11, 22, 3, 0, tzinfo=UTC),
    )


def test_loop_survives_nvml_errors_and_lost_gpus_and_attributes_pods(tmp_path: Path, portal: FakePortal):
    # A real cgroup file for the process NVML will list, under a temporary HOST_PROC.
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"
    )
    good = RawSample("535.104.05", 12020, gpus=(p100(0, processes=[RawProcess(4242, 10 * GIB)]), p100(1)))
    lost = RawSample("535.104.05", 12020, gpus=(p100(0), RawGpu(index=1, uuid="GPU-1", lost=True)), nvml_errors=1)
    sampler = ScriptedSampler(good, pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN), lost)
    stats = AgentStats()
    pusher = Pusher(portal.url, lambda: "t", stats, max_reports=10)
    loop = _loop(sampler, tmp_path, pusher, stats)

    first = loop.tick()
    assert first is not None
    assert first.gpus[0].processes[0].pod_uid == UID
    assert first.gpus[0].processes[0].container_id == CID
    assert loop.latest.nvml_available is True

    assert loop.tick() is None  # the whole pass failed ...
    assert loop.latest.get() == first  # ... the last good report stays up for scrapes
    assert loop.latest.nvml_available is False

    third = loop.tick()
    assert third is not None
    assert [g.state for g in third.gpus] == ["ok", "lost"]
    snapshot = stats.snapshot()
    assert (snapshot.samples_total, snapshot.sample_failures_total, snapshot.nvml_errors_total) == (2, 1, 2)

    assert pusher.flush() is True
    assert [Report.from_dict(r).gpus[1].state for r in portal.reports()] == ["ok", "lost"]


def test_run_keeps_going_through_unexpected_exceptions_until_stopped(tmp_path: Path):
    good = RawSample("535.104.05", 12020, gpus=(p100(0),))
    sampler = ScriptedSampler(RuntimeError("driver hiccup"), ZeroDivisionError(), good)
    loop = _loop(sampler, tmp_path)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 5
    while loop.stats.snapshot().samples_total < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert loop.stats.snapshot().sample_failures_total == 2
    assert loop.stats.snapshot().samples_total >= 3


def test_simulated_agent_process_pushes_and_serves_metrics_then_stops_on_sigterm(portal: FakePortal):
    metrics_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIMULATE", "AGENT_TOKEN"))}
    env.update(
        {
            "PYTHONPATH": str(REPO),
            "NODE_NAME": "sim-node-1",
            "SIMULATE": "1",
            "SIMULATE_GPUS": "2",
            "SIMULATE_BUSY": "1",
            "PORTAL_URL": portal.url,
            "AGENT_TOKEN": "end-to-end-secret",
            "METRICS_PORT": str(metrics_port),
            "SAMPLE_INTERVAL_SECONDS": "0.2",
        }
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "agent"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 20
        while len(portal.received) < 3 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
            metrics = response.read().decode()
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr
    assert len(portal.received) >= 3
    first = portal.received[0]
    assert first.authorization == "Bearer end-to-end-secret"
    report = Report.from_dict(first.body)
    assert report.simulated is True
    assert report.node == "sim-node-1"
    assert [g.utilization_gpu_percent > 0 for g in report.gpus] == [False, True]
    assert 'simulated="true"' in metrics
    assert 'gpuportal_gpu_up{gpu="1"' in metrics
    assert "SIMULATED source" in stderr
    assert "end-to-end-secret" not in stderr
    json.dumps(first.body)


def test_the_agent_never_imports_django():
    # The DaemonSet image runs the agent without the portal's settings; importing Django would break it.
    code = "import sys, agent.__main__; print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'portal', 'jobs')))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
