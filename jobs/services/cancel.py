"""Cancelling a workload, from any state that is not final; its GPUs go back to the quota at once."""

from __future__ import annotations

from django.utils import timezone

from jobs.models import State, Workload
from jobs.services.dispatch import enqueue_delete
from jobs.services.errors import WorkloadStateError
from jobs.services.transitions import transition


def workload_cancel(*, workload: Workload, by) -> Workload:
    for _attempt in range(5):  # the tracker may move it between our read and our write
        if workload.is_final:
            raise WorkloadStateError(f"{workload.name} has already finished ({workload.get_state_display().lower()}).")
        had_objects = workload.state != State.QUEUED
        now = timezone.now()
        moved = transition(
            workload,
            State.CANCELLED,
            reason="Cancelled",
            message=f"Cancelled by {by.get_username()}.",
            actor=by,
            # A running workload stops counting GPU time when it is cancelled.
            finished_at=now if workload.started_at else None,
        )
        if moved:
            if had_objects:
                enqueue_delete(workload.id)
            return workload
    raise WorkloadStateError("The workload kept changing state; please try again.")
