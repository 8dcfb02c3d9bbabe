"""A fake NVML reading source: the sampler protocol, fed by a script of readings or failures.

No GPU exists on the machines these tests run on; this stands in for agent.nvml.NvmlSampler at the
protocol boundary so the loop, report and metrics code runs for real. FakeNvmlLibrary stands in one level
lower, for the pynvml library itself (its real constants, exception classes and MIG call names), so the
real NvmlSampler runs against it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pynvml

from agent.readings import RawGpu, RawProcess, RawSample

GIB = 1024**3


def p100(index: int, *, util: int = 97, processes: Iterable[RawProcess] = (), **overrides: object) -> RawGpu:
    """A plausible reading of one busy Tesla P100, in NVML's units."""
    values: dict[str, object] = {
        "index": index,
        "uuid": f"GPU-0000000{index}-1111-2222-3333-444444444444",
        "name": "Tesla P100-PCIE-16GB",
        "utilization_gpu_percent": util,
        "utilization_memory_percent": 41,
        "memory_used_bytes": 12 * GIB,
        "memory_total_bytes": 16 * GIB,
        "temperature_celsius": 71,
        "power_draw_milliwatts": 211_500,
        "power_limit_milliwatts": 250_000,
        "sm_clock_mhz": 1328,
        "ecc_uncorrected_volatile": 0,
        "xid_errors": 0,
        "processes": tuple(processes),
    }
    values.update(overrides)
    return RawGpu(**values)  # type: ignore[arg-type]


class ScriptedSampler:
    """Returns (or raises) the scripted items in order, repeating the last one forever."""

    simulated = False

    def __init__(self, *script: RawSample | BaseException) -> None:
        self._script = list(script)
        self.calls = 0
        self.closed = False

    def sample(self) -> RawSample:
        item = self._script[min(self.calls, len(self._script) - 1)]
        self.calls += 1
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self.closed = True


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
