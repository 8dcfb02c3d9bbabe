"""Simulated GPU readings for nodes without GPUs: the local GPU cluster and page development.

Honest by construction: the sampler says `simulated = True`, so every report carries
`"simulated": true` and the metrics carry `simulated="true"` on gpuportal_agent_info; UUIDs start with
"GPU-SIM-" and process IDs are made up (they are not host processes).

Interface (kept small for the node simulator that will drive it):

    SimulatedSampler(node_name, gpu_count, model, cuda_version, busy_fn=None, *, seed=None)
    sampler.sample() -> RawSample        # the same protocol as the NVML source

`busy_fn()` is called once per pass and returns {gpu_index: BusyGpu(pod_uid=..., ...)} for the GPUs that
a pod holds right now; GPUs not in the mapping are idle. A held GPU runs at a training-like 85-100 %
utilization unless BusyGpu.utilization_percent says otherwise (e.g. 2 for a notebook that holds a GPU
and does nothing, which is what the idle-service policy looks for). The other readings (memory,
temperature, power, clock) follow the utilization plausibly for the model; temperature moves
gradually from pass to pass as a real card's does.
"""

from __future__ import annotations

import random
import uuid as uuid_module
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.cgroups import PodRef
from agent.readings import RawGpu, RawProcess, RawSample


@dataclass(frozen=True)
class BusyGpu:
    # None: the GPU is busy with a process that belongs to no pod (or none the simulator names).
    pod_uid: str | None = None
    container_id: str | None = None
    # None: a training-like load (85-100 %). A number pins it (0-100), e.g. an idle notebook.
    utilization_percent: float | None = None


@dataclass(frozen=True)
class GpuModel:
    memory_total_bytes: int
    power_limit_watts: float
    idle_power_watts: float
    idle_clock_mhz: int
    boost_clock_mhz: int


_GIB = 1024**3
# Published figures for the models the portal's GPU types name; anything else gets the fallback.
MODELS: dict[str, GpuModel] = {
    "Tesla K80": GpuModel(12 * _GIB, 149.0, 25.0, 324, 875),
    "GRID K2": GpuModel(4 * _GIB, 117.0, 18.0, 324, 745),
    "Tesla P100-PCIE-16GB": GpuModel(16 * _GIB, 250.0, 28.0, 405, 1328),
    "Tesla V100-SXM2-16GB": GpuModel(16 * _GIB, 300.0, 40.0, 135, 1530),
    "NVIDIA A100-SXM4-40GB": GpuModel(40 * _GIB, 400.0, 55.0, 210, 1410),
    "NVIDIA H100 80GB HBM3": GpuModel(80 * _GIB, 700.0, 70.0, 345, 1980),
}
_FALLBACK = GpuModel(16 * _GIB, 250.0, 30.0, 300, 1400)
_AMBIENT_CELSIUS = 31.0
_DRIVER_VERSION = "535.104.05"


class SimulatedSampler:
    simulated = True

    def __init__(
        self,
        node_name: str,
        gpu_count: int,
        model: str,
        cuda_version: str,
        busy_fn: Callable[[], Mapping[int, BusyGpu]] | None = None,
        *,
        seed: int | None = None,
        driver_version: str = _DRIVER_VERSION,
    ) -> None:
        major, _, minor = cuda_version.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            raise ValueError(f"cuda_version must look like '12.2', got {cuda_version!r}")
        if gpu_count < 0:
            raise ValueError("gpu_count must not be negative")
        self.node_name = node_name
        self.gpu_count = gpu_count
        self.model = model
        self.cuda_version = cuda_version
        self._cuda_raw = int(major) * 1000 + int(minor) * 10
        self._driver_version = driver_version
        self._busy_fn = busy_fn or dict
        self._spec = MODELS.get(model, _FALLBACK)
        self._random = random.Random(seed)
        # Stable across restarts for one node, so the portal sees the same GPUs again.
        self._uuids = [
            "GPU-SIM-" + str(uuid_module.uuid5(uuid_module.NAMESPACE_DNS, f"{node_name}/gpu/{i}"))
            for i in range(gpu_count)
        ]
        self._temperature = [_AMBIENT_CELSIUS] * gpu_count

    def sample(self) -> RawSample:
        busy = self._busy_fn()
        gpus = tuple(self._gpu(index, busy.get(index)) for index in range(self.gpu_count))
        return RawSample(driver_version=self._driver_version, cuda_driver_version=self._cuda_raw, gpus=gpus)

    def _gpu(self, index: int, busy: BusyGpu | None) -> RawGpu:
        spec, rnd = self._spec, self._random
        if busy is None:
            load = 0.0
        elif busy.utilization_percent is None:
            load = rnd.uniform(0.85, 1.0)
        else:
            load = max(0.0, min(1.0, busy.utilization_percent / 100))
        # A card heats towards a target set by its load and gets about a third of the way each pass.
        target = _AMBIENT_CELSIUS + 50 * load + rnd.uniform(-1, 1)
        self._temperature[index] += (target - self._temperature[index]) / 3
        processes: tuple[RawProcess, ...] = ()
        used = 0
        if busy is not None:
            # A framework reserves most of the memory as soon as it starts, busy or not.
            used = int(spec.memory_total_bytes * rnd.uniform(0.55, 0.9))
            processes = (
                RawProcess(
                    # Made-up PIDs above Linux's default pid_max, so they can never be mistaken for real.
                    pid=5_000_000 + index,
                    used_memory_bytes=used,
                    pod=PodRef(pod_uid=busy.pod_uid, container_id=busy.container_id) if busy.pod_uid else None,
                ),
            )
        power = spec.idle_power_watts + (spec.power_limit_watts - spec.idle_power_watts) * load * 0.9
        return RawGpu(
            index=index,
            uuid=self._uuids[index],
            name=self.model,
            utilization_gpu_percent=round(load * 100),
            utilization_memory_percent=round(load * rnd.uniform(30, 60)),
            # The driver's own reservation shows as a few MiB used even on an idle card.
            memory_used_bytes=used + 4 * 1024**2,
            memory_total_bytes=spec.memory_total_bytes,
            temperature_celsius=round(self._temperature[index]),
            power_draw_milliwatts=round(power * 1000 * rnd.uniform(0.97, 1.03)),
            power_limit_milliwatts=round(spec.power_limit_watts * 1000),
            sm_clock_mhz=spec.boost_clock_mhz if load > 0.05 else spec.idle_clock_mhz,
            ecc_uncorrected_volatile=0,
            xid_errors=0,
            processes=processes,
        )

    def close(self) -> None:
        pass
