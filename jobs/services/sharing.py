"""Sharing settings taking effect: after an admin or manager changes a cohort, a borrowing or lending
limit or a per-user cap, the namespaces' ResourceQuotas follow and admission runs again.

Every admission first settles what runs (`settle_running`): a borrowed workload that its own team's
quota covers again (its teammates' work ended) stops being borrowed, and so stops being reclaimable;
and where limits were lowered (a borrowing limit, a lending cap, a quota) the borrowed work that now
exceeds them is preempted, the same way a lender reclaims: grace period, timeline, owner told.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from django.db import transaction

from jobs.models import Quota, State, Team, Workload, WorkloadEvent
from jobs.services import sharing_plan
from jobs.services.accounting import counted_start
from jobs.services.preemption import close_segment, preempt
from jobs.services.sharing_plan import Held
from jobs.services.transitions import note

log = logging.getLogger(__name__)


def sharing_changed(team_ids: list[int]) -> int:
    """Re-run admission for the teams' quota types now and, once committed, re-sync their namespaces'
    ResourceQuota (which allows quota + borrowing limit). Returns how many workloads were admitted."""
    from jobs.services.admission import quota_admit

    admitted = 0
    for team_id, gpu_type_id in Quota.objects.filter(team_id__in=team_ids).values_list("team_id", "gpu_type_id"):
        admitted += len(quota_admit(team_id=team_id, gpu_type_id=gpu_type_id))
    transaction.on_commit(lambda: namespaces_sync(team_ids))
    return admitted


def namespaces_sync(team_ids: list[int]) -> None:
    """Ask the provisioner to bring these teams' namespaces (their ResourceQuota) up to date."""
    from jobs.services.object_creation import namespace_ensure

    for team in Team.objects.filter(id__in=team_ids):
        try:
            namespace_ensure(team, force=True)
        except Exception as exc:  # Kubernetes unreachable: the next submission syncs it again
            log.warning("ResourceQuota of %s not updated now: %s", team.namespace, exc)


def team_sharing_update(
    *,
    team: Team,
    by,
    fair_share: bool,
    half_life_hours: int,
    user_max_queued: int | None,
    user_max_gpus: dict[int, int | None],
) -> None:
    """A manager's rules inside the team; admission runs again at once (a raised cap may admit work)."""
    with transaction.atomic():
        Team.objects.filter(id=team.id).update(
            fair_share=fair_share, fair_share_half_life_hours=half_life_hours, user_max_queued=user_max_queued
        )
        for gpu_type_id, cap in user_max_gpus.items():
            Quota.objects.filter(team=team, gpu_type_id=gpu_type_id).update(user_max_gpus=cap)
        log.info("team %s sharing rules changed by %s", team.slug, by.get_username())
        sharing_changed([team.id])


def settle_running(
    teams: Mapping[int, sharing_plan.TeamQuota], held: list[Held], *, gpu_type_id: int, at: datetime
) -> list[Held]:
    """Under the cohort's quota locks: flip borrowed marks that no longer hold and preempt borrowed work
    beyond lowered limits. Returns what holds GPUs afterwards, as the admission plan should see it.

    `held` may sum a team's own workloads into stand-ins (negative ids, as the bulk admission pass
    reads them); where a lowered quota no longer covers them they are read one by one.

    A team alone (no cohort) never borrows: only a mark left over from a cohort it left is cleared, and
    a lowered quota lets its running work finish (its quota is a wall for new work only)."""
    settled = sharing_plan.settle(teams, held)
    if len(teams) == 1 and not any(t.borrowing_limit for t in teams.values()):
        settled = sharing_plan.Settled(now_own=settled.now_own)
    elif any(i < 0 for i in settled.now_borrowed):
        held = _own_one_by_one(held, gpu_type_id)
        settled = sharing_plan.settle(teams, held)
    if not (settled.now_own or settled.now_borrowed or settled.preempt):
        return held
    _flip_marks(settled.now_own, borrowed=False, at=at)
    _flip_marks(settled.now_borrowed, borrowed=True, at=at)
    names = dict(Team.objects.filter(id__in=set(settled.preempt.values())).values_list("id", "name"))
    for victim_id, team_id in sorted(settled.preempt.items()):
        preempt(victim_id, at=at, because=_beyond_limits(names[team_id], teams[team_id]))
    flipped = settled.now_own | settled.now_borrowed
    return [replace(h, borrowed=not h.borrowed) if h.id in flipped else h for h in held if h.id not in settled.preempt]


def _own_one_by_one(held: list[Held], gpu_type_id: int) -> list[Held]:
    """`held` with each team's summed own workloads (stand-ins) replaced by the workloads themselves."""
    teams = {h.team_id for h in held if h.id < 0}
    own = [
        Held(
            id=w_id,
            team_id=team_id,
            gpus=gpus,
            user_id=owner_id,
            priority=priority,
            order=(admitted or created).timestamp(),
        )
        for w_id, team_id, gpus, owner_id, priority, admitted, created in Workload.objects.filter(
            team_id__in=teams, gpu_type_id=gpu_type_id, state__in=State.holding(), borrowed=False
        ).values_list("id", "team_id", "gpu_count", "owner_id", "priority", "admitted_at", "created_at")
    ]
    return [h for h in held if h.id >= 0] + own


def _beyond_limits(team_name: str, quota: sharing_plan.TeamQuota) -> str:
    return (
        f"the sharing limits were lowered: team {team_name} may hold {quota.quota} GPU(s) of its own plus "
        f"{quota.borrowing_limit} borrowed, and its cohort lends less than it had borrowed (this workload ran "
        "on borrowed GPUs)."
    )


def _flip_marks(ids: set[int], *, borrowed: bool, at: datetime) -> None:
    """Mark workloads borrowed or not from `at`. A started run keeps the stretch before as a segment
    with the old mark, so usage bills each part as it was."""
    for workload in Workload.objects.filter(id__in=ids, borrowed=not borrowed):
        if workload.started_at is not None:
            close_segment(
                workload,
                began=counted_start(workload.started_at, workload.counted_from),
                at=at,
                borrowed=not borrowed,
                attempt=workload.attempt,
                reason="BorrowedMarkChanged",
            )
            Workload.objects.filter(id=workload.id).update(borrowed=borrowed, counted_from=at, updated_at=at)
        else:
            Workload.objects.filter(id=workload.id).update(borrowed=borrowed, updated_at=at)
        workload.borrowed = borrowed
        if borrowed:
            message = (
                "Now borrowed: the team's quota was lowered and no longer covers it; it runs on GPUs its cohort "
                "lends, and a lender may reclaim them."
            )
        else:
            message = "No longer borrowed: the team's own quota covers it now, so it can no longer be preempted."
        note(
            workload,
            reason="Borrowed" if borrowed else "NoLongerBorrowed",
            message=message,
            source=WorkloadEvent.Source.PORTAL,
        )
