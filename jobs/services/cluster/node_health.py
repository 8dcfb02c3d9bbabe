"""Failing GPUs kept out: the agent's reports open and close health marks, and new work avoids marked nodes.

When a report shows a GPU failing (gpu_faults.judge), its node gets an open mark: every workload rendered
from then on carries node affinity away from the node (objects.make_avoid_nodes_affinity; the portal never
writes Node objects), restartable batch jobs running there are retried elsewhere (jobs/services/retry.py,
reason GpuFault) and the owners of other work there are told on its timeline. A mark closes when an admin
clears it (nodes page, Django admin) or after PORTAL_GPU_HEALTHY_REPORTS_TO_CLEAR healthy reports in a row.
On the real nodes the device plugin's own health path is the second line: a GPU it reports unhealthy is
no longer allocatable, so the scheduler stops placing pods on it even before the portal hears.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobs.models import GpuHealthMark, GpuHealthWatch, Kind, State, Workload
from jobs.services.cluster.gpu_faults import GpuSeen, Watch, judge
from jobs.services.transitions import note
from jobs.signals import workload_on_unhealthy_gpu

log = logging.getLogger(__name__)

HOT_CELSIUS = 92
HOT_SECONDS = 300


def nodes_to_avoid() -> tuple[str, ...]:
    """Nodes with an open health mark, sorted (what new pods' affinity keeps them off)."""
    names = GpuHealthMark.objects.filter(cleared_at__isnull=True).values_list("node_name", flat=True).distinct()
    return tuple(sorted(set(names)))


def open_marks(node_name: str | None = None):
    marks = GpuHealthMark.objects.filter(cleared_at__isnull=True)
    return marks.filter(node_name=node_name) if node_name else marks


def apply_report(node_name: str, gpus: Iterable[GpuSeen], *, at: datetime | None = None) -> list[GpuHealthMark]:
    """Judge every GPU of one agent report; returns the marks it opened (each one also acted on)."""
    at = at or timezone.now()
    opened: list[GpuHealthMark] = []
    with transaction.atomic():
        for gpu in gpus:
            uuid = gpu.uuid or f"index-{gpu.index}"
            watch_row, _ = GpuHealthWatch.objects.select_for_update().get_or_create(node_name=node_name, gpu_uuid=uuid)
            verdict = judge(
                gpu,
                Watch(hot_since=watch_row.hot_since, xid_errors_seen=watch_row.xid_errors_seen),
                at=at,
                hot_celsius=HOT_CELSIUS,
                hot_seconds=HOT_SECONDS,
            )
            watch_row.hot_since, watch_row.xid_errors_seen = verdict.watch.hot_since, verdict.watch.xid_errors_seen
            watch_row.save(update_fields=["hot_since", "xid_errors_seen", "updated_at"])
            mark = (
                GpuHealthMark.objects.select_for_update()
                .filter(node_name=node_name, gpu_uuid=uuid, cleared_at__isnull=True)
                .first()
            )
            if verdict.healthy:
                if mark is not None:
                    _healthy_report(mark, at)
                continue
            cause, detail = verdict.faults[0]
            detail = "; ".join(d for _, d in verdict.faults)[:500]
            if mark is not None:
                mark.last_bad_at, mark.healthy_reports, mark.detail = at, 0, detail
                mark.save(update_fields=["last_bad_at", "healthy_reports", "detail"])
                continue
            mark = GpuHealthMark.objects.create(
                node_name=node_name, gpu_index=gpu.index, gpu_uuid=uuid, cause=cause, detail=detail,
                marked_at=at, last_bad_at=at,
            )  # fmt: skip
            opened.append(mark)
        for mark in opened:
            act_on_workloads(mark, at=at)
    for mark in opened:
        log.warning("GPU health: %s marked unhealthy (%s)", mark, mark.detail)
    return opened


def _healthy_report(mark: GpuHealthMark, at: datetime) -> None:
    mark.healthy_reports += 1
    if mark.healthy_reports >= settings.PORTAL_GPU_HEALTHY_REPORTS_TO_CLEAR:
        mark.cleared_at, mark.cleared_how = at, GpuHealthMark.Cleared.RECOVERED
        log.info("GPU health: %s healthy again after %d reports", mark, mark.healthy_reports)
    mark.save(update_fields=["healthy_reports", "cleared_at", "cleared_how"])


def clear_mark(mark: GpuHealthMark, *, by, at: datetime | None = None) -> bool:
    """An admin says the GPU is fine (replaced, reset): new work may use the node again."""
    at = at or timezone.now()
    changed = GpuHealthMark.objects.filter(id=mark.id, cleared_at__isnull=True).update(
        cleared_at=at, cleared_how=GpuHealthMark.Cleared.ADMIN, cleared_by=by
    )
    mark.refresh_from_db()
    return bool(changed)


ADMIN_MARK_UUID = "admin"  # the one open mark per node an admin's "take out" makes (no GPU of its own)


def take_out(node_name: str, *, by, at: datetime | None = None) -> bool:
    """An admin keeps new work off a node (a GPU misbehaves before the agent says so, maintenance): an open
    mark, as an agent's report makes, so new pods avoid the node. What runs there keeps running. False when
    the admin had taken it out already."""
    at = at or timezone.now()
    with transaction.atomic():
        if GpuHealthMark.objects.filter(
            node_name=node_name, gpu_uuid=ADMIN_MARK_UUID, cleared_at__isnull=True
        ).exists():
            return False
        GpuHealthMark.objects.create(
            node_name=node_name, gpu_uuid=ADMIN_MARK_UUID, cause=GpuHealthMark.Cause.ADMIN,
            detail=f"Taken out by {by.get_username()}", marked_at=at, last_bad_at=at,
        )  # fmt: skip
    log.warning("GPU health: node %s taken out by %s", node_name, by.get_username())
    return True


def act_on_workloads(mark: GpuHealthMark, *, at: datetime) -> None:
    """What runs on the node: restartable batch jobs are retried elsewhere; the others are told."""
    from jobs.services.retry import retry_instead_of_failing

    words = f"A GPU of node {mark.node_name} failed ({mark.detail})"
    for workload in Workload.objects.select_related("team").filter(
        node_name=mark.node_name, state__in=(State.PENDING, State.RUNNING)
    ):
        if (
            workload.kind == Kind.BATCH
            and workload.restartable
            and retry_instead_of_failing(
                workload, reason="GpuFault", message=f"{words}.", at=at, node_name=mark.node_name
            )
        ):
            continue
        note(
            workload,
            reason="GpuUnhealthy",
            message=f"{words}. It keeps running, but may fail; new work avoids the node until the GPU is healthy. "
            "Save your work.",
        )
        workload_on_unhealthy_gpu.send(sender=Workload, workload=workload, detail=mark.detail, mark_id=mark.id)
