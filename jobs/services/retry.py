"""Automatic retry: a restartable batch job that ends through no fault of its own runs again.

"No fault of its own": evicted by its node, its node lost or shut down, a GPU fault under it, an image
pull that timed out (the registry, not the job). Such a job goes back to the front of its team's queue
(as a preempted one does, jobs/services/queue/preemption.py) with GPUPORTAL_ATTEMPT one more, after a
backoff (PORTAL_RETRY_BACKOFF_SECONDS doubling per retry, at most PORTAL_RETRY_BACKOFF_MAX_SECONDS), up to
its retry limit (its launch's, else its team's default). An exit code of its own is final unless its
launch lists it as retryable. Preemptions requeue without counting against the limit: they are the
portal's choice, never the job's trouble. Every attempt stays on the one workload's timeline with its
reason, node and GPU-hours.

`decide` and `backoff_seconds` are pure; `retry_instead_of_failing` applies them to a workload about to fail.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from jobs.models import Kind, RunSegment, State, Workload
from jobs.services.checkpoints.cost import gpu_hours_words, lost_gpu_seconds
from jobs.services.transitions import requeued_attempt, transition
from jobs.services.usage.accounting import counted_start
from jobs.signals import workload_retried

log = logging.getLogger(__name__)

# Kubernetes' and the portal's reasons for an end that is not the job's doing.
NOT_ITS_FAULT = {
    "Evicted": "evicted by its node",
    "NodeLost": "its node was lost",
    "NodeShutdown": "its node shut down",
    "Shutdown": "its node shut down",
    "Terminated": "its node terminated it",
    "TerminationByKubelet": "its node terminated it",
    "DeletionByTaintManager": "its node became unreachable",
    "EvictionByEvictionAPI": "its node was drained",
    "PreemptionByScheduler": "the scheduler made room for other work",
    "UnexpectedAdmissionError": "its node could not admit it",
    "PodLost": "its pod was lost with its node",
    "GpuFault": "a GPU under it failed",
    "ImagePullTimeout": "its image could not be pulled in time",
}
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff"})


@dataclass(frozen=True)
class Decision:
    retry: bool
    why: str  # words for the timeline: why it is retried, or why not


def decide(
    *, kind: str, restartable: bool, reason: str, exit_code: int | None, retryable_exit_codes: list[int],
    retries: int, limit: int,
) -> Decision:  # fmt: skip
    """Whether an end with `reason` (and `exit_code`) is retried."""
    if kind != Kind.BATCH or not restartable:
        return Decision(False, "not restartable")
    if reason == "ExitCode" and exit_code is not None and exit_code in (retryable_exit_codes or []):
        cause = f"it exited with code {exit_code}, which its launch lists as retryable"
    elif reason in NOT_ITS_FAULT:
        cause = NOT_ITS_FAULT[reason]
    else:
        return Decision(False, "its own end")
    if retries >= limit:
        return Decision(
            False, f"{cause}, but it was already retried {retries} time{'s' if retries != 1 else ''} (limit {limit})"
        )
    return Decision(True, cause)


def backoff_seconds(retries: int, *, base: int, cap: int) -> int:
    """Wait before retry number `retries` + 1: base, 2xbase, 4xbase, … at most `cap`."""
    if base <= 0:
        return 0
    return min(cap, base * (2 ** min(retries, 20)))


def retry_limit(workload: Workload) -> int:
    return workload.retry_limit if workload.retry_limit is not None else workload.team.default_retry_limit


def retry_instead_of_failing(
    workload: Workload, *, reason: str, message: str, at: datetime, exit_code: int | None = None,
    node_name: str = "", source: str = "portal",
) -> bool:  # fmt: skip
    """If this end of `workload` is one it is retried after, requeue it (returns True): the run closes
    as a usage segment, its attempt's objects go with the grace period, and it waits out its backoff at
    the front of its queue. Else returns False and the caller fails it as before."""
    retried, _ = retry_or_why_not(
        workload, reason=reason, message=message, at=at, exit_code=exit_code, node_name=node_name, source=source
    )
    return retried


def retry_or_why_not(
    workload: Workload, *, reason: str, message: str, at: datetime, exit_code: int | None = None,
    node_name: str = "", source: str = "portal",
) -> tuple[bool, str]:  # fmt: skip
    """`retry_instead_of_failing`, and when it is not retried though the end was not its fault (the limit
    was reached), the words its failure message should end with ("" otherwise)."""
    if workload.state not in State.holding():
        return False, ""
    decision = decide(
        kind=workload.kind, restartable=workload.restartable, reason=reason, exit_code=exit_code,
        retryable_exit_codes=workload.retryable_exit_codes, retries=workload.retries, limit=retry_limit(workload),
    )  # fmt: skip
    if not decision.retry:
        if decision.why in ("not restartable", "its own end"):
            return False, ""
        return False, f" Not retried: {decision.why}."
    retried = requeue(
        workload, reason=reason, at=at, because=f"{message} Retried: {decision.why}.", node_name=node_name,
        count_retry=True, source=source,
    )  # fmt: skip
    return retried, ""


def requeue(
    workload: Workload, *, reason: str, at: datetime, because: str, node_name: str = "", count_retry: bool,
    source: str = "portal",
) -> bool:  # fmt: skip
    """Send a holding restartable batch job back to the front of its queue for its next attempt."""
    from jobs.services.dispatch import enqueue_preempt_delete

    ran, counted, was_borrowed = workload.started_at, workload.counted_from, workload.borrowed
    node = node_name or workload.node_name
    old_name = workload.k8s_name
    lost = lost_gpu_seconds(
        gpus=workload.gpu_count, started_at=ran, last_checkpoint_at=workload.last_checkpoint_at, at=at
    )
    used = workload.gpu_count * max(0.0, (at - ran).total_seconds()) if ran else 0.0
    retries = workload.retries + (1 if count_retry else 0)
    wait = (
        backoff_seconds(
            workload.retries, base=settings.PORTAL_RETRY_BACKOFF_SECONDS, cap=settings.PORTAL_RETRY_BACKOFF_MAX_SECONDS
        )
        if count_retry
        else 0
    )
    limit = retry_limit(workload)
    attempt_words = (
        f"Attempt {workload.attempt} ended{f' on {node}' if node else ''} after {gpu_hours_words(used)}; "
        f"{gpu_hours_words(lost)} lost since its last checkpoint{'' if workload.last_checkpoint_at else ' (none: since its start)'}."
    )
    then = f" Retry {retries} of {limit}" if count_retry else " Requeued"
    then += f", at the front of the queue{f' after {wait} s of backoff' if wait else ''}."
    moved = transition(
        workload,
        State.QUEUED,
        reason=reason if reason != "ExitCode" else "RetryableExit",
        message=f"{because} {attempt_words}{then}",
        at=at,
        source=source,
        retries=retries,
        retry_not_before=at + timedelta(seconds=wait) if wait else None,
        lost_gpu_seconds=workload.lost_gpu_seconds + lost,
        **requeued_attempt(workload, at),
    )
    if not moved:
        return False
    began = counted_start(ran, counted) if ran is not None else None
    if began is not None and at > began:
        # The run is over but the workload is not: its GPU time stays in usage as a segment (as preemption's).
        RunSegment.objects.create(
            workload=workload, team_id=workload.team_id, owner_id=workload.owner_id, gpu_type_id=workload.gpu_type_id,
            gpu_count=workload.gpu_count, attempt=workload.attempt - 1, started_at=began, finished_at=at,
            borrowed=was_borrowed, reason=reason[:32], lost_gpu_seconds=lost,
        )  # fmt: skip
    if old_name:
        enqueue_preempt_delete(workload, old_name)
    if count_retry:
        workload_retried.send(sender=Workload, workload=workload, reason=reason, lost_gpu_seconds=lost)
    log.info("workload %s: requeued for attempt %d (%s)", workload.uid, workload.attempt, reason)
    return True
