"""Cancelling a workload, from any state that is not final; its GPUs go back to the quota at once."""

from __future__ import annotations

import json
import logging
from datetime import datetime

from django.utils import timezone

from jobs.kube import client as kube
from jobs.kube import names
from jobs.models import State, Workload
from jobs.services.cluster.status_mapping import container_start
from jobs.services.dispatch import enqueue_delete
from jobs.services.errors import WorkloadStateError
from jobs.services.transitions import transition

log = logging.getLogger(__name__)


def start_from_pods(workload: Workload) -> datetime | None:
    """The container start as the cluster has it, for a workload whose start the tracker has not recorded
    yet: without it, a cancel right after the start would bill nothing for GPUs that were held."""
    if not workload.namespace:
        return None
    try:
        body = kube.core().list_namespaced_pod(
            workload.namespace,
            label_selector=f"{names.LABEL_WORKLOAD}={workload.uid}",
            _preload_content=False,
            _request_timeout=kube.timeout(),
        )
        return container_start(json.loads(body.data).get("items") or [])
    except Exception as exc:
        log.warning("workload %s: could not read its pods at cancel: %s", workload.uid, kube.classify(exc).message)
        return None


def workload_cancel(*, workload: Workload, by) -> Workload:
    for _attempt in range(5):  # the tracker may move it between our read and our write
        if workload.is_final:
            raise WorkloadStateError(f"{workload.name} has already finished ({workload.get_state_display().lower()}).")
        had_objects = workload.state != State.QUEUED
        started = workload.started_at
        if started is None and workload.state in (State.SUBMITTING, State.PENDING, State.RUNNING):
            started = start_from_pods(workload)
        now = timezone.now()
        moved = transition(
            workload,
            State.CANCELLED,
            reason="Cancelled",
            message=f"Cancelled by {by.get_username()}.",
            actor=by,
            # A running workload stops counting GPU time when it is cancelled.
            started_at=started,
            finished_at=now if started else None,
        )
        if moved:
            if had_objects:
                enqueue_delete(workload)
            return workload
    raise WorkloadStateError("The workload kept changing state; please try again.")


def owner_disabled(owner, *, by) -> tuple[int, int]:
    """`owner`'s account was disabled (they left, or must stop): what they queued is cancelled, since it would
    start for someone who can no longer sign in to use it, open it or read its logs; what already holds GPUs
    keeps running (a long run may be near its end), for an admin or the team's managers to stop. Returns
    (cancelled, still holding GPUs)."""
    cancelled = 0
    for workload in Workload.objects.filter(owner=owner, state=State.QUEUED).order_by("id"):
        moved = transition(
            workload,
            State.CANCELLED,
            reason="OwnerDisabled",
            message=f"Cancelled before it started: {owner.get_username()}'s account was disabled by {by.get_username()}.",
            actor=by,
        )
        cancelled += moved  # one that was admitted meanwhile holds GPUs now, and is counted below
    holding = Workload.objects.filter(owner=owner, state__in=State.holding()).count()
    return cancelled, holding
