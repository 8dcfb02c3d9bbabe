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
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from agent.nvml import NvmlSampler, NvmlUnavailable

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


@dataclass(frozen=True)
class Fail:
    """A reading that NVML answers with this error code."""

    code: int


class FakeNvmlLibrary(SimpleNamespace):
    """The subset of pynvml the sampler calls, with pynvml's real constants and exception classes."""

    def __init__(self, gpus: list[dict[str, Any]], *, init_error: int | None = None) -> None:
        super().__init__()
        for name in dir(pynvml):
            if name.startswith(("NVML_", "nvmlEventType")) or name == "NVMLError":
                setattr(self, name, getattr(pynvml, name))
        self.gpus = gpus
        self.init_error = init_error
        self.events: list[Any] = []
        self.shutdown = False

    def _gpu(self, handle: int) -> dict[str, Any]:
        gpu = self.gpus[handle]
        if gpu.get("lost"):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def _reading(self, handle: int, key: str) -> Any:
        value = self._gpu(handle).get(key, Fail(pynvml.NVML_ERROR_NOT_SUPPORTED))
        if isinstance(value, Fail):
            raise pynvml.NVMLError(value.code)
        return value

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "535.104.05"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12020

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        if isinstance(handle, tuple):
            return self._mig(handle)["uuid"]
        return self._gpu(handle)["uuid"]

    # MIG, with pynvml's names: a GPU dict's "mig" is a list of its MIG devices (None: an empty slot);
    # a MIG device's handle is ("mig", gpu, index).
    def _mig(self, handle: tuple) -> dict[str, Any]:
        return self.gpus[handle[1]]["mig"][handle[2]]

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        if "mig" not in self._gpu(handle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [pynvml.NVML_DEVICE_MIG_ENABLE] * 2 if self.gpus[handle]["mig"] else [0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: int) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: int, index: int) -> tuple:
        slots = self._gpu(handle)["mig"]
        if index >= len(slots) or slots[index] is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", handle, index)

    def nvmlDeviceGetGpuInstanceId(self, handle: tuple) -> int:
        return self._mig(handle)["gi"]

    def nvmlDeviceGetComputeInstanceId(self, handle: tuple) -> int:
        return 0

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "Tesla P100-PCIE-16GB"

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        if isinstance(handle, tuple):  # as most drivers answer for a MIG device
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=self._reading(handle, "util"), memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        if isinstance(handle, tuple):
            return SimpleNamespace(used=self._mig(handle)["used"], total=10 * 1024**3)
        return SimpleNamespace(used=self._reading(handle, "used"), total=16 * 1024**3)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        owner = self._mig(handle) if isinstance(handle, tuple) else self._gpu(handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in owner.get("procs", [])]

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._reading(handle, "temp")

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._reading(handle, "power")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return 250_000

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        assert clock == pynvml.NVML_CLOCK_SM
        return 1328

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter: int) -> int:
        assert (error_type, counter) == (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        return self._reading(handle, "ecc")

    def nvmlDeviceGetSupportedEventTypes(self, handle: int) -> int:
        return pynvml.nvmlEventTypeXidCriticalError if self.gpus[handle].get("xid") else 0

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: int, types: int, event_set: str) -> None:
        pass

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> Any:
        assert timeout_ms == 0  # never block the sampling loop
        if not self.events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        return self.events.pop(0)

    def nvmlEventSetFree(self, event_set: str) -> None:
        pass


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
