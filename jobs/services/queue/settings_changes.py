"""Settings changes taking effect: the commands that admin and team managers call when they change a
quota, a cohort, a borrowing or lending limit, a team's sharing rules or a GPU type.

Each records what changed where that is kept, re-runs admission for the teams and GPU types concerned (a
raised limit may admit work; a lowered one is settled by the next pass, see admission.settle_running) and,
once committed, has the provisioner bring the namespaces' ResourceQuota (quota + borrowing limit, and CPU
and memory from the GPU types' sizes per GPU) up to date. Admin and the manager's page call these today;
they are engine services so that any other front end can make the same change.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction

from jobs.models import GpuType, Quota, QuotaChange, Team, WorkloadEvent
from jobs.services.provisioning import namespace_ensure
from jobs.services.queue.admission import LIMITS_LOWERED, quota_admit

log = logging.getLogger(__name__)


def sharing_changed(team_ids: list[int]) -> int:
    """Re-run admission for the teams' quota types now and, once committed, re-sync their namespaces'
    ResourceQuota (which allows quota + borrowing limit). Returns how many workloads were admitted."""
    admitted = 0
    for team_id, gpu_type_id in Quota.objects.filter(team_id__in=team_ids).values_list("team_id", "gpu_type_id"):
        admitted += len(quota_admit(team_id=team_id, gpu_type_id=gpu_type_id))
    transaction.on_commit(lambda: namespaces_sync(team_ids))
    return admitted


def namespaces_sync(team_ids: list[int]) -> None:
    """Ask the provisioner to bring these teams' namespaces (their ResourceQuota) up to date."""
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
    """A manager's rules inside the team; admission runs again at once (a raised cap may admit work).
    Values outside the model's bounds (those Django admin and the manager's form apply) raise ValidationError."""
    Team._meta.get_field("fair_share_half_life_hours").run_validators(half_life_hours)
    Team._meta.get_field("user_max_queued").run_validators(user_max_queued)
    for cap in user_max_gpus.values():
        Quota._meta.get_field("user_max_gpus").run_validators(cap)
    with transaction.atomic():
        Team.objects.filter(id=team.id).update(
            fair_share=fair_share, fair_share_half_life_hours=half_life_hours, user_max_queued=user_max_queued
        )
        for gpu_type_id, cap in user_max_gpus.items():
            Quota.objects.filter(team=team, gpu_type_id=gpu_type_id).update(user_max_gpus=cap)
        log.info("team %s sharing rules changed by %s", team.slug, by.get_username())
        sharing_changed([team.id])


def quota_change_record(*, team: Team, gpu_type: GpuType, old: int | None, new: int | None, by) -> QuotaChange | None:
    """Record one change (None: no quota) and re-run admission; returns None when nothing changed."""
    if old == new:
        return None
    admitted = quota_admit(team_id=team.id, gpu_type_id=gpu_type.id) if new else []
    change = QuotaChange.objects.create(
        team=team, gpu_type=gpu_type, old_max_gpus=old, new_max_gpus=new, changed_by=by, admitted=len(admitted)
    )
    transaction.on_commit(lambda: _sync_namespace(team, change.id))
    return change


def stopped_by(change: QuotaChange) -> int:
    """Workloads of the change's team and type that the admission right after it stopped: borrowed ones beyond
    what the cohort now lends (admission.settle_running). A team alone, with no borrowing, stops nothing."""
    previous = (
        QuotaChange.objects.filter(team=change.team, gpu_type=change.gpu_type, id__lt=change.id)
        .order_by("-id")
        .values_list("changed_at", flat=True)
        .first()
    )
    since = change.changed_at - timedelta(minutes=1)
    if previous is not None and previous > since:
        since = previous
    return WorkloadEvent.objects.filter(
        workload__team=change.team,
        workload__gpu_type=change.gpu_type,
        reason="Preempted",
        message__startswith=f"Preempted: {LIMITS_LOWERED}",
        at__gte=since,
        at__lte=change.changed_at,
    ).count()


def _sync_namespace(team: Team, change_id: int) -> None:
    try:
        namespace_ensure(team, force=True)
    except Exception as exc:  # Kubernetes unreachable or refusing: the next submission syncs it again
        log.warning("ResourceQuota of %s not updated after quota change %s: %s", team.namespace, change_id, exc)
        QuotaChange.objects.filter(id=change_id).update(
            note=f"Namespace ResourceQuota not updated yet ({exc.__class__.__name__}); the next submission retries."
        )
    else:
        # The web holds no right to change the namespace: the provisioner applies it (within a moment).
        QuotaChange.objects.filter(id=change_id).update(note="Namespace ResourceQuota update sent to the provisioner.")


# What a GPU type contributes to its teams' namespace ResourceQuota (jobs/services/provisioning.py).
NAMESPACE_QUOTA_FIELDS = frozenset(
    {
        "resource_name",
        "cpu_per_gpu_millicores",
        "max_cpu_per_gpu_millicores",
        "memory_per_gpu_mib",
        "max_memory_per_gpu_mib",
    }
)


def gpu_type_changed(*, gpu_type: GpuType, fields: set[str], created: bool) -> None:
    """After a GPU type is added or edited, the namespaces whose ResourceQuota depends on it follow, once
    committed: every team's when the type is new or its resource name changed (each namespace lists every
    GPU resource, 0 where the team has none), else those of the teams with a quota of it."""
    if not created and not fields & NAMESPACE_QUOTA_FIELDS:
        return
    if created or "resource_name" in fields:
        team_ids = list(Team.objects.values_list("id", flat=True))
    else:
        team_ids = list(Quota.objects.filter(gpu_type=gpu_type).values_list("team_id", flat=True).distinct())
    if team_ids:
        transaction.on_commit(lambda: namespaces_sync(team_ids))
