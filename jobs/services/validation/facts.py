"""The facts a submission is judged against (gathered by jobs.services.submission.intake), and what a
judged submission is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuTypeFacts:
    slug: str
    display_name: str
    enabled: bool
    quota: int | None  # the team's max GPUs of this type; None: no quota row, not usable
    largest_node: int  # most allocatable GPUs on one ready node of this type; 0: none known
    max_cuda: str | None  # highest CUDA the drivers on these nodes run; None: unknown
    cpu_per_gpu: int = 4000  # millicores per GPU by default, and at most (sized pods)
    max_cpu_per_gpu: int | None = None
    memory_per_gpu: int = 16384  # MiB
    max_memory_per_gpu: int | None = None
    per_container: int | None = None  # most devices one container may take (slices: 1 unless allowed more)
    unit: str = "whole"  # whole | mig | time_sliced (jobs.gpu_shares): how a refusal names one device
    nodes: int = 0  # ready, schedulable nodes of this type: the most ranks a gang job may have
    # None: the type's nodes pull images (or nothing is known of them). A set: none of its nodes pulls
    # (gpuportal.io/pulls-images=false), and these are the images they have (canonical references).
    local_images: frozenset[str] | None = None


@dataclass(frozen=True)
class CatalogFacts:
    id: int
    reference: str
    suits: str  # batch | service | any
    enabled: bool
    cuda_version: str | None
    default_command: tuple[str, ...] = ()
    default_args: tuple[str, ...] = ()
    default_port: int | None = None
    needs_root: bool = False  # the image only works as root
    root_allowed: bool = False  # and an admin approved that for this entry
    title: str = ""


@dataclass(frozen=True)
class Facts:
    gpu_types: Mapping[str, GpuTypeFacts]
    catalog: Mapping[int, CatalogFacts]
    allowed_registries: frozenset[str]
    budget_exhausted: bool = False
    budget_message: str = ""
    may_set_priority: bool = False
    default_time_limit: Mapping[str, int] = field(default_factory=lambda: {"batch": 86400, "service": 28800})
    min_time_limit: int = 60
    max_time_limit: int = 7 * 86400
    secrets: Mapping[str, str] = field(default_factory=dict)  # secret names the user may use -> k8s name
    datasets: Mapping[str, bool] = field(default_factory=dict)  # every enabled dataset -> may the team use it


@dataclass(frozen=True)
class CleanSubmission:
    name: str
    kind: str
    image: str
    catalog_image_id: int | None
    gpu_type: str
    gpu_count: int
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    port: int | None
    time_limit_seconds: int
    priority: int
    secrets: tuple[tuple[str, str, str], ...] = ()  # (name, k8s name, env var or "")
    datasets: tuple[str, ...] = ()
    cpu_millicores: int | None = None  # None: the type's default
    memory_mib: int | None = None
    restartable: bool = False
    retry_limit: int | None = None  # None: the team's default
    retryable_exit_codes: tuple[int, ...] = ()
    checkpoint_workspace: str = "home"
    nodes: int = 1  # a gang job's ranks; gpu_count is then GPUs per node
    topology: str = ""
