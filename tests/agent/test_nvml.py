"""The NVML source: the real "no NVML here" path on this machine, and NVML's error codes.

This machine has no libnvidia-ml, so the real pynvml.nvmlInit raises NVMLError_LibraryNotFound; the
first tests exercise exactly that, for real, including the agent process's exit code and message.
(On a machine with a working NVML they are skipped rather than failing.)

The rest hand NvmlSampler a stand-in for the pynvml *library* — the external dependency, not the
code under test — that raises pynvml's real exception classes, to show how the sampler turns
"not supported", "GPU is lost" and other failures into readings.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from agent.nvml import NvmlSampler, NvmlUnavailable
from tests.agent.fakes import Fail, FakeNvmlLibrary

REPO = Path(__file__).resolve().parents[2]


def _real_nvml_works() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


needs_no_nvml = pytest.mark.skipif(_real_nvml_works(), reason="this machine has a working NVML")


@needs_no_nvml
def test_real_pynvml_without_the_library_is_reported_as_unavailable():
    with pytest.raises(NvmlUnavailable, match="NVML Shared Library Not Found") as caught:
        NvmlSampler()
    assert isinstance(caught.value.__cause__, pynvml.NVMLError_LibraryNotFound)


@needs_no_nvml
def test_agent_without_nvml_says_so_in_one_line_and_exits_69(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIMULATE", "PORTAL_URL", "AGENT_TOKEN"))}
    env.update({"NODE_NAME": "gpu-node-1", "METRICS_PORT": "0", "PYTHONPATH": str(REPO)})
    result = subprocess.run(
        [sys.executable, "-m", "agent"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 69
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].endswith(
        "NVML not available on this node: NVML Shared Library Not Found; is the NVIDIA driver installed "
        "and the container started with the NVIDIA runtime?"
    )
    assert result.stdout == ""


def _gpu(index: int, **values: Any) -> dict[str, Any]:
    base = {"uuid": f"GPU-{index}", "util": 90, "used": 1024, "temp": 70, "power": 200_000, "ecc": 0}
    base.update(values)
    return base


def test_reads_every_gpu_in_nvml_units():
    nvml = FakeNvmlLibrary([_gpu(0, procs=[(4242, 1024)]), _gpu(1)])
    sample = NvmlSampler(nvml).sample()
    assert sample.driver_version == "535.104.05"
    assert sample.cuda_driver_version == 12020
    assert sample.nvml_errors == 0
    gpu = sample.gpus[0]
    assert (gpu.uuid, gpu.name, gpu.utilization_gpu_percent, gpu.power_draw_milliwatts) == (
        "GPU-0",
        "Tesla P100-PCIE-16GB",
        90,
        200_000,
    )
    assert [(p.pid, p.used_memory_bytes, p.pod) for p in gpu.processes] == [(4242, 1024, None)]


def test_not_supported_is_none_and_not_an_error():
    nvml = FakeNvmlLibrary(
        [_gpu(0, ecc=Fail(pynvml.NVML_ERROR_NOT_SUPPORTED), power=Fail(pynvml.NVML_ERROR_NOT_SUPPORTED))]
    )
    sample = NvmlSampler(nvml).sample()
    gpu = sample.gpus[0]
    assert gpu.ecc_uncorrected_volatile is None
    assert gpu.power_draw_milliwatts is None
    assert gpu.xid_errors is None  # no XID events on this GPU
    assert gpu.errors == ()
    assert sample.nvml_errors == 0


def test_other_failures_are_none_plus_an_error_entry():
    nvml = FakeNvmlLibrary([_gpu(0, temp=Fail(pynvml.NVML_ERROR_UNKNOWN))])
    sample = NvmlSampler(nvml).sample()
    assert sample.gpus[0].temperature_celsius is None
    assert sample.gpus[0].utilization_gpu_percent == 90
    assert sample.gpus[0].errors == ("temperature: Unknown Error",)
    assert sample.nvml_errors == 1


def test_a_gpu_that_falls_off_the_bus_is_lost_and_the_others_still_read(caplog):
    nvml = FakeNvmlLibrary([_gpu(0), _gpu(1), _gpu(2)])
    sampler = NvmlSampler(nvml)
    nvml.gpus[1]["lost"] = True
    for _ in range(3):
        sample = sampler.sample()
    assert [g.lost for g in sample.gpus] == [False, True, False]
    assert sample.gpus[1].uuid == "GPU-1"  # remembered from before the loss
    assert sample.gpus[1].utilization_gpu_percent is None
    assert sample.gpus[2].utilization_gpu_percent == 90
    assert caplog.text.count("is lost") == 1  # said once, not every pass


def test_xid_events_are_counted_per_gpu_without_blocking():
    nvml = FakeNvmlLibrary([_gpu(0, xid=True), _gpu(1, xid=True), _gpu(2)])
    sampler = NvmlSampler(nvml)
    nvml.events = [SimpleNamespace(device=1, eventData=79), SimpleNamespace(device=1, eventData=48)]
    sample = sampler.sample()
    assert [(g.xid_errors, g.last_xid) for g in sample.gpus] == [(0, None), (2, 48), (None, None)]
    assert sampler.sample().gpus[1].xid_errors == 2  # drained: not counted twice


def test_init_failure_is_unavailable_and_close_shuts_nvml_down():
    with pytest.raises(NvmlUnavailable, match="Driver Not Loaded"):
        NvmlSampler(FakeNvmlLibrary([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    nvml = FakeNvmlLibrary([_gpu(0)])
    sampler = NvmlSampler(nvml)
    sampler.close()
    sampler.close()  # idempotent
    assert nvml.shutdown


def test_a_lost_gpu_that_comes_back_after_a_reset_is_read_again(caplog):
    caplog.set_level(logging.INFO)
    nvml = FakeNvmlLibrary([_gpu(0)])
    sampler = NvmlSampler(nvml)
    nvml.gpus[0]["lost"] = True
    assert sampler.sample().gpus[0].lost
    nvml.gpus[0]["lost"] = False
    assert sampler.sample().gpus[0].utilization_gpu_percent == 90
    nvml.gpus[0]["lost"] = True
    assert sampler.sample().gpus[0].lost
    assert caplog.text.count("is lost") == 2  # each loss is said once
    assert "answers again" in caplog.text


def test_mig_devices_are_read_with_their_instances_memory_and_processes():
    slices = [
        {"uuid": "MIG-a", "gi": 7, "used": 512, "procs": [(4242, 512)]},
        None,
        {"uuid": "MIG-c", "gi": 9, "used": 0},
    ]
    nvml = FakeNvmlLibrary([_gpu(0, mig=slices), _gpu(1, mig=[]), _gpu(2)])
    sample = NvmlSampler(nvml).sample()
    assert sample.nvml_errors == 0  # an empty slot and per-slice utilisation "not supported" are no errors
    mig_gpu, mig_off, no_mig = sample.gpus
    assert (mig_gpu.mig_enabled, mig_off.mig_enabled, no_mig.mig_enabled) == (True, False, None)
    assert [(m.index, m.uuid, m.gpu_instance_id, m.memory_used_bytes) for m in mig_gpu.mig_devices] == [
        (0, "MIG-a", 7, 512),
        (2, "MIG-c", 9, 0),
    ]
    first = mig_gpu.mig_devices[0]
    assert first.utilization_gpu_percent is None
    assert first.memory_total_bytes == 10 * 1024**3
    assert [(p.pid, p.used_memory_bytes) for p in first.processes] == [(4242, 512)]
    assert mig_off.mig_devices == ()
    assert no_mig.mig_devices == ()
