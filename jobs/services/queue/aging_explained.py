"""The queue page's line on aging for one queued workload (issue 38): where its GPU type ages, how long
it has waited and how many of its team's workloads submitted before it it now goes ahead of
(`aging.overtaken`). Empty where the type does not age or the workload is not queued. Where the team uses
fair share, usage orders people before aging does, so only the owner's own workloads are counted."""

from __future__ import annotations

from django.utils import timezone

from jobs.models import State, Workload
from jobs.services.queue import aging


def aging_line(workload: Workload) -> str:
    if workload.state != State.QUEUED or not workload.gpu_type.queue_aging:
        return ""
    mine_only = {"owner_id": workload.owner_id} if workload.team.fair_share else {}
    others = [
        (w_id, gpus, created.timestamp(), priority)
        for w_id, gpus, created, priority in Workload.objects.filter(
            team_id=workload.team_id, gpu_type_id=workload.gpu_type_id, state=State.QUEUED,
            created_at__lte=workload.created_at, **mine_only,
        ).values_list("id", "gpu_count", "created_at", "priority")
    ]  # fmt: skip
    mine = (workload.id, workload.gpu_count, workload.created_at.timestamp(), workload.priority)
    return aging.overtaken(mine, others, now=timezone.now().timestamp()).sentence()
