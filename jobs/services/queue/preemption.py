"""Preempting borrowed workloads so a lender gets the GPUs of its own quota back.

The decision is the admission plan's (`sharing_plan`); this module carries it out for one victim while
the admission still holds the cohort's quota locks:
- a restartable batch job goes back to QUEUED, at the front of its team's queue (its next run gets a new
  attempt number and so new object names);
- any other batch job ends FAILED (reason "Preempted"); a service ends PREEMPTED;
- its objects are deleted with a grace period (`PORTAL_PREEMPT_GRACE_SECONDS`): Kubernetes sends
  SIGTERM at once and kills the container when the grace period ends.
Every step is a timeline entry; the owner is told through the `workload_preempted` signal (notifications/receivers.py).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings

from jobs.kube import names
from jobs.models import Kind, RunSegment, State, Workload, WorkloadEvent
from jobs.services.checkpoints.cost import gpu_hours_words, lost_gpu_seconds
from jobs.services.cluster.object_creation import workload_delete_objects
from jobs.services.dispatch import enqueue_preempt_delete
from jobs.services.queue.share_explained import why_chosen_for
from jobs.services.transitions import note, requeued_attempt, transition
from jobs.services.usage.accounting import counted_start
from jobs.signals import workload_preempted

log = logging.getLogger(__name__)


def preempt(victim_id: int, *, at: datetime, for_workload_id: int | None = None, because: str = "") -> bool:
    """Stop one borrowed workload, for `for_workload_id`'s team (a lender reclaiming) or `because` of
    something else said in words (limits lowered); returns whether it moved."""
    workload = Workload.objects.select_related("team").filter(id=victim_id).first()
    if workload is None or workload.state not in State.holding():
        return False
    if not because:
        lender = Workload.objects.select_related("team").filter(id=for_workload_id).first()
        who = f"team {lender.team.name}" if lender else "the lending team"
        because = f"{who} reclaimed the GPUs it lent (this workload ran on borrowed GPUs). {why_chosen_for(workload)}"
    grace = settings.PORTAL_PREEMPT_GRACE_SECONDS
    # The objects of the attempt being stopped (a SUBMITTING one may be getting them right now).
    old_name = workload.k8s_name or names.attempt_name(workload.name, workload.uid, workload.attempt)
    stop = f"Stopping it: SIGTERM now, killed after {grace} s."
    lost = lost_gpu_seconds(
        gpus=workload.gpu_count, started_at=workload.started_at, last_checkpoint_at=workload.last_checkpoint_at, at=at
    )
    stop += f" {lost_words(workload, lost)}"
    if workload.kind == Kind.BATCH and workload.restartable:
        ran = workload.started_at
        counted = workload.counted_from
        was_borrowed = workload.borrowed
        moved = transition(
            workload,
            State.QUEUED,
            reason="Preempted",
            message=f"Preempted: {because} {stop} Requeued at the front of the queue.",
            at=at,
            lost_gpu_seconds=workload.lost_gpu_seconds + lost,
            **requeued_attempt(workload, at),
        )
    else:
        moved = transition(
            workload,
            State.FAILED if workload.kind == Kind.BATCH else State.PREEMPTED,
            reason="Preempted",
            message=f"Preempted: {because} {stop}",
            at=at,
            finished_at=at if workload.started_at else None,
            lost_gpu_seconds=workload.lost_gpu_seconds + lost,
        )
    if not moved:
        return False
    if workload.state == State.QUEUED and ran is not None:
        # The run is over but the workload is not: its GPU time stays in usage as a segment.
        close_segment(
            workload,
            began=counted_start(ran, counted),
            at=at,
            borrowed=was_borrowed,
            attempt=workload.attempt - 1,
            reason="Preempted",
            lost_gpu_seconds=lost,
        )
    enqueue_preempt_delete(workload, old_name)
    workload_preempted.send(sender=Workload, workload=workload, lost_gpu_seconds=lost)
    log.info("preempted workload %s (for workload %s) %s", workload.uid, for_workload_id, because)
    return True


def lost_words(workload: Workload, lost: float) -> str:
    """'0.42 GPU-hours of work lost (since its last checkpoint, 7 min ago).' for the timeline."""
    if workload.started_at is None:
        return "It had not started: no work lost."
    if workload.last_checkpoint_at is not None and workload.last_checkpoint_at > workload.started_at:
        return f"{gpu_hours_words(lost)} of work lost (since its last checkpoint)."
    return f"{gpu_hours_words(lost)} of work lost (no checkpoint reported in this run: since its start)."


def close_segment(
    workload: Workload, *, began: datetime, at: datetime, borrowed: bool, attempt: int, reason: str,
    lost_gpu_seconds: float = 0.0,
) -> None:  # fmt: skip
    """Keep [began, at) of a workload's run in usage apart from the workload row (see RunSegment)."""
    if at <= began:
        return
    RunSegment.objects.create(
        workload=workload,
        team_id=workload.team_id,
        owner_id=workload.owner_id,
        gpu_type_id=workload.gpu_type_id,
        gpu_count=workload.gpu_count,
        attempt=attempt,
        started_at=began,
        finished_at=at,
        borrowed=borrowed,
        reason=reason,
        lost_gpu_seconds=lost_gpu_seconds,
    )


def delete_preempted_objects(workload_id: int, name: str) -> None:
    """Delete the objects of a preempted attempt with the preemption grace period (404s are fine)."""
    workload = Workload.objects.select_related("team").filter(id=workload_id).first()
    if workload is None:
        return
    grace = settings.PORTAL_PREEMPT_GRACE_SECONDS
    workload_delete_objects(workload, name=name, grace_seconds=grace)
    note(
        workload,
        reason="PreemptionStop",
        message=f"Kubernetes asked to stop {name}: SIGTERM sent, killed after {grace} s if still running.",
        source=WorkloadEvent.Source.PORTAL,
    )
