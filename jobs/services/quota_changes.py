"""A quota change from admin takes effect at once: it is recorded, admission runs again for that team and
GPU type, and the team namespace's ResourceQuota follows once the change is committed (the provisioner applies it).
The ResourceQuota also caps CPU and memory from the GPU types' sizes per GPU, so a change to those follows too.

Admin calls it today; it is an engine service so that any other front end can make the same change.
"""

from __future__ import annotations

import logging

from django.db import transaction

from jobs.models import GpuType, Quota, QuotaChange, Team
from jobs.services.admission import quota_admit
from jobs.services.object_creation import namespace_ensure
from jobs.services.sharing import namespaces_sync

log = logging.getLogger(__name__)


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
