"""Reads about sharing: a team's queue explained per GPU type (own quota, borrowed, lent, waiting, and
why each of the first waiting workloads is not admitted yet), for the queue page and the API."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from jobs.models import GpuType, Quota, Team, Workload
from jobs.services.queue.forecast import about
from jobs.services.queue.sharing_plan import Reason, TeamQuota
from jobs.services.queue.start_estimates import forecast_cohort

FIRST_WAITING = 10


@dataclass(frozen=True)
class WaitingExplained:
    workload: Workload
    position: int
    reason: str
    explanation: str
    estimated_start_at: datetime | None

    @property
    def eta(self) -> str:
        if self.estimated_start_at is None:
            return about(None)
        return about(max(0.0, (self.estimated_start_at - timezone.now()).total_seconds()))


@dataclass(frozen=True)
class TypeQueue:
    gpu_type: GpuType
    quota: int
    borrowing_limit: int
    lending_limit: int | None
    in_cohort: bool
    held: int  # GPUs the team holds, borrowed ones included
    borrowed: int  # of those, beyond its own quota
    lent: int  # of its idle quota, GPUs other teams of the cohort use now
    waiting_workloads: int
    waiting_gpus: int
    first_waiting: list[WaitingExplained] = field(default_factory=list)


def explain(reason: str, *, team: TeamQuota, held: int, user_held: int, pool_use: int, pool_cap: int) -> str:
    """Why one workload waits, in words (pure)."""
    if reason == Reason.TEAM_QUOTA:
        return f"The team holds {held} of its {team.quota} GPU quota; it starts when enough are released."
    if reason == Reason.BORROWING_LIMIT:
        return (
            f"The team already borrows {max(0, held - team.quota)} GPU(s), its borrowing limit is "
            f"{team.borrowing_limit}."
        )
    if reason == Reason.COHORT:
        return (
            f"The cohort has no idle GPUs to lend: {pool_use} of the {pool_cap} it shares are in use. "
            "It starts when a teammate's or another team's work ends."
        )
    if reason == Reason.USER_CAP:
        return f"Its owner holds {user_held} GPU(s); the team allows {team.user_max_gpus} per member."
    if reason == Reason.CLUSTER:
        return "The cluster has no free GPUs of this type for the team's cohort right now."
    if reason == Reason.NO_QUOTA:
        return "The team has no quota for this GPU type."
    if reason == Reason.MIN_RUNTIME:
        return (
            "Other teams run on GPUs borrowed from this team's quota, but they have not yet run the minimum "
            "time before borrowed work may be preempted (set per GPU type or cohort); it starts as soon as "
            "they have, or when they end."
        )
    return "Waiting for the next admission pass."


def team_queue_explained(team: Team, *, first: int = FIRST_WAITING) -> list[TypeQueue]:
    """Per GPU type the team has a quota for: the picture of its share and its first waiting workloads."""
    result: list[TypeQueue] = []
    now = timezone.now()
    for quota in Quota.objects.filter(team=team).select_related("gpu_type").order_by("gpu_type__slug"):
        facts, estimates = forecast_cohort(team_id=team.id, gpu_type_id=quota.gpu_type_id, team_head=first)
        if facts is None:
            continue
        me = facts.teams[team.id]
        usage: dict[int, int] = dict.fromkeys(facts.teams, 0)
        user_usage: dict[int, int] = {}
        for h in facts.held:
            usage[h.team_id] = usage.get(h.team_id, 0) + h.gpus
            if h.team_id == team.id:
                user_usage[h.user_id] = user_usage.get(h.user_id, 0) + h.gpus
        pool_cap = sum(t.lendable for t in facts.teams.values())
        pool_use = sum(max(0, usage[t] - q.guaranteed) for t, q in facts.teams.items())
        borrowed_by_others = sum(max(0, usage[t] - q.quota) for t, q in facts.teams.items() if t != team.id)
        idle_lendable = min(me.lendable, max(0, me.quota - usage[team.id]))
        mine = [w for w in facts.queued if w.team_id == team.id]
        shown = {
            w.id: w
            for w in Workload.objects.filter(id__in=[w.id for w in mine[:first]]).select_related("owner", "gpu_type")
        }
        first_waiting = []
        for position, w in enumerate(mine[:first], start=1):
            estimate = estimates.get(w.id)
            reason = estimate.reason if estimate else ""
            start_in = estimate.start_in if estimate else None
            first_waiting.append(
                WaitingExplained(
                    workload=shown[w.id],
                    position=position,
                    reason=reason,
                    explanation=explain(
                        reason,
                        team=me,
                        held=usage[team.id],
                        user_held=user_usage.get(w.user_id, 0),
                        pool_use=pool_use,
                        pool_cap=pool_cap,
                    ),
                    estimated_start_at=now + timedelta(seconds=start_in) if start_in is not None else None,
                )
            )
        result.append(
            TypeQueue(
                gpu_type=quota.gpu_type,
                quota=quota.max_gpus,
                borrowing_limit=me.borrowing_limit,
                lending_limit=quota.lending_limit,
                in_cohort=len(facts.teams) > 1 or team.cohort_id is not None,
                held=usage[team.id],
                borrowed=max(0, usage[team.id] - quota.max_gpus),
                lent=min(idle_lendable, borrowed_by_others),
                waiting_workloads=len(mine),
                waiting_gpus=sum(w.gpus for w in mine),
                first_waiting=first_waiting,
            )
        )
    return result
