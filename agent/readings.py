"""Raw readings, in NVML's own units, and the protocol every reading source implements.

A source (the real NVML one in agent/nvml.py, the simulated one in agent/simulated.py, or a test's
fake) only reads; turning readings into the report the portal receives is the pure function
agent.report.build_report. Keeping NVML's units here (milliwatts, bytes, CUDA as 12020) means the
source modules stay thin and the conversions are tested once, without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from agent.cgroups import PodRef


@dataclass(frozen=True)
class RawProcess:
    pid: int
    used_memory_bytes: int | None
    # A source that already knows the pod (the simulated one) sets this; for real processes the
    # agent resolves it from /proc/<pid>/cgroup.
    pod: PodRef | None = None


@dataclass(frozen=True)
class RawMigDevice:
    """One MIG device (a slice with its own memory and compute) of a GPU in MIG mode."""

    index: int  # its place among the GPU's MIG devices (nvmlDeviceGetMigDeviceHandleByIndex)
    uuid: str | None = None  # MIG-<uuid>: what NVIDIA_VISIBLE_DEVICES names, so what a pod was given
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    # Most drivers answer "not supported" for a MIG device's utilisation (DCGM's profiling has it): None.
    utilization_gpu_percent: int | None = None
    processes: tuple[RawProcess, ...] = ()


@dataclass(frozen=True)
class RawGpu:
    index: int
    uuid: str | None = None
    name: str | None = None
    # True when NVML said NVML_ERROR_GPU_IS_LOST: the GPU fell off the bus; all readings are None.
    lost: bool = False
    utilization_gpu_percent: int | None = None
    utilization_memory_percent: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_celsius: int | None = None
    power_draw_milliwatts: int | None = None
    power_limit_milliwatts: int | None = None
    sm_clock_mhz: int | None = None
    ecc_uncorrected_volatile: int | None = None
    # XID critical errors seen by this agent since it started, and the last XID code; None where
    # the GPU does not support XID events.
    xid_errors: int | None = None
    last_xid: int | None = None
    processes: tuple[RawProcess, ...] = ()
    # NVML errors other than "not supported" met while reading this GPU, e.g. "power: Unknown Error".
    errors: tuple[str, ...] = ()
    # MIG mode as NVML says it (None: the GPU cannot do MIG), and its MIG devices when enabled.
    mig_enabled: bool | None = None
    mig_devices: tuple[RawMigDevice, ...] = ()

    def all_processes(self) -> tuple[RawProcess, ...]:
        """Its processes and those of its MIG devices (to resolve their pods once)."""
        return self.processes + tuple(p for mig in self.mig_devices for p in mig.processes)


@dataclass(frozen=True)
class RawSample:
    driver_version: str | None
    # As nvmlSystemGetCudaDriverVersion returns it: 1000 * major + 10 * minor (12020 is CUDA 12.2).
    cuda_driver_version: int | None
    gpus: tuple[RawGpu, ...] = ()
    # How many NVML calls failed in this pass (not counting "not supported"), for the agent's metrics.
    nvml_errors: int = 0


class Sampler(Protocol):
    """What the agent loop needs from a reading source."""

    # True for the simulated source; carried into every report and metric so nobody mistakes it.
    simulated: bool

    def sample(self) -> RawSample:
        """One pass over every GPU. May raise for a failure of the whole pass (the loop survives it)."""
        ...

    def close(self) -> None: ...
