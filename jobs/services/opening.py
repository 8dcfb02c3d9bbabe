"""Opening a service through the portal: its address, and the owner's "shared with my team" switch."""

from __future__ import annotations

from django.conf import settings

from jobs import policy
from jobs.models import Kind, Workload, WorkloadEvent
from jobs.services.errors import WorkloadStateError
from jobs.services.transitions import note

SHARED, UNSHARED = "SharedWithTeam", "NoLongerShared"


def open_path(workload: Workload) -> str:
    """The service's path on the portal (`/w/<uid>/`), or "" for a batch job. The app is told this prefix
    when it starts (GPUPORTAL_BASE_URL, the catalog's base-path template)."""
    return f"{settings.PROXY_PREFIX}{workload.uid}/" if workload.kind == Kind.SERVICE else ""


def open_url(workload: Workload) -> str:
    """The absolute address to open it at, on the portal's public origin (SITE_URL)."""
    path = open_path(workload)
    return f"{settings.SITE_URL.rstrip('/')}{path}" if path else ""


def workload_share(*, workload: Workload, by, shared: bool) -> bool:
    """Let (or stop letting) the owner's teammates open the service. Returns whether anything changed;
    each change is a timeline entry. Raises WorkloadStateError for anyone but the owner, or a batch job."""
    if workload.kind != Kind.SERVICE:
        raise WorkloadStateError("Only services can be opened, so only services can be shared.")
    if not policy.may_share(by, workload):
        raise WorkloadStateError("Only the owner of a service decides who else may open it.")
    changed = Workload.objects.filter(id=workload.id).exclude(shared_with_team=shared).update(shared_with_team=shared)
    workload.shared_with_team = shared
    if changed:
        note(
            workload,
            reason=SHARED if shared else UNSHARED,
            message="Teammates may now open this service." if shared else "Only its owner may open this service now.",
            source=WorkloadEvent.Source.PORTAL,
        )
    return bool(changed)
