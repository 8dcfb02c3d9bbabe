"""What preempting a borrowed workload would cost, for the sharing plan's choice of victims.

Two facts per borrowed workload (sharing_plan.Held): `lost`, the GPU-seconds a stop now throws away (GPUs x
time since its last checkpoint, or since its start: jobs/services/checkpoints/cost.py), so the plan takes
the work that loses least; and `preemptible`, False while a started workload is inside its minimum runtime
(the larger of its GPU type's and its cohort's `min_runtime_seconds`, KAI's min-runtime). Two small
queries per admission pass, for the GPU types' and the cohorts' minimums.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from jobs.models import GpuType, Team
from jobs.services.checkpoints.cost import lost_gpu_seconds


def min_runtime_seconds(*, type_minimum: int, cohort_minimum: int) -> int:
    return max(type_minimum or 0, cohort_minimum or 0)


def preemptible_from(started_at: datetime | None, minimum_seconds: int) -> datetime | None:
    """When a borrowed workload may be preempted: None for at once (not started, or no minimum)."""
    if started_at is None or minimum_seconds <= 0:
        return None
    return started_at + timedelta(seconds=minimum_seconds)


class StopCost:
    def __init__(self, team_ids, type_ids, *, now: datetime | None = None) -> None:
        self.now = now or timezone.now()
        self.type_minimum = dict(GpuType.objects.filter(id__in=list(type_ids)).values_list("id", "min_runtime_seconds"))
        self.cohort_minimum = {
            team_id: minimum or 0
            for team_id, minimum in Team.objects.filter(id__in=list(team_ids)).values_list(
                "id", "cohort__min_runtime_seconds"
            )
        }

    def minimum(self, team_id: int, gpu_type_id: int) -> int:
        return min_runtime_seconds(
            type_minimum=self.type_minimum.get(gpu_type_id, 0), cohort_minimum=self.cohort_minimum.get(team_id, 0)
        )

    def of(self, team_id: int, gpu_type_id: int, gpus: int, started, checkpoint) -> dict:
        """The Held fields `lost` and `preemptible` of one borrowed workload."""
        free_at = preemptible_from(started, self.minimum(team_id, gpu_type_id))
        return {
            "lost": lost_gpu_seconds(gpus=gpus, started_at=started, last_checkpoint_at=checkpoint, at=self.now),
            "preemptible": free_at is None or free_at <= self.now,
        }
