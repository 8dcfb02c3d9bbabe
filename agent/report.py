"""The report the agent pushes to the portal: its versioned schema, and the pure function building it.

Wire format, schema "gpuportal.agent.report/v1" (JSON, one report per POST to
{PORTAL_URL}/api/v1/agent/reports with "Authorization: Bearer <token>"):

    {
      "schema": "gpuportal.agent.report/v1",
      "node": "gpu-node-1",                 # the Kubernetes node name
      "simulated": false,                   # true for the simulated source: never real hardware
      "timestamp": "2026-11-22T03:00:05.123456+00:00",   # RFC 3339, UTC, when the sample was taken
      "interval_seconds": 5.0,              # the agent's sampling interval
      "agent_version": "0.1.0",
      "driver_version": "535.104.05",       # null when NVML could not say
      "cuda_driver_version": "12.2",        # the highest CUDA version the driver supports, or null
      "gpus": [
        {
          "index": 0, "uuid": "GPU-…", "name": "Tesla P100-PCIE-16GB",
          "state": "ok",                    # "ok", or "lost" (fell off the bus: every reading null)
          "utilization_gpu_percent": 97, "utilization_memory_percent": 41,   # 0..100
          "memory_used_bytes": 12884901888, "memory_total_bytes": 17179869184,
          "temperature_celsius": 71,
          "power_draw_watts": 211.5, "power_limit_watts": 250.0,
          "sm_clock_mhz": 1328,
          "ecc_uncorrected_volatile": 0,    # since the last driver reload
          "xid_errors": 0, "last_xid": null,  # XID critical errors seen since the agent started
          "errors": [],                     # NVML failures met reading this GPU (not "not supported")
          "processes": [
            {"pid": 4242, "used_memory_bytes": 12582912000,
             "pod_uid": "5f1c…", "container_id": "9a0b…"}   # null when not in a pod / not found
          ]
        }
      ],
      "volumes": [                          # optional: persistent volumes mounted on this node
        {"name": "pvc-0f3c…",               # the PersistentVolume's name (the kubelet's directory name)
         "used_bytes": 1073741824,          # bytes in use on it
         "capacity_bytes": 10737418240}     # its filesystem's size; null when it has none of its own
      ]
    }

Every reading is a number or null: null means NVML does not support it on this GPU, or failed to read
it (then "errors" says why). The portal validates an incoming body with Report.from_dict, which raises
ReportError naming the first offending field (e.g. "gpus[1].memory_used_bytes: expected an integer").
A change that removes or retypes a field bumps the version; adding an optional field does not, and
from_dict ignores fields it does not know so an older portal accepts a newer agent's reports.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

from agent.cgroups import PodRef
from agent.readings import RawGpu, RawProcess, RawSample

SCHEMA = "gpuportal.agent.report/v1"
GPU_STATES = ("ok", "lost")
# A node mounts a few dozen volumes at most; a report listing more is refused, and the agent sends no more.
MAX_VOLUMES = 512
# A PersistentVolume's name is a DNS subdomain (what the kubelet names the volume's directory after).
VOLUME_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


class ReportError(ValueError):
    """A report body does not follow the schema; the message starts with the offending field's path."""


class ProcessDict(TypedDict):
    pid: int
    used_memory_bytes: int | None
    pod_uid: str | None
    container_id: str | None


class GpuDict(TypedDict):
    index: int
    uuid: str | None
    name: str | None
    state: str
    utilization_gpu_percent: int | None
    utilization_memory_percent: int | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    temperature_celsius: int | None
    power_draw_watts: float | None
    power_limit_watts: float | None
    sm_clock_mhz: int | None
    ecc_uncorrected_volatile: int | None
    xid_errors: int | None
    last_xid: int | None
    errors: list[str]
    processes: list[ProcessDict]


class VolumeDict(TypedDict):
    name: str
    used_bytes: int
    capacity_bytes: int | None


class ReportDict(TypedDict, total=False):
    schema: str
    node: str
    simulated: bool
    timestamp: str
    interval_seconds: float
    agent_version: str
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: list[GpuDict]
    volumes: list[VolumeDict]


@dataclass(frozen=True)
class VolumeReading:
    """How full one persistent volume mounted on the node is."""

    name: str
    used_bytes: int
    capacity_bytes: int | None = None

    def to_dict(self) -> VolumeDict:
        return {"name": self.name, "used_bytes": self.used_bytes, "capacity_bytes": self.capacity_bytes}

    @classmethod
    def from_dict(cls, data: Any, path: str = "volume") -> VolumeReading:
        body = _object(data, path)
        name = _text(body, "name", path, nullable=False)
        if not VOLUME_NAME.fullmatch(name):
            raise ReportError(f"{path}.name: expected a PersistentVolume name (lower-case DNS subdomain)")
        used = _int(body, "used_bytes", path, nullable=False)
        capacity = _int(body, "capacity_bytes", path)
        if capacity is not None and used > capacity:
            raise ReportError(f"{path}.used_bytes: {used} is more than capacity_bytes ({capacity})")
        return cls(name=name, used_bytes=used, capacity_bytes=capacity)


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    used_memory_bytes: int | None = None
    pod_uid: str | None = None
    container_id: str | None = None

    def to_dict(self) -> ProcessDict:
        return {
            "pid": self.pid,
            "used_memory_bytes": self.used_memory_bytes,
            "pod_uid": self.pod_uid,
            "container_id": self.container_id,
        }

    @classmethod
    def from_dict(cls, data: Any, path: str = "process") -> ProcessReading:
        body = _object(data, path)
        return cls(
            pid=_int(body, "pid", path, nullable=False),
            used_memory_bytes=_int(body, "used_memory_bytes", path),
            pod_uid=_text(body, "pod_uid", path),
            container_id=_text(body, "container_id", path),
        )


_MIG_INTS: dict[str, tuple[int, int | None]] = {
    "gpu_instance_id": (0, None),
    "compute_instance_id": (0, None),
    "memory_used_bytes": (0, None),
    "memory_total_bytes": (0, None),
    "utilization_gpu_percent": (0, 100),
}


@dataclass(frozen=True)
class MigReading:
    """One MIG device of a GPU (issue 40): its identity, memory, utilisation and the pods using it."""

    index: int
    uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    utilization_gpu_percent: int | None = None
    processes: tuple[ProcessReading, ...] = ()

    @property
    def pod_uids(self) -> list[str]:
        return sorted({p.pod_uid for p in self.processes if p.pod_uid})

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            **{key: getattr(self, key) for key in _MIG_INTS},
            "processes": [p.to_dict() for p in self.processes],
        }

    @classmethod
    def from_dict(cls, data: Any, path: str = "mig_device") -> MigReading:
        body = _object(data, path)
        processes = _list(body, "processes", path, required=False)
        return cls(
            index=_int(body, "index", path, nullable=False, minimum=0, maximum=127),
            uuid=_text(body, "uuid", path),
            processes=tuple(
                ProcessReading.from_dict(item, f"{path}.processes[{position}]")
                for position, item in enumerate(processes)
            ),
            **{key: _int(body, key, path, minimum=low, maximum=high) for key, (low, high) in _MIG_INTS.items()},
        )


# Integer readings and their allowed ranges; from_dict checks each one.
_GPU_INTS: dict[str, tuple[int, int | None]] = {
    "utilization_gpu_percent": (0, 100),
    "utilization_memory_percent": (0, 100),
    "memory_used_bytes": (0, None),
    "memory_total_bytes": (0, None),
    "temperature_celsius": (-100, 300),
    "sm_clock_mhz": (0, None),
    "ecc_uncorrected_volatile": (0, None),
    "xid_errors": (0, None),
    "last_xid": (0, None),
}
_GPU_FLOATS = ("power_draw_watts", "power_limit_watts")


@dataclass(frozen=True)
class GpuReading:
    index: int
    uuid: str | None = None
    name: str | None = None
    state: str = "ok"
    utilization_gpu_percent: int | None = None
    utilization_memory_percent: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_celsius: int | None = None
    power_draw_watts: float | None = None
    power_limit_watts: float | None = None
    sm_clock_mhz: int | None = None
    ecc_uncorrected_volatile: int | None = None
    xid_errors: int | None = None
    last_xid: int | None = None
    errors: tuple[str, ...] = ()
    processes: tuple[ProcessReading, ...] = ()
    mig_enabled: bool | None = None  # None: the GPU has no MIG mode (or the agent predates it)
    mig_devices: tuple[MigReading, ...] = ()

    @property
    def pod_uids(self) -> list[str]:
        """The pods with a process on this GPU or one of its MIG devices, sorted, each once."""
        slices = {uid for mig in self.mig_devices for uid in mig.pod_uids}
        return sorted({p.pod_uid for p in self.processes if p.pod_uid} | slices)

    def to_dict(self) -> GpuDict:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "state": self.state,
            "utilization_gpu_percent": self.utilization_gpu_percent,
            "utilization_memory_percent": self.utilization_memory_percent,
            "memory_used_bytes": self.memory_used_bytes,
            "memory_total_bytes": self.memory_total_bytes,
            "temperature_celsius": self.temperature_celsius,
            "power_draw_watts": self.power_draw_watts,
            "power_limit_watts": self.power_limit_watts,
            "sm_clock_mhz": self.sm_clock_mhz,
            "ecc_uncorrected_volatile": self.ecc_uncorrected_volatile,
            "xid_errors": self.xid_errors,
            "last_xid": self.last_xid,
            "errors": list(self.errors),
            "processes": [p.to_dict() for p in self.processes],
            "mig_enabled": self.mig_enabled,
            "mig_devices": [m.to_dict() for m in self.mig_devices],
        }

    @classmethod
    def from_dict(cls, data: Any, path: str = "gpu") -> GpuReading:
        body = _object(data, path)
        state = _text(body, "state", path, nullable=False)
        if state not in GPU_STATES:
            raise ReportError(f"{path}.state: expected one of {', '.join(GPU_STATES)}, got {state!r}")
        ints = {key: _int(body, key, path, minimum=low, maximum=high) for key, (low, high) in _GPU_INTS.items()}
        floats = {key: _float(body, key, path) for key in _GPU_FLOATS}
        errors = _list(body, "errors", path, required=False)
        for position, message in enumerate(errors):
            if not isinstance(message, str):
                raise ReportError(f"{path}.errors[{position}]: expected a string")
        processes = _list(body, "processes", path)
        mig_devices = _list(body, "mig_devices", path, required=False)
        mig_enabled = body.get("mig_enabled")
        if mig_enabled is not None and not isinstance(mig_enabled, bool):
            raise ReportError(f"{path}.mig_enabled: expected true, false or null")
        return cls(
            index=_int(body, "index", path, nullable=False, minimum=0, maximum=1023),
            uuid=_text(body, "uuid", path),
            name=_text(body, "name", path),
            state=state,
            errors=tuple(errors),
            processes=tuple(
                ProcessReading.from_dict(item, f"{path}.processes[{position}]")
                for position, item in enumerate(processes)
            ),
            mig_enabled=mig_enabled,
            mig_devices=tuple(
                MigReading.from_dict(item, f"{path}.mig_devices[{position}]")
                for position, item in enumerate(mig_devices)
            ),
            **ints,
            **floats,
        )


@dataclass(frozen=True)
class Report:
    node: str
    simulated: bool
    timestamp: datetime
    interval_seconds: float
    agent_version: str
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: tuple[GpuReading, ...] = ()
    # Only in reports of a pass that measured volumes (the agent does so less often than it samples GPUs).
    volumes: tuple[VolumeReading, ...] = ()

    def to_dict(self) -> ReportDict:
        body: ReportDict = {
            "schema": SCHEMA,
            "node": self.node,
            "simulated": self.simulated,
            "timestamp": self.timestamp.isoformat(),
            "interval_seconds": self.interval_seconds,
            "agent_version": self.agent_version,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "gpus": [gpu.to_dict() for gpu in self.gpus],
        }
        if self.volumes:
            body["volumes"] = [volume.to_dict() for volume in self.volumes]
        return body

    @classmethod
    def from_dict(cls, data: Any) -> Report:
        """Validate and load a report body; raises ReportError naming the first bad field."""
        body = _object(data, "report")
        schema = body.get("schema")
        if schema != SCHEMA:
            raise ReportError(f"schema: expected {SCHEMA!r}, got {schema!r}")
        node = _text(body, "node", "report", nullable=False)
        if not node:
            raise ReportError("node: must not be empty")
        simulated = body.get("simulated")
        if not isinstance(simulated, bool):
            raise ReportError("simulated: expected true or false")
        raw_time = _text(body, "timestamp", "report", nullable=False)
        try:
            timestamp = datetime.fromisoformat(raw_time)
        except ValueError as exc:
            raise ReportError(f"timestamp: not an RFC 3339 time: {raw_time!r}") from exc
        if timestamp.tzinfo is None:
            raise ReportError("timestamp: must carry a UTC offset")
        interval = _float(body, "interval_seconds", "report", nullable=False)
        cuda = _text(body, "cuda_driver_version", "report")
        if cuda is not None and parse_cuda_version(cuda) is None:
            raise ReportError(f"cuda_driver_version: expected a version like '12.2', got {cuda!r}")
        gpus = tuple(
            GpuReading.from_dict(item, f"gpus[{position}]")
            for position, item in enumerate(_list(body, "gpus", "report"))
        )
        if len({gpu.index for gpu in gpus}) != len(gpus):
            raise ReportError("gpus: the same GPU index appears twice")
        volumes = _volumes(body)
        return cls(
            node=node,
            simulated=simulated,
            timestamp=timestamp,
            interval_seconds=interval,
            agent_version=_text(body, "agent_version", "report", nullable=False),
            driver_version=_text(body, "driver_version", "report"),
            cuda_driver_version=cuda,
            gpus=gpus,
            volumes=volumes,
        )


def _volumes(body: Mapping[str, Any]) -> tuple[VolumeReading, ...]:
    """The optional "volumes" list (reports of older agents have none)."""
    items = _list(body, "volumes", "report", required=False)
    if len(items) > MAX_VOLUMES:
        raise ReportError(f"volumes: at most {MAX_VOLUMES} per report")
    volumes = tuple(VolumeReading.from_dict(item, f"volumes[{position}]") for position, item in enumerate(items))
    if len({volume.name for volume in volumes}) != len(volumes):
        raise ReportError("volumes: the same volume name appears twice")
    return volumes


def format_cuda_version(raw: int | None) -> str | None:
    """NVML's CUDA driver version integer as "major.minor": 12020 -> "12.2", 11080 -> "11.8"."""
    if raw is None or raw <= 0:
        return None
    return f"{raw // 1000}.{(raw % 1000) // 10}"


def parse_cuda_version(text: str) -> tuple[int, int] | None:
    """ "12.2" -> (12, 2), comparable as tuples (so 12.10 sorts after 12.9); None if malformed."""
    major, dot, minor = text.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        return None
    return int(major), int(minor)


def build_report(
    raw: RawSample,
    *,
    node: str,
    simulated: bool,
    timestamp: datetime,
    interval_seconds: float,
    agent_version: str,
    pods: Mapping[int, PodRef] | None = None,
    volumes: Sequence[VolumeReading] = (),
) -> Report:
    """The report for one sample. Pure: `pods` (PID -> pod, resolved by the caller from cgroups) is the
    only outside knowledge, and a process's own `pod` (set by the simulated source) wins over it.
    `volumes` (measured by agent.volumes) go in sorted by name."""
    if timestamp.tzinfo is None:
        raise ValueError("timestamp must be timezone-aware")
    pods = pods or {}
    return Report(
        node=node,
        simulated=simulated,
        timestamp=timestamp.astimezone(UTC),
        interval_seconds=interval_seconds,
        agent_version=agent_version,
        driver_version=raw.driver_version,
        cuda_driver_version=format_cuda_version(raw.cuda_driver_version),
        gpus=tuple(_gpu_reading(gpu, pods) for gpu in sorted(raw.gpus, key=lambda g: g.index)),
        volumes=tuple(sorted(volumes, key=lambda v: v.name)),
    )


def _gpu_reading(gpu: RawGpu, pods: Mapping[int, PodRef]) -> GpuReading:
    if gpu.lost:
        # Whatever NVML said before the loss is stale; report only which GPU it was.
        return GpuReading(index=gpu.index, uuid=gpu.uuid, name=gpu.name, state="lost", errors=gpu.errors)
    processes = _process_readings(gpu.processes, pods)
    mig_devices = tuple(
        MigReading(
            index=mig.index,
            uuid=mig.uuid,
            gpu_instance_id=mig.gpu_instance_id,
            compute_instance_id=mig.compute_instance_id,
            memory_used_bytes=mig.memory_used_bytes,
            memory_total_bytes=mig.memory_total_bytes,
            utilization_gpu_percent=_percent(mig.utilization_gpu_percent),
            processes=_process_readings(mig.processes, pods),
        )
        for mig in sorted(gpu.mig_devices, key=lambda m: m.index)
    )
    return GpuReading(
        index=gpu.index,
        uuid=gpu.uuid,
        name=gpu.name,
        state="ok",
        utilization_gpu_percent=_percent(gpu.utilization_gpu_percent),
        utilization_memory_percent=_percent(gpu.utilization_memory_percent),
        memory_used_bytes=gpu.memory_used_bytes,
        memory_total_bytes=gpu.memory_total_bytes,
        temperature_celsius=gpu.temperature_celsius,
        power_draw_watts=_watts(gpu.power_draw_milliwatts),
        power_limit_watts=_watts(gpu.power_limit_milliwatts),
        sm_clock_mhz=gpu.sm_clock_mhz,
        ecc_uncorrected_volatile=gpu.ecc_uncorrected_volatile,
        xid_errors=gpu.xid_errors,
        last_xid=gpu.last_xid,
        errors=gpu.errors,
        processes=processes,
        mig_enabled=gpu.mig_enabled,
        mig_devices=mig_devices,
    )


def _process_readings(raw: tuple[RawProcess, ...], pods: Mapping[int, PodRef]) -> tuple[ProcessReading, ...]:
    readings = []
    for process in sorted(raw, key=lambda p: p.pid):
        pod = process.pod or pods.get(process.pid)
        readings.append(
            ProcessReading(
                pid=process.pid,
                used_memory_bytes=process.used_memory_bytes,
                pod_uid=pod.pod_uid if pod else None,
                container_id=pod.container_id if pod else None,
            )
        )
    return tuple(readings)


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else round(milliwatts / 1000, 3)


def _percent(value: int | None) -> int | None:
    # NVML's percentages are 0..100 by contract; clamp so one odd reading cannot fail validation.
    return None if value is None else max(0, min(100, value))


# Validation helpers: each names the field's full path in its error.


def _object(data: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ReportError(f"{path}: expected an object")
    return data


def _list(body: Mapping[str, Any], key: str, path: str, *, required: bool = True) -> list[Any]:
    if key not in body and not required:
        return []
    value = body.get(key)
    if not isinstance(value, list):
        raise ReportError(f"{_join(path, key)}: expected a list")
    return value


def _text(body: Mapping[str, Any], key: str, path: str, *, nullable: bool = True) -> Any:
    value = body.get(key)
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise ReportError(f"{_join(path, key)}: expected a string" + (" or null" if nullable else ""))
    if "\x00" in value or len(value) > 1024 or not _encodable(value):
        raise ReportError(f"{_join(path, key)}: UTF-8 text without NUL, at most 1024 characters")
    return value


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: valid in JSON escapes, not storable text
        return False
    return True


LARGEST_INT = 2**62


def _int(
    body: Mapping[str, Any],
    key: str,
    path: str,
    *,
    nullable: bool = True,
    minimum: int | None = 0,
    maximum: int | None = None,
) -> Any:
    value = body.get(key)
    if value is None and nullable:
        return None
    # bool is an int in Python but never a reading.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ReportError(f"{_join(path, key)}: expected an integer" + (" or null" if nullable else ""))
    # No reading comes near 2**62 (bytes, watts, counts); the portal stores them as 64-bit integers.
    maximum = LARGEST_INT if maximum is None else maximum
    if (minimum is not None and value < minimum) or value > maximum:
        raise ReportError(f"{_join(path, key)}: {value} is outside {minimum}..{maximum}")
    return value


def _float(body: Mapping[str, Any], key: str, path: str, *, nullable: bool = True) -> Any:
    value = body.get(key)
    if value is None and nullable:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ReportError(f"{_join(path, key)}: expected a number" + (" or null" if nullable else ""))
    if value < 0:
        raise ReportError(f"{_join(path, key)}: must not be negative")
    return float(value)


def _join(path: str, key: str) -> str:
    return key if path == "report" else f"{path}.{key}"
