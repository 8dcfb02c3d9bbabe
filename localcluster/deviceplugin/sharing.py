"""What one GPU of a node is offered as (issue 40), the way NVIDIA's k8s-device-plugin offers it.

- whole GPUs: `nvidia.com/gpu`, one device per GPU, id `GPU-<uuid>`.
- MIG (the plugin's "mixed" strategy names): `nvidia.com/mig-<profile>`, `per_gpu` devices per GPU,
  each a MIG device with its own UUID `MIG-<uuid>`; NVIDIA_VISIBLE_DEVICES carries those UUIDs.
- time slicing (with `renameByDefault`): `nvidia.com/gpu.shared`, `replicas` devices per GPU with ids
  `GPU-<uuid>::<n>`; NVIDIA_VISIBLE_DEVICES carries the GPUs behind the replicas, once each.

Pure: the plugin serves an `Offer`, the real nodes check their allocatable against one, and the agent's
simulation of MIG (agent/simulated.py) uses the same MIG UUIDs.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

WHOLE_RESOURCE = "nvidia.com/gpu"
SHARED_RESOURCE = "nvidia.com/gpu.shared"
MIG_PROFILE = re.compile(r"^[1-7]g\.[0-9]+gb$")


class SharingError(ValueError):
    """A sharing spec the plugin cannot offer; the message says what is expected."""


@dataclass(frozen=True)
class Device:
    id: str  # what the kubelet sees and hands back in Allocate
    gpu: str  # the physical GPU's UUID (its health is this device's)
    visible: str  # what NVIDIA_VISIBLE_DEVICES names for it


@dataclass(frozen=True)
class Offer:
    resource: str
    devices: tuple[Device, ...]
    endpoint: str  # our socket's name in the kubelet's device-plugins directory

    def visible_devices(self, ids: list[str]) -> str:
        by_id = {d.id: d.visible for d in self.devices}
        seen: list[str] = []
        for device_id in ids:
            visible = by_id[device_id]
            if visible not in seen:
                seen.append(visible)
        return ",".join(seen)


def gpu_ids(node: str, count: int) -> list[str]:
    """Stable ids shaped like NVIDIA's GPU UUIDs, unique per node name."""
    return [f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'gpuportal:{node}:{i}')}" for i in range(count)]


def mig_uuid(gpu: str, index: int) -> str:
    """The UUID of MIG device `index` of a GPU, as NVIDIA shows one (MIG-<uuid>)."""
    return f"MIG-{uuid.uuid5(uuid.NAMESPACE_URL, f'gpuportal:{gpu}:mig:{index}')}"


def parse(spec: str) -> tuple[str, str, int]:
    """'' or 'whole' → ('whole', '', 1); 'mig:1g.10gb:7' → ('mig', '1g.10gb', 7); 'time-sliced:4' → ('time-sliced', '', 4)."""
    if spec in ("", "whole"):
        return "whole", "", 1
    kind, _, rest = spec.partition(":")
    if kind == "mig":
        profile, _, per_gpu = rest.partition(":")
        if not MIG_PROFILE.match(profile) or not per_gpu.isdigit() or not 1 <= int(per_gpu) <= 7:
            raise SharingError(f"{spec!r}: expected mig:<profile such as 1g.10gb>:<slices per GPU, 1 to 7>")
        return "mig", profile, int(per_gpu)
    if kind == "time-sliced":
        if not rest.isdigit() or not 2 <= int(rest) <= 64:
            raise SharingError(f"{spec!r}: expected time-sliced:<replicas per GPU, 2 to 64>")
        return "time-sliced", "", int(rest)
    raise SharingError(f"{spec!r}: expected whole, mig:<profile>:<per GPU> or time-sliced:<replicas>")


def advertised(gpus: int, spec: str = "") -> tuple[str, int]:
    """The resource a node with `gpus` GPUs shared as `spec` advertises, and how many of it."""
    kind, profile, per_gpu = parse(spec)
    if kind == "mig":
        return f"nvidia.com/mig-{profile}", gpus * per_gpu
    if kind == "time-sliced":
        return SHARED_RESOURCE, gpus * per_gpu
    return WHOLE_RESOURCE, gpus


def offer(node: str, gpus: int, spec: str = "") -> Offer:
    kind, profile, per_gpu = parse(spec)
    physical = gpu_ids(node, gpus)
    if kind == "mig":
        devices = tuple(Device(mig_uuid(g, i), g, mig_uuid(g, i)) for g in physical for i in range(per_gpu))
        return Offer(f"nvidia.com/mig-{profile}", devices, f"gpuportal-mig-{profile}.sock")
    if kind == "time-sliced":
        devices = tuple(Device(f"{g}::{n}", g, g) for g in physical for n in range(per_gpu))
        return Offer(SHARED_RESOURCE, devices, "gpuportal-shared.sock")
    return Offer(WHOLE_RESOURCE, tuple(Device(g, g, g) for g in physical), "gpuportal.sock")
