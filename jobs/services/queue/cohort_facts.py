"""Cohort facts: what one cohort (or a lone team) holds and queues on one GPU type, read in one go.

Admission plans from them; the start-time estimates forecast from them. Both read them here, so the
estimate of a queued workload sees the same cohort, quotas, holdings and queue order as admission does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from jobs.models import GpuType, Quota, State, Team, Workload
from jobs.services.queue import sharing_plan
from jobs.services.queue.sharing_plan import Held, QueueEntry, TeamQuota


@dataclass(frozen=True)
class CohortFacts:
    """Everything the plan needs for one cohort (or lone team) and GPU type."""

    teams: dict[int, TeamQuota]
    held: list[Held]
    queued: list[sharing_plan.Waiting]
    quota_of: dict[int, int]
    # Where the GPU type ages: the time the queue was aged to (epoch seconds), else None; and the fair-share
    # usage that ordered it (per team that uses fair share), so a forecast can order it again as it ages.
    aged_at: float | None = None
    fair_usage: dict[int, dict[int, float]] = field(default_factory=dict)


def cohort_team_ids(team_id: int) -> list[int]:
    cohort_id = Team.objects.filter(id=team_id).values_list("cohort_id", flat=True).first()
    if cohort_id is None:
        return [team_id]
    return list(Team.objects.filter(cohort_id=cohort_id).order_by("id").values_list("id", flat=True))


def fair_share_usage(team_ids: Iterable[int]) -> dict[int, dict[int, float]]:
    """Per team that orders its queue by fair share: each user's decayed recent GPU-hours."""
    return fair_share_usage_of(Team.objects.filter(id__in=list(team_ids), fair_share=True))


def fair_share_usage_of(teams_read: Iterable[Team]) -> dict[int, dict[int, float]]:
    """`fair_share_usage` of teams already read (those that do not use fair share are left out)."""
    teams = {t.id: t for t in teams_read if t.fair_share}
    if not teams:
        return {}
    now = timezone.now()
    longest = max(t.fair_share_half_life_hours for t in teams.values())
    since = now - timedelta(hours=min(longest * 5, settings.PORTAL_HISTORY_DAYS * 24))
    rows = (
        Workload.objects.filter(team_id__in=teams, started_at__isnull=False)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=since))
        .values_list("team_id", "owner_id", "started_at", "finished_at", "gpu_count")
    )
    intervals: dict[int, list[tuple[int, float, float, int]]] = {t: [] for t in teams}
    for team_id, owner_id, started, finished, gpus in rows:
        intervals[team_id].append((owner_id, started.timestamp(), (finished or now).timestamp(), gpus))
    return {
        t: sharing_plan.decayed_usage(intervals[t], now.timestamp(), teams[t].fair_share_half_life_hours * 3600.0)
        for t in teams
    }


def team_quotas(quotas: list[Quota]) -> dict[int, TeamQuota]:
    """Each team's quota row as the plan reads it; a team alone (no cohort) may not borrow."""
    in_cohort = len(quotas) > 1 or any(q.team.cohort_id for q in quotas)
    return {
        q.team_id: TeamQuota(
            team_id=q.team_id,
            quota=q.max_gpus,
            borrowing_limit=q.borrowing_limit if in_cohort else 0,
            lending_limit=q.lending_limit,
            user_max_gpus=q.user_max_gpus,
        )
        for q in quotas
    }


def gather_cohort_facts(quotas: list[Quota], gpu_type_id: int, *, skip_teams: Iterable[int] = ()) -> CohortFacts:
    """Read what the plan needs (four queries, and one more where a team uses fair share)."""
    teams = team_quotas(quotas)
    team_ids = list(teams)
    held = [
        Held(
            id=w_id,
            team_id=team_id,
            gpus=gpus,
            user_id=owner_id,
            priority=priority,
            borrowed=borrowed,
            order=(admitted or created).timestamp(),
        )
        for w_id, team_id, gpus, owner_id, priority, borrowed, admitted, created in Workload.objects.filter(
            team_id__in=team_ids, gpu_type_id=gpu_type_id, state__in=State.holding()
        ).values_list("id", "team_id", "gpu_count", "owner_id", "priority", "borrowed", "admitted_at", "created_at")
    ]
    skip = set(skip_teams)
    entries = [
        QueueEntry(
            id=w_id,
            team_id=team_id,
            user_id=owner_id,
            gpus=gpus,
            priority=priority,
            created=created.timestamp(),
            requeued=requeued.timestamp() if requeued else None,
        )
        for w_id, team_id, owner_id, gpus, priority, created, requeued in Workload.objects.filter(
            team_id__in=[t for t in team_ids if t not in skip], gpu_type_id=gpu_type_id, state=State.QUEUED
        ).values_list("id", "team_id", "owner_id", "gpu_count", "priority", "created_at", "requeued_at")
    ]
    ages = GpuType.objects.filter(id=gpu_type_id, queue_aging=True).exists()
    aging_now = timezone.now().timestamp() if ages else None
    fair = fair_share_usage(team_ids)
    queued = sharing_plan.order_queue(entries, fair, aging_now=aging_now)
    return CohortFacts(
        teams=teams,
        held=held,
        queued=queued,
        quota_of={q.team_id: q.max_gpus for q in quotas},
        aged_at=aging_now,
        fair_usage=fair,
    )


# sharing_plan.decayed_usage over the team's runs, summed by PostgreSQL: what each person of the team used,
# decayed by the team's half-life (fair_share_usage_of's window), without reading every run of the team.
_DECAYED_USAGE_SQL = """
SELECT owner_id, sum(gpu_count * (
    exp(greatest(-700.0, -%(rate)s * extract(epoch FROM %(now)s::timestamptz - least(coalesce(finished_at, %(now)s), %(now)s))))
  - exp(greatest(-700.0, -%(rate)s * extract(epoch FROM %(now)s::timestamptz - started_at)))
) / %(rate)s / 3600.0)
FROM {workload}
WHERE team_id = %(team)s AND started_at IS NOT NULL AND (finished_at IS NULL OR finished_at >= %(since)s)
  AND least(coalesce(finished_at, %(now)s), %(now)s) > started_at
GROUP BY owner_id
"""


def team_fair_share(team: Team, now: datetime) -> dict[int, float]:
    """Each person's decayed recent GPU-hours in the team, as `fair_share_usage_of` gives them whether or
    not the team uses fair share, summed by PostgreSQL in one statement (elsewhere: `fair_share_usage_of`)."""
    if connection.vendor != "postgresql":
        as_fair = Team(id=team.id, fair_share=True, fair_share_half_life_hours=team.fair_share_half_life_hours)
        return fair_share_usage_of([as_fair]).get(team.id, {})
    half_life = team.fair_share_half_life_hours * 3600.0
    since = now - timedelta(hours=min(team.fair_share_half_life_hours * 5, settings.PORTAL_HISTORY_DAYS * 24))
    sql = _DECAYED_USAGE_SQL.format(workload=connection.ops.quote_name(Workload._meta.db_table))
    with connection.cursor() as cursor:
        cursor.execute(sql, {"rate": math.log(2) / half_life, "now": now, "since": since, "team": team.id})
        return {owner: float(hours) for owner, hours in cursor.fetchall()}
