"""A quota change from admin takes effect at once: it is recorded, admission runs again for that team and
GPU type, and the team namespace's ResourceQuota follows once the change is committed (the provisioner applies it).

Admin calls it today; it is an engine service so that any other front end can make the same change.
"""

from __future__ import annotations

import logging

from django.db import transaction

from jobs.models import GpuType, QuotaChange, Team
from jobs.services.admission import quota_admit
from jobs.services.object_creation import namespace_ensure

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
