"""A batch job's pod replaced by Kubernetes itself: the work its old pod did since the last checkpoint is lost.

The portal gives every Job `backoffLimit: 0`, yet the Job controller of older Kubernetes (before pod failure
tracking with finalizers, 1.26) counts a pod that is being deleted but never reached Failed (its node lost,
the taint manager deleting it, nothing left to confirm its end) as neither active nor failed, and makes a
new pod for the Job. The tracker then sees the same attempt under a new pod uid. That is an end through no
fault of the job's own:
- a restartable job is retried as its next attempt (jobs/services/retry.py, reason PodLost): the Job and its
  new pod go, the attempt after resumes from its checkpoint, and the lost GPU-hours are on its timeline and
  in usage as for any retry;
- any other job runs on in the new pod (started again from the beginning by its own code, or from its
  checkpoint); the portal records the GPU-hours the old pod threw away (its GPUs x the time since its last
  checkpoint, or since its start) on its timeline and in Workload.lost_gpu_seconds, which usage counts apart.
"""

from __future__ import annotations

import logging
from typing import Protocol

from django.utils import timezone

from jobs.models import Kind, State, Workload
from jobs.services.checkpoints.cost import gpu_hours_words, lost_gpu_seconds
from jobs.services.transitions import note


class Observation(Protocol):
    """What this module reads of an observed pod (status_mapping's Observation has it)."""

    pod_uid: str
    pod_name: str
    node_name: str


log = logging.getLogger(__name__)

REASON = "PodLost"


def is_replacement(workload: Workload, obs: Observation) -> bool:
    """The observed pod is another one than the running attempt's own (pure). Not for a gang: its ranks are
    different pods by design, and a rank's loss ends the whole gang (gang_tracking)."""
    return (
        workload.kind == Kind.BATCH
        and workload.nodes <= 1
        and workload.state in (State.RUNNING, State.PENDING)
        and workload.started_at is not None
        and bool(workload.pod_uid)
        and bool(obs.pod_uid)
        and obs.pod_uid != workload.pod_uid
    )


def record_replacement(workload: Workload, obs: Observation) -> bool:
    """Retry a restartable job after its pod was replaced; else keep the lost GPU-hours and follow the new
    pod. Returns whether anything was written."""
    from jobs.services.retry import retry_or_why_not

    at = timezone.now()
    node = workload.node_name
    what = (
        f"Kubernetes replaced its pod{f' on {node}' if node else ''} with a new one ({obs.pod_name or obs.pod_uid}): "
        "the old pod was taken away before it ended (as when its node is lost)."
    )
    retried, why_not = retry_or_why_not(
        workload, reason=REASON, message=what, at=at, node_name=node, source="kubernetes"
    )
    if retried:
        return True
    lost = lost_gpu_seconds(
        gpus=workload.gpu_count, started_at=workload.started_at, last_checkpoint_at=workload.last_checkpoint_at, at=at
    )
    since = (
        "its last checkpoint"
        if workload.last_checkpoint_at and workload.last_checkpoint_at > workload.started_at
        else "its start"
    )
    fields = {
        "lost_gpu_seconds": workload.lost_gpu_seconds + lost,
        "pod_uid": obs.pod_uid,
        "pod_name": obs.pod_name or workload.pod_name,
        "node_name": obs.node_name or workload.node_name,
        "updated_at": at,
    }
    if not Workload.objects.filter(id=workload.id, state=workload.state, pod_uid=workload.pod_uid).update(**fields):
        return False
    for key, value in fields.items():
        setattr(workload, key, value)
    note(
        workload,
        reason=REASON,
        message=f"{what} {gpu_hours_words(lost)} of work lost (since {since}); it runs on in the new pod.{why_not}",
    )
    log.info("workload %s: pod replaced by Kubernetes, %.0f GPU-seconds lost", workload.uid, lost)
    return True
