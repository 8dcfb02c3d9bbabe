"""The one module that calls NVML (through pynvml, package nvidia-ml-py).

It stays thin: it reads, in NVML's units, and turns NVML's error codes into what the agent needs —
"not supported" becomes None, NVML_ERROR_GPU_IS_LOST marks that GPU lost (the others are still read),
any other failure of one reading becomes None plus an entry in the GPU's `errors`. Converting the
readings into a report happens elsewhere (agent.report.build_report), so it is tested without a GPU.

`nvml` is the pynvml module unless a test passes a stand-in; nothing else here is replaceable.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

import pynvml

from agent.readings import RawGpu, RawMigDevice, RawProcess, RawSample

log = logging.getLogger(__name__)

T = TypeVar("T")


class NvmlUnavailable(Exception):
    """NVML cannot be used on this node at all (no driver, no library, not the NVIDIA runtime)."""


class _GpuLost(Exception):
    pass


class NvmlSampler:
    simulated = False

    def __init__(self, nvml: ModuleType | Any = pynvml) -> None:
        self._nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(str(exc) or type(exc).__name__) from exc
        self._open = True
        # Identity read once: a GPU that is later lost is still reported by uuid and name.
        self._identity: dict[int, tuple[str | None, str | None]] = {}
        self._xid_counts: dict[int, int] = {}
        self._last_xid: dict[int, int] = {}
        self._xid_supported: set[int] = set()
        self._event_set: Any = None
        self._handle_index: dict[int | None, int] = {}
        self._lost: set[int] = set()
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            self.close()
            raise NvmlUnavailable(f"cannot count GPUs: {exc}") from exc
        for index in range(count):
            self._prepare(index)

    def _prepare(self, index: int) -> None:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            self._identity[index] = (nvml.nvmlDeviceGetUUID(handle), nvml.nvmlDeviceGetName(handle))
        except nvml.NVMLError as exc:
            log.warning("GPU %d: cannot read its identity: %s", index, exc)
            return
        # XID errors arrive only as NVML events; register once and drain without waiting each pass.
        try:
            supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
            if not supported & nvml.nvmlEventTypeXidCriticalError:
                return
            if self._event_set is None:
                self._event_set = nvml.nvmlEventSetCreate()
            nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._event_set)
        except nvml.NVMLError as exc:
            log.info("GPU %d: XID events not available: %s", index, exc)
            return
        self._xid_supported.add(index)
        self._xid_counts[index] = 0
        self._handle_index[_address(handle)] = index

    def sample(self) -> RawSample:
        nvml = self._nvml
        errors: list[str] = []
        driver = self._read(errors, "driver version", nvml.nvmlSystemGetDriverVersion)
        cuda = self._read(errors, "CUDA driver version", nvml.nvmlSystemGetCudaDriverVersion)
        # A failure here (driver gone) fails the whole pass; the loop counts it and tries again.
        count = nvml.nvmlDeviceGetCount()
        self._drain_xid_events(errors)
        gpus = tuple(self._sample_gpu(index) for index in range(count))
        nvml_errors = len(errors) + sum(len(gpu.errors) for gpu in gpus)
        return RawSample(driver_version=driver, cuda_driver_version=cuda, gpus=gpus, nvml_errors=nvml_errors)

    def _sample_gpu(self, index: int) -> RawGpu:
        nvml = self._nvml
        uuid, name = self._identity.get(index, (None, None))
        errors: list[str] = []
        try:
            handle = self._call(nvml.nvmlDeviceGetHandleByIndex, index)
            if index not in self._identity:
                uuid = self._read(errors, "uuid", nvml.nvmlDeviceGetUUID, handle)
                name = self._read(errors, "name", nvml.nvmlDeviceGetName, handle)
                if uuid is not None:
                    self._identity[index] = (uuid, name)

            def read(what: str, fn: Callable[..., T], *args: Any) -> T | None:
                return self._read(errors, what, fn, handle, *args)

            utilization = read("utilization", nvml.nvmlDeviceGetUtilizationRates)
            memory = read("memory", nvml.nvmlDeviceGetMemoryInfo)
            processes = read("processes", self._processes) or []
            mig_enabled, mig_devices = self._mig(errors, handle)
            if index in self._lost:  # back after a reset
                log.info("GPU %d (%s) answers again", index, uuid)
                self._lost.discard(index)
            return RawGpu(
                index=index,
                uuid=uuid,
                name=name,
                utilization_gpu_percent=utilization.gpu if utilization is not None else None,
                utilization_memory_percent=utilization.memory if utilization is not None else None,
                memory_used_bytes=memory.used if memory is not None else None,
                memory_total_bytes=memory.total if memory is not None else None,
                temperature_celsius=read("temperature", nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU),
                power_draw_milliwatts=read("power", nvml.nvmlDeviceGetPowerUsage),
                power_limit_milliwatts=read("power limit", nvml.nvmlDeviceGetEnforcedPowerLimit),
                sm_clock_mhz=read("SM clock", nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM),
                ecc_uncorrected_volatile=read(
                    "ECC",
                    nvml.nvmlDeviceGetTotalEccErrors,
                    nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                    nvml.NVML_VOLATILE_ECC,
                ),
                xid_errors=self._xid_counts.get(index),
                last_xid=self._last_xid.get(index),
                processes=_raw_processes(processes),
                errors=tuple(errors),
                mig_enabled=mig_enabled,
                mig_devices=mig_devices,
            )
        except _GpuLost:
            if index not in self._lost:  # say it once, not every pass
                self._lost.add(index)
                log.error("GPU %d (%s) is lost: it fell off the bus or needs a reset", index, uuid)
            return RawGpu(index=index, uuid=uuid, name=name, lost=True, errors=("GPU is lost",))

    def _mig(self, errors: list[str], handle: Any) -> tuple[bool | None, tuple[RawMigDevice, ...]]:
        """MIG mode (None where the GPU has none) and, when it is on, every MIG device's identity, memory,
        utilisation (usually not supported per slice) and processes."""
        nvml = self._nvml
        mode = self._read(errors, "MIG mode", nvml.nvmlDeviceGetMigMode, handle)
        if mode is None:
            return None, ()
        current = mode[0] if isinstance(mode, list | tuple) else mode
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            return False, ()
        most = self._read(errors, "MIG device count", nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
        devices = [device for index in range(most) if (device := self._mig_device(errors, handle, index)) is not None]
        return True, tuple(devices)

    def _mig_device(self, errors: list[str], handle: Any, index: int) -> RawMigDevice | None:
        """The MIG device in slot `index` (None: no MIG device made in that slot)."""
        nvml = self._nvml
        try:
            mig = self._call(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, index)
        except nvml.NVMLError as exc:
            if _code(exc) not in (nvml.NVML_ERROR_NOT_FOUND, nvml.NVML_ERROR_INVALID_ARGUMENT):
                errors.append(f"MIG device {index}: {exc}")
            return None  # a slot with no MIG device made in it

        def read(what: str, fn: Callable[..., T]) -> T | None:
            return self._read(errors, f"MIG device {index} {what}", fn, mig)

        memory = read("memory", nvml.nvmlDeviceGetMemoryInfo)
        utilization = read("utilization", nvml.nvmlDeviceGetUtilizationRates)
        return RawMigDevice(
            index=index,
            uuid=read("uuid", nvml.nvmlDeviceGetUUID),
            gpu_instance_id=read("GPU instance", nvml.nvmlDeviceGetGpuInstanceId),
            compute_instance_id=read("compute instance", nvml.nvmlDeviceGetComputeInstanceId),
            memory_used_bytes=memory.used if memory is not None else None,
            memory_total_bytes=memory.total if memory is not None else None,
            utilization_gpu_percent=utilization.gpu if utilization is not None else None,
            processes=_raw_processes(read("processes", self._processes) or []),
        )

    def _processes(self, handle: Any) -> list[Any]:
        nvml = self._nvml
        try:
            return nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except nvml.NVMLError as exc:
            # Drivers older than the v3 process struct (R470 and before) only have the v2 call.
            if _code(exc) != nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                raise
            return nvml.nvmlDeviceGetComputeRunningProcesses_v2(handle)

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            if _code(exc) == self._nvml.NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost from exc
            raise

    def _read(self, errors: list[str], what: str, fn: Callable[..., T], *args: Any) -> T | None:
        """One reading: None when unsupported; None and an error entry when it fails otherwise."""
        try:
            return self._call(fn, *args)
        except self._nvml.NVMLError as exc:
            if _code(exc) != self._nvml.NVML_ERROR_NOT_SUPPORTED:
                errors.append(f"{what}: {exc}")
            return None

    def _drain_xid_events(self, errors: list[str]) -> None:
        nvml = self._nvml
        if self._event_set is None:
            return
        # Timeout 0: collect what has arrived since the last pass, never block the sampling loop.
        for _ in range(1000):
            try:
                event = nvml.nvmlEventSetWait(self._event_set, 0)
            except nvml.NVMLError as exc:
                if _code(exc) != nvml.NVML_ERROR_TIMEOUT:
                    errors.append(f"XID events: {exc}")
                return
            index = self._handle_index.get(_address(event.device))
            if index is None:
                continue
            self._xid_counts[index] = self._xid_counts.get(index, 0) + 1
            self._last_xid[index] = int(event.eventData)
            log.warning("GPU %d: XID %d", index, event.eventData)

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        try:
            if self._event_set is not None:
                self._nvml.nvmlEventSetFree(self._event_set)
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.warning("NVML shutdown failed: %s", exc)


def _raw_processes(processes: list[Any]) -> tuple[RawProcess, ...]:
    return tuple(RawProcess(pid=int(p.pid), used_memory_bytes=p.usedGpuMemory) for p in processes)


def _code(exc: BaseException) -> int | None:
    return getattr(exc, "value", None)


def _address(handle: Any) -> int | None:
    # NVML device handles are ctypes pointers; two reads of one GPU give equal addresses, not equal
    # Python objects. A stand-in handle (an int) is its own address.
    if isinstance(handle, int):
        return handle
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None
