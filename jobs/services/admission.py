"""Admission: which queued workloads may take GPUs now, per team and GPU type, never beyond the quota.

The quota row is locked (SELECT ... FOR UPDATE) for the whole decision, so concurrent admissions for
the same team and type run one after the other and can never over-admit. Order: priority, then FIFO;
best-effort, so a small workload may pass a large one that does not fit yet.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from jobs.models import Quota, State, Team, Workload, WorkloadEvent
from jobs.services.dispatch import enqueue_submit

log = logging.getLogger(__name__)

QUEUE_ORDER = ("-priority", "created_at", "id")


def gpus_held(*, team_id: int, gpu_type_id: int) -> int:
    return (
        Workload.objects.filter(team_id=team_id, gpu_type_id=gpu_type_id, state__in=State.holding()).aggregate(
            total=Sum("gpu_count")
        )["total"]
        or 0
    )


def plan_admission(queued: list[tuple[int, int]], free: int) -> list[int]:
    """Pure: from queued (id, gpus) in queue order, the ids that fit into `free` GPUs, best-effort."""
    admitted: list[int] = []
    smallest_refused: int | None = None
    for workload_id, gpus in queued:
        if free <= 0:
            break
        if smallest_refused is not None and gpus >= smallest_refused:
            continue
        if gpus <= free:
            admitted.append(workload_id)
            free -= gpus
        else:
            smallest_refused = gpus if smallest_refused is None else min(smallest_refused, gpus)
    return admitted


def quota_admit(*, team_id: int, gpu_type_id: int) -> list[int]:
    """Admit what fits for one team and GPU type; returns the admitted workload ids."""
    with transaction.atomic():
        quota = Quota.objects.select_for_update().filter(team_id=team_id, gpu_type_id=gpu_type_id).first()
        if quota is None:
            return []
        free = quota.max_gpus - gpus_held(team_id=team_id, gpu_type_id=gpu_type_id)
        if free <= 0:
            return []
        team = Team.objects.get(id=team_id)
        if team.monthly_gpu_hour_budget is not None:
            from jobs.services.accounting import budget_exhausted

            if budget_exhausted(team):
                return []
        queued = list(
            Workload.objects.filter(team_id=team_id, gpu_type_id=gpu_type_id, state=State.QUEUED)
            .order_by(*QUEUE_ORDER)
            .values_list("id", "gpu_count")
        )
        admitted = plan_admission(queued, free)
        if not admitted:
            return []
        now = timezone.now()
        Workload.objects.filter(id__in=admitted, state=State.QUEUED).update(
            state=State.SUBMITTING,
            reason="Admitted",
            message="GPUs reserved from the team's quota; creating Kubernetes objects.",
            admitted_at=now,
            state_changed_at=now,
            updated_at=now,
        )
        WorkloadEvent.objects.bulk_create(
            WorkloadEvent(
                workload_id=workload_id,
                at=now,
                from_state=State.QUEUED,
                to_state=State.SUBMITTING,
                reason="Admitted",
                message=f"GPUs reserved ({quota.max_gpus} GPU quota).",
            )
            for workload_id in admitted
        )
        for workload_id in admitted:
            enqueue_submit(workload_id)
    log.info("admitted %d workload(s) for team %s / gpu type %s", len(admitted), team_id, gpu_type_id)
    return admitted


def admit_all() -> int:
    """One admission pass over every team and GPU type with queued work."""
    pairs = Workload.objects.filter(state=State.QUEUED).values_list("team_id", "gpu_type_id").distinct().order_by()
    return sum(len(quota_admit(team_id=t, gpu_type_id=g)) for t, g in list(pairs))
