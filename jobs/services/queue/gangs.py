"""A gang job's start window: all of its ranks run within it, or none of them holds GPUs after it.

As Kueue's waitForPodsReady: a gang whose objects were made more than GANG_START_WINDOW_SECONDS ago and
whose ranks are not all running (some pending: GPUs taken outside the portal, a node lost, an image still
pulling) has every rank deleted, its GPUs freed and its quota released, and goes back to the front of
its team's queue with the reason on its timeline. Ranks that did run keep their GPU time in usage (a
run segment each). Admission then takes it again as soon as its whole gang fits; in the cluster it is
placed whole or released whole again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobs.kube import names
from jobs.models import GangRank, GpuNode, GpuType, RunSegment, State, Workload
from jobs.services.cluster.object_creation import workload_delete_objects
from jobs.services.dispatch import request_admission
from jobs.services.transitions import requeued_attempt, transition

log = logging.getLogger(__name__)

RELEASE_REASON = "GangStartTimeout"
RELEASE_GRACE_SECONDS = 5  # the ranks that run were never the whole gang: SIGTERM, then killed soon after


def overdue_gangs(now: datetime | None = None) -> list[Workload]:
    """Gangs past their start window and not all running (PENDING: objects made, some rank not running)."""
    since = (now or timezone.now()) - timedelta(seconds=settings.GANG_START_WINDOW_SECONDS)
    return list(
        Workload.objects.select_related("team")
        .filter(nodes__gt=1, state=State.PENDING, submitted_at__lt=since)
        .order_by("submitted_at", "id")
    )


def release_overdue(now: datetime | None = None) -> int:
    """Release every overdue gang (see the module's docstring); returns how many were released."""
    now = now or timezone.now()
    released = 0
    for workload in overdue_gangs(now):
        try:
            released += gang_release(workload, at=now)
        except Exception:
            log.exception("gang %s: could not release it after its start window", workload.uid)
    return released


def gang_release(workload: Workload, *, at: datetime) -> bool:
    """Back to the front of the queue, every rank deleted; returns whether it moved."""
    window = settings.GANG_START_WINDOW_SECONDS
    old_name = workload.k8s_name or names.attempt_name(workload.name, workload.uid, workload.attempt)
    ranks = list(GangRank.objects.filter(workload=workload, attempt=workload.attempt))
    running = sum(1 for r in ranks if r.phase == State.RUNNING)
    waiting = workload.message or "waiting to be placed."
    message = (
        f"Not all {workload.nodes} ranks were running within the start window ({window} s): {waiting} "
        f"Every rank was stopped and its GPUs freed ({running} had started); back at the front of the queue."
    )
    borrowed = workload.borrowed
    with transaction.atomic():
        moved = transition(
            workload,
            State.QUEUED,
            reason=RELEASE_REASON,
            message=message,
            at=at,
            **requeued_attempt(workload, at),
        )
        if not moved:
            return False
        per_node = workload.gpus_per_node
        for rank in ranks:
            if rank.started_at is not None:
                _rank_segment(workload, rank, at=at, per_node=per_node, borrowed=borrowed)
    workload_delete_objects(workload, name=old_name, grace_seconds=RELEASE_GRACE_SECONDS)
    request_admission(team_id=workload.team_id, gpu_type_id=workload.gpu_type_id)
    log.info("gang %s released after its start window (%d of %d ranks running)", workload.uid, running, workload.nodes)
    return True


def _rank_segment(workload: Workload, rank: GangRank, *, at: datetime, per_node: int, borrowed: bool) -> None:
    """A rank that ran while the gang waited: its GPU time stays in usage (as a preempted run's does)."""
    end = rank.finished_at or at
    if end <= rank.started_at:
        return
    RunSegment.objects.create(
        workload=workload,
        team_id=workload.team_id,
        owner_id=workload.owner_id,
        gpu_type_id=workload.gpu_type_id,
        gpu_count=per_node,
        attempt=workload.attempt - 1,
        started_at=rank.started_at,
        finished_at=end,
        borrowed=borrowed,
        reason=RELEASE_REASON,
    )


# --- what the launch page shows ---------------------------------------------------------------------
@dataclass(frozen=True)
class GangOutlook:
    """A gang job as the launch page shows it: "2 nodes x 4 P100 = 8 GPUs", and whether the cluster has
    that many nodes with room for one rank each right now (the quota outlook says the rest)."""

    nodes: int
    per_node: int
    gpu_type_name: str
    nodes_with_room: int
    window_seconds: int

    @property
    def total(self) -> int:
        return self.nodes * self.per_node

    @property
    def fits_cluster_now(self) -> bool:
        return self.nodes_with_room >= self.nodes

    @property
    def window_minutes(self) -> str:
        minutes, seconds = divmod(self.window_seconds, 60)
        return f"{minutes} min" if not seconds else f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


def gang_outlook(gpu_type: GpuType, *, nodes: int, per_node: int) -> GangOutlook:
    """One query over the type's nodes, as the last inventory sync saw them."""
    room = sum(
        1
        for allocatable, in_use in GpuNode.objects.filter(gpu_type=gpu_type, ready=True, schedulable=True).values_list(
            "gpus_allocatable", "gpus_in_use"
        )
        if allocatable - in_use >= per_node
    )
    return GangOutlook(nodes, per_node, gpu_type.display_name, room, settings.GANG_START_WINDOW_SECONDS)


def gang_ranks(workload: Workload, now: datetime | None = None) -> list[GangRank]:
    """A gang job's ranks of its current attempt, rank order, each with `gpu_hours` (GPUs per node times
    its own run, by Kubernetes' start and end; live while it runs). Empty for a one-node job."""
    if workload.nodes <= 1:
        return []
    now = now or timezone.now()
    ranks = list(GangRank.objects.filter(workload=workload, attempt=workload.attempt).order_by("rank"))
    for rank in ranks:
        end = rank.finished_at or (now if rank.phase == State.RUNNING else rank.started_at)
        ran = (end - rank.started_at).total_seconds() if rank.started_at and end else 0.0
        rank.gpu_hours = workload.gpus_per_node * max(0.0, ran) / 3600
    return ranks
