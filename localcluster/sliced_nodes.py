"""Real nodes whose GPUs are shared (issue 40): one with an A100 cut into seven MIG 1g.10gb slices, one
with a T4 time-sliced four ways, as NVIDIA's device plugin offers them on nodes configured for it (ours
does the same: deviceplugin/sharing.py). Their labels (gputype=real-a100-mig, real-t4-shared) are no
simulated pool's and no other real node's, and the GPU types below select them.
"""

from __future__ import annotations

from localcluster.realnode import NodeSpec

SLICED_NODES = (
    NodeSpec(0, "real-a100-1", "a100-mig", 1, "mig:1g.10gb:7"),
    NodeSpec(1, "real-t4-1", "t4-shared", 1, "time-sliced:4"),
)

SLICED_GPU_TYPES = (
    {"slug": "real-a100-1g", "display_name": "A100 1g.10gb (real node)", "node_label_value": "real-a100-mig",
     "resource_name": "nvidia.com/mig-1g.10gb", "kind": "mig", "share_parts": 1, "share_of": 7,
     "physical_gpu": "A100", "device_memory_mib": 10240,
     "cpu_per_gpu_millicores": 100, "memory_per_gpu_mib": 256, "billing_weight": "1.0"},
    {"slug": "real-t4-shared", "display_name": "T4 shared (real node)", "node_label_value": "real-t4-shared",
     "resource_name": "nvidia.com/gpu.shared", "kind": "time_sliced", "share_parts": 1, "share_of": 4,
     "physical_gpu": "T4", "device_memory_mib": 16384,
     "cpu_per_gpu_millicores": 100, "memory_per_gpu_mib": 256, "billing_weight": "1.0"},
)  # fmt: skip


def sliced_seed(quota_team: str | None = None, max_gpus: int = 7) -> dict:
    """A seed document (jobs.services.seeding.apply_seed) with the sliced GPU types and, for `quota_team`,
    a quota of `max_gpus` devices on each."""
    quotas = [{"team": quota_team, "gpu_type": t["slug"], "max_gpus": max_gpus} for t in SLICED_GPU_TYPES]
    return {"gpu_types": [dict(t) for t in SLICED_GPU_TYPES], "default_quotas": quotas if quota_team else []}
