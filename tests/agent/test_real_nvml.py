"""The agent against a real GPU's NVML: skipped wherever NVML does not answer (this machine, CI).

Run on a machine with an NVIDIA driver, without the portal's Django or test plugins:

    python3 -m pytest --noconftest -p no:cacheprovider -c /dev/null --rootdir=. tests/agent/test_real_nvml.py -v

The agent needs only pynvml and prometheus_client (devtools/device_check.sh carries the pinned pynvml).
What is checked is what an admin reads off a node: the GPU's identity and readings, a CUDA process's
memory seen by PID while it runs, the report the portal ingests (kept as a JSON file when
GPU_REPORT_OUT names one), the /metrics page of a real `python -m agent` process, and its clean exit.
A CUDA load needs PyTorch; where it is missing those tests are skipped.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pynvml
import pytest

from agent.cgroups import resolve_pid
from agent.metrics import AgentCollector, LatestReport, make_registry
from agent.nvml import NvmlSampler
from agent.report import Report, build_report
from agent.stats import AgentStats

REPO = Path(__file__).resolve().parents[2]
GIB = 1 << 30


def _nvml_answers() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


pytestmark = pytest.mark.skipif(not _nvml_answers(), reason="no working NVML on this machine (no NVIDIA driver)")

# Holds `HOLD_GIB` of GPU memory and keeps the GPU busy with matrix products until killed; prints "ready"
# once both are true, so the test reads NVML while the load is there.
CUDA_LOAD = """
import os, sys, torch
hold = torch.empty(int(float(os.environ["HOLD_GIB"]) * (1 << 30)), dtype=torch.uint8, device="cuda")
a = torch.randn(4096, 4096, device="cuda")
b = a @ a
torch.cuda.synchronize()
print("ready", flush=True)
while True:
    for _ in range(50):
        b = a @ a
    torch.cuda.synchronize()
"""


def _has_torch_cuda() -> bool:
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    try:
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def sampler():
    s = NvmlSampler()
    yield s
    s.close()


def _start_load(hold_gib: float) -> subprocess.Popen:
    env = os.environ | {"HOLD_GIB": str(hold_gib), "CUDA_VISIBLE_DEVICES": "0"}
    proc = subprocess.Popen([sys.executable, "-c", CUDA_LOAD], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        pytest.fail("the CUDA load did not start")
    return proc


@pytest.fixture(scope="module")
def cuda_load():
    """A process holding 2 GiB and keeping the first GPU busy; its PID."""
    if not _has_torch_cuda():
        pytest.skip("no PyTorch with CUDA here to make a GPU load")
    proc = _start_load(2)
    yield proc.pid
    proc.kill()
    proc.wait(timeout=30)


def test_every_gpu_names_itself_and_reads_without_errors(sampler):
    raw = sampler.sample()
    assert raw.gpus, "NVML answered but listed no GPU"
    assert raw.driver_version
    assert raw.driver_version[0].isdigit()
    assert raw.cuda_driver_version is not None
    assert raw.cuda_driver_version >= 11000
    for gpu in raw.gpus:
        assert not gpu.lost
        assert (gpu.uuid or "").startswith("GPU-"), gpu.uuid
        assert "NVIDIA" in (gpu.name or "").upper() or (gpu.name or "").startswith("Tesla"), gpu.name
        assert gpu.errors == (), gpu.errors
        assert gpu.memory_total_bytes is not None
        assert gpu.memory_total_bytes >= 4 * GIB
        assert 0 <= (gpu.memory_used_bytes or 0) <= gpu.memory_total_bytes
        assert gpu.utilization_gpu_percent is not None
        assert 0 <= gpu.utilization_gpu_percent <= 100
        assert gpu.temperature_celsius is not None
        assert 0 < gpu.temperature_celsius < 120
        if gpu.power_draw_milliwatts is not None:
            assert 0 < gpu.power_draw_milliwatts <= (gpu.power_limit_milliwatts or 10**7)
        assert gpu.sm_clock_mhz is not None
        assert gpu.sm_clock_mhz > 0
        # MIG is either off (no devices) or on with devices that name themselves; never an error.
        assert gpu.mig_enabled in (None, False, True)
        if gpu.mig_enabled:
            assert all(mig.uuid and mig.uuid.startswith("MIG-") for mig in gpu.mig_devices)
    assert raw.nvml_errors == 0


def test_a_cuda_process_is_seen_with_its_memory_while_it_runs(sampler, cuda_load):
    seen = None
    busy = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        gpu = sampler.sample().gpus[0]
        seen = next((p for p in gpu.processes if p.pid == cuda_load), seen)
        busy = max(busy, gpu.utilization_gpu_percent or 0)
        if seen is not None and busy > 0:
            break
        time.sleep(0.5)
    pids = [p.pid for p in sampler.sample().gpus[0].processes]
    assert seen is not None, f"NVML did not list the CUDA process {cuda_load} (it listed {pids})"
    assert seen.used_memory_bytes is not None
    assert seen.used_memory_bytes >= 2 * GIB
    assert busy > 0, "the GPU never read busy under a matrix-product loop"
    # Not in a pod here: the agent attributes it to no pod, without an error.
    assert resolve_pid(cuda_load, Path("/proc")) is None


def test_two_processes_sharing_one_gpu_are_each_seen_with_their_own_memory(sampler, cuda_load):
    """What a time-sliced GPU looks like to the agent: several processes (several pods' containers) on one
    GPU, each with its own memory, so each pod is attributed its share."""
    second = _start_load(1)
    try:
        deadline = time.monotonic() + 30
        found: dict[int, int | None] = {}
        while time.monotonic() < deadline and len(found) < 2:
            processes = sampler.sample().gpus[0].processes
            found = {p.pid: p.used_memory_bytes for p in processes if p.pid in (cuda_load, second.pid)}
            time.sleep(0.5)
    finally:
        second.kill()
        second.wait(timeout=30)
    assert set(found) == {cuda_load, second.pid}, found
    assert (found[cuda_load] or 0) >= 2 * GIB
    assert GIB <= (found[second.pid] or 0) < 2 * GIB + GIB // 2


def test_the_report_round_trips_and_the_metrics_name_the_gpu(sampler):
    raw = sampler.sample()
    report = build_report(
        raw,
        node="gpu-check",
        simulated=False,
        timestamp=datetime.now(UTC),
        interval_seconds=5.0,
        agent_version="check",
    )
    body = json.loads(json.dumps(report.to_dict()))
    assert Report.from_dict(body) == report
    if out := os.environ.get("GPU_REPORT_OUT"):
        Path(out).write_text(json.dumps(body, indent=2) + "\n")

    latest = LatestReport(nvml_available=True)
    latest.set(report)
    registry = make_registry(AgentCollector("gpu-check", latest, AgentStats(), simulated=False))
    uuid = raw.gpus[0].uuid
    total = registry.get_sample_value(
        "gpuportal_gpu_memory_total_bytes",
        {"node": "gpu-check", "gpu": "0", "uuid": uuid, "model": raw.gpus[0].name, "pod_uid": ""},
    )
    assert total == raw.gpus[0].memory_total_bytes


def test_sampling_is_cheap_enough_for_a_five_second_interval(sampler):
    timings = []
    for _ in range(20):
        start = time.perf_counter()
        sampler.sample()
        timings.append(time.perf_counter() - start)
    median = statistics.median(timings)
    print(f"agent_nvml_sample_ms: {median * 1000:.2f} (median of 20, {len(sampler.sample().gpus)} GPUs)")
    # A budget against the interval, not a speed claim: a pass must fit well inside the default 5 s.
    assert median < 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_agent_process_serves_real_readings_and_stops_cleanly(tmp_path):
    port = _free_port()
    env = os.environ | {
        "NODE_NAME": "gpu-check",
        "METRICS_PORT": str(port),
        "SAMPLE_INTERVAL_SECONDS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    log = tmp_path / "agent.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "agent"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        page = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "gpuportal_gpu_memory_total_bytes{" not in page:
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    page = response.read().decode()
            except OSError:
                continue
        assert "gpuportal_agent_nvml_available" in page, log.read_text()
        assert 'gpuportal_agent_nvml_available{node="gpu-check"} 1.0' in page, page[:2000]
        assert 'simulated="false"' in page
        assert "gpuportal_gpu_memory_total_bytes{" in page, page[:2000]
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text()
