"""Admission: which queued workloads may take GPUs now, per cohort and GPU type; who borrows; who is
preempted so a lender gets its quota back.

One decision is three steps, all inside one transaction:
1. lock the quota rows of every team in the requesting team's cohort for the GPU type (SELECT ... FOR
   UPDATE, in id order so two admissions never deadlock). Every admission that could lend or borrow
   the same GPUs takes the same locks, so concurrent admissions across a cohort run one after the
   other and can never over-admit or over-lend. A team without a cohort locks only its own row;
2. gather the facts (quotas, what is held, the queue in order) and hand them to the pure plan
   (`sharing_plan.plan`), which is deterministic;
3. apply the plan: guarded transitions for the victims, one UPDATE for the admitted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from jobs.models import Quota, State, Team, Workload, WorkloadEvent
from jobs.services import sharing_plan
from jobs.services.dispatch import enqueue_estimate, enqueue_submits
from jobs.services.sharing_plan import Held, QueueEntry, TeamQuota

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


@dataclass(frozen=True)
class CohortFacts:
    """Everything the plan needs for one cohort (or lone team) and GPU type."""

    teams: dict[int, TeamQuota]
    held: list[Held]
    queued: list[sharing_plan.Waiting]
    quota_of: dict[int, int]


def cohort_team_ids(team_id: int) -> list[int]:
    cohort_id = Team.objects.filter(id=team_id).values_list("cohort_id", flat=True).first()
    if cohort_id is None:
        return [team_id]
    return list(Team.objects.filter(cohort_id=cohort_id).order_by("id").values_list("id", flat=True))


def lock_quotas(team_ids: Iterable[int], gpu_type_id: int) -> list[Quota]:
    """Lock the quota rows in id order (a fixed order: no deadlock between two cohort admissions)."""
    return list(
        Quota.objects.select_for_update()
        .filter(team_id__in=list(team_ids), gpu_type_id=gpu_type_id)
        .select_related("team")
        .order_by("id")
    )


def fair_share_usage(team_ids: Iterable[int]) -> dict[int, dict[int, float]]:
    """Per team that orders its queue by fair share: each user's decayed recent GPU-hours."""
    teams = {t.id: t for t in Team.objects.filter(id__in=list(team_ids), fair_share=True)}
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


def gather_cohort_facts(quotas: list[Quota], gpu_type_id: int, *, skip_teams: Iterable[int] = ()) -> CohortFacts:
    """Read what the plan needs (three queries, and one more where a team uses fair share)."""
    in_cohort = len(quotas) > 1 or any(q.team.cohort_id for q in quotas)
    teams = {
        q.team_id: TeamQuota(
            team_id=q.team_id,
            quota=q.max_gpus,
            borrowing_limit=q.borrowing_limit if in_cohort else 0,
            lending_limit=q.lending_limit,
            user_max_gpus=q.user_max_gpus,
        )
        for q in quotas
    }
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
    queued = sharing_plan.order_queue(entries, fair_share_usage(team_ids))
    return CohortFacts(teams=teams, held=held, queued=queued, quota_of={q.team_id: q.max_gpus for q in quotas})


# Within one admit_all pass, each team's budget is read once (a usage report per team), not once per
# GPU type: the pass is short, and a budget crossed during it is caught by the next pass.
_budget_memo: ContextVar[dict[int, bool] | None] = ContextVar("admission_budget_memo", default=None)


def _exhausted_teams(quotas: list[Quota]) -> set[int]:
    from jobs.services.accounting import budget_exhausted

    memo = _budget_memo.get()
    exhausted: set[int] = set()
    for q in quotas:
        if q.team.monthly_gpu_hour_budget is not None:
            if memo is None:
                spent = budget_exhausted(q.team)
            elif q.team_id in memo:
                spent = memo[q.team_id]
            else:
                spent = memo[q.team_id] = budget_exhausted(q.team)
            if spent:
                exhausted.add(q.team_id)
    return exhausted


def quota_admit(*, team_id: int, gpu_type_id: int) -> list[int]:
    """Admit what fits for the team's cohort (or the team alone) and GPU type; returns admitted ids."""
    from jobs.services.preemption import preempt
    from jobs.services.sharing import settle_running

    with transaction.atomic():
        quotas = lock_quotas(cohort_team_ids(team_id), gpu_type_id)
        if not any(q.team_id == team_id for q in quotas):
            return []
        facts = gather_cohort_facts(quotas, gpu_type_id, skip_teams=_exhausted_teams(quotas))
        # Borrowed marks that no longer hold, and borrowed work beyond lowered limits (jobs.services.sharing).
        facts = settle_running(facts, at=timezone.now())
        if not facts.queued:
            return []
        result = sharing_plan.plan(facts.teams, facts.held, facts.queued)
        if result.waiting:
            enqueue_estimate(team_id=team_id, gpu_type_id=gpu_type_id)  # the queue stays: when will it move?
        if not result.admit:
            return []
        now = timezone.now()
        for victim_id, for_id in sorted(result.preempt.items()):
            preempt(victim_id, for_workload_id=for_id, at=now)
        own = [w for w in result.admit if w not in result.borrowed]
        borrowed = [w for w in result.admit if w in result.borrowed]
        for ids, is_borrowed, message in (
            (own, False, "GPUs reserved from the team's quota; creating Kubernetes objects."),
            (borrowed, True, "GPUs borrowed from the cohort's idle quota; creating Kubernetes objects."),
        ):
            if ids:
                Workload.objects.filter(id__in=ids, state=State.QUEUED).update(
                    state=State.SUBMITTING,
                    reason="Admitted",
                    message=message,
                    borrowed=is_borrowed,
                    admitted_at=now,
                    state_changed_at=now,
                    updated_at=now,
                )
        team_of = {w.id: w.team_id for w in facts.queued}
        reclaimed: dict[int, list[int]] = {}
        for victim_id, for_id in result.preempt.items():
            reclaimed.setdefault(for_id, []).append(victim_id)
        WorkloadEvent.objects.bulk_create(
            WorkloadEvent(
                workload_id=workload_id,
                at=now,
                from_state=State.QUEUED,
                to_state=State.SUBMITTING,
                reason="Admitted",
                message=_admit_message(
                    borrowed=workload_id in result.borrowed,
                    quota=facts.quota_of[team_of[workload_id]],
                    reclaimed=len(reclaimed.get(workload_id, ())),
                ),
            )
            for workload_id in result.admit
        )
        enqueue_submits(result.admit)
    log.info(
        "admitted %d workload(s) (%d borrowed, %d preempted) for team %s / gpu type %s",
        len(result.admit),
        len(result.borrowed),
        len(result.preempt),
        team_id,
        gpu_type_id,
    )
    return result.admit


def _admit_message(*, borrowed: bool, quota: int, reclaimed: int) -> str:
    if borrowed:
        return f"GPUs borrowed from the cohort's idle quota (beyond the team's {quota} GPU quota)."
    if reclaimed:
        return f"GPUs reserved ({quota} GPU quota); reclaimed from {reclaimed} borrowed workload(s)."
    return f"GPUs reserved ({quota} GPU quota)."


def admit_all() -> int:
    """One admission pass over every team and GPU type with queued work."""
    pairs = Workload.objects.filter(state=State.QUEUED).values_list("team_id", "gpu_type_id").distinct().order_by()
    token = _budget_memo.set({})
    try:
        return sum(len(quota_admit(team_id=t, gpu_type_id=g)) for t, g in list(pairs))
    finally:
        _budget_memo.reset(token)
