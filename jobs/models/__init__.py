"""The domain: teams, GPU types, quotas, the image catalog, workloads and their accounting."""

from __future__ import annotations

from jobs.models.audit import QuotaChange
from jobs.models.catalog import AllowedRegistry, CatalogImage, GpuNode, GpuType
from jobs.models.datasets import Dataset
from jobs.models.gangs import GangRank
from jobs.models.opening import RedeemedTicket
from jobs.models.queueing import EstimateRevision, QueueReservation
from jobs.models.resilience import Checkpoint, GpuHealthMark, GpuHealthWatch
from jobs.models.secrets import SecretState, TeamSecret
from jobs.models.sharing import Cohort
from jobs.models.streams import LogFollowSlot
from jobs.models.teams import Quota, Team
from jobs.models.usage import BillingWeight, RolledUpDay, RunSegment, UsageDaily
from jobs.models.workloads import Kind, State, Workload, WorkloadEvent
from jobs.models.workspaces import Workspace, WorkspaceDeletion

__all__ = [
    "AllowedRegistry",
    "BillingWeight",
    "CatalogImage",
    "Checkpoint",
    "Cohort",
    "Dataset",
    "EstimateRevision",
    "GangRank",
    "GpuHealthMark",
    "GpuHealthWatch",
    "GpuNode",
    "GpuType",
    "Kind",
    "LogFollowSlot",
    "QueueReservation",
    "Quota",
    "QuotaChange",
    "RedeemedTicket",
    "RolledUpDay",
    "RunSegment",
    "SecretState",
    "State",
    "Team",
    "TeamSecret",
    "UsageDaily",
    "Workload",
    "WorkloadEvent",
    "Workspace",
    "WorkspaceDeletion",
]
