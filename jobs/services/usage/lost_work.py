"""GPU-hours of work thrown away by stops (preemption, retried faults), counted apart in usage reports.

A stop loses the run's work since its last checkpoint (or its start): jobs/services/checkpoints/cost.py. A
stop that requeues the workload closes a run segment carrying that loss (RunSegment.lost_gpu_seconds); a
stop that ends it adds the loss to the workload alone (Workload.lost_gpu_seconds keeps the sum of all).
Each loss is counted on the local day of the stop. These GPU-hours are part of the usage (they were used);
this says how much of it was wasted. Only rows with a loss are read.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, timedelta

from django.db.models import OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce

from jobs.models import RunSegment, State, Workload
from jobs.services.usage.accounting import UsageRow, day_start, local_tz, weights_by_day


def lost_usage_days(
    *, first_day: date, last_day: date, team_ids: list[int] | None, user_ids: list[int] | None = None
) -> list[UsageRow]:
    tz = local_tz()
    weight = weights_by_day()
    start, end = day_start(first_day, tz), day_start(last_day + timedelta(days=1), tz)
    scope = Q()
    if team_ids is not None:
        scope &= Q(team_id__in=team_ids)
    if user_ids is not None:
        scope &= Q(owner_id__in=user_ids)
    lost: dict[tuple, float] = defaultdict(float)
    for team_id, owner_id, type_id, at, seconds in RunSegment.objects.filter(
        scope, lost_gpu_seconds__gt=0, finished_at__gte=start, finished_at__lt=end
    ).values_list("team_id", "owner_id", "gpu_type_id", "finished_at", "lost_gpu_seconds"):
        lost[(at.astimezone(tz).date(), team_id, owner_id, type_id)] += seconds
    in_segments = (
        RunSegment.objects.filter(workload=OuterRef("pk"))
        .values("workload")
        .annotate(s=Sum("lost_gpu_seconds"))
        .values("s")
    )
    final_stops = (
        Workload.objects.filter(
            scope, state__in=State.final(), lost_gpu_seconds__gt=0, finished_at__gte=start, finished_at__lt=end
        )
        .annotate(earlier=Coalesce(Subquery(in_segments), 0.0))
        .values_list("team_id", "owner_id", "gpu_type_id", "finished_at", "lost_gpu_seconds", "earlier")
    )
    for team_id, owner_id, type_id, at, total, earlier in final_stops:
        if total - earlier > 0:
            lost[(at.astimezone(tz).date(), team_id, owner_id, type_id)] += total - earlier
    return [
        UsageRow(day, team_id, user_id, type_id, seconds, seconds / 3600 * weight(type_id, day))
        for (day, team_id, user_id, type_id), seconds in sorted(lost.items())
    ]
