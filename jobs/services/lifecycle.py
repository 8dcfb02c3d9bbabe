"""Periodic duties: admission and stuck-submission sweep, time limits, image-pull timeouts, cleanup."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from kubernetes.client.exceptions import ApiException

from jobs.kube import client as kube
from jobs.kube import names
from jobs.models import Kind, State, Workload
from jobs.services.cluster.status_mapping import IMAGE_PULL_REASONS
from jobs.services.dispatch import enqueue_delete, enqueue_submits
from jobs.services.queue.admission import admit_all
from jobs.services.retry import IMAGE_PULL_REASONS as RETRY_PULL_REASONS
from jobs.services.retry import retry_or_why_not
from jobs.services.transitions import transition

log = logging.getLogger(__name__)


def sweep() -> dict[str, int]:
    """Admit what fits, and hand over again admitted workloads whose objects were never created
    (a worker killed mid-task, or Redis down when they were admitted)."""
    admitted = admit_all()
    now = timezone.now()
    # updated_at: when it was admitted, last handed over again, or last touched by a worker creating its
    # objects (a batch marks its workloads when it starts, so a long batch in progress is not handed
    # over a second time, and one handed over waits its turn in the broker's queue before the next try).
    stuck = list(
        Workload.objects.filter(
            state=State.SUBMITTING, updated_at__lt=now - timedelta(seconds=settings.PORTAL_STUCK_SUBMIT_SECONDS)
        )
        .order_by("admitted_at", "id")
        .values_list("uid", flat=True)
    )
    if stuck and broker_backlog():
        # Batches still wait in the broker's queue (a long drain): theirs are late, not lost. One whose
        # worker died is handed over once the queue is worked off (or the broker redelivers it).
        stuck = []
    if stuck:
        Workload.objects.filter(uid__in=stuck, state=State.SUBMITTING).update(updated_at=now)
        enqueue_submits(stuck)
    return {"admitted": admitted, "resubmitted": len(stuck)}


def broker_backlog() -> bool:
    """Whether tasks wait in the worker's queue (Redis), unstarted; False when that cannot be told."""
    from portal.celery import app  # the Celery app imports the tasks, which import this module

    try:
        with app.connection_for_read() as connection:
            return connection.default_channel.client.llen(app.conf.task_default_queue) > 0
    except Exception as exc:  # not Redis, or unreachable: hand over as before
        log.info("could not read the broker's queue length (%s)", exc)
        return False


def enforce_limits() -> dict[str, int]:
    """Stop services past their time limit and fail workloads stuck on an image that cannot be pulled."""
    now = timezone.now()
    stopped = failed_pulls = 0
    services = Workload.objects.filter(kind=Kind.SERVICE, state__in=(State.PENDING, State.RUNNING)).exclude(
        submitted_at=None
    )
    for workload in services:
        began = workload.started_at or workload.submitted_at
        if began + timedelta(seconds=workload.time_limit_seconds) > now:
            continue
        if transition(
            workload,
            State.FAILED,
            reason="DeadlineExceeded",
            message=f"Stopped at its time limit ({workload.time_limit_seconds // 60} min).",
            finished_at=now if workload.started_at else None,
        ):
            enqueue_delete(workload)
            stopped += 1
    pull_deadline = now - timedelta(seconds=settings.PORTAL_IMAGE_PULL_TIMEOUT)
    stuck = Workload.objects.filter(
        state=State.PENDING, reason__in=IMAGE_PULL_REASONS, state_changed_at__lt=pull_deadline
    )
    for workload in stuck:
        gave_up = f"{workload.message} Gave up after {settings.PORTAL_IMAGE_PULL_TIMEOUT} s."
        why_not = ""
        if workload.reason in RETRY_PULL_REASONS:
            retried, why_not = retry_or_why_not(workload, reason="ImagePullTimeout", at=now, message=gave_up)
            if retried:
                continue
        if transition(
            workload,
            State.FAILED,
            reason=workload.reason,
            message=gave_up + why_not,
            # A service that ran before its pod was replaced on a node that cannot pull: bill until now.
            finished_at=now if workload.started_at else None,
        ):
            enqueue_delete(workload)
            failed_pulls += 1
    return {"stopped": stopped, "image_pull_failed": failed_pulls}


def _labelled_objects(selector: str) -> list[tuple[str, str, str, str, str]]:
    """The portal's Jobs, Deployments and Services (three list calls): kind, namespace, name, workload uid,
    created."""
    listings = {
        "Job": kube.batch().list_job_for_all_namespaces,
        "Deployment": kube.apps().list_deployment_for_all_namespaces,
        "Service": kube.core().list_service_for_all_namespaces,
    }
    found: list[tuple[str, str, str, str, str]] = []
    for kind, list_call in listings.items():
        body = json.loads(
            list_call(label_selector=selector, _preload_content=False, _request_timeout=kube.timeout() * 4).data
        )
        for item in body.get("items") or []:
            meta = item["metadata"]
            found.append(
                (
                    kind,
                    meta["namespace"],
                    meta["name"],
                    (meta.get("labels") or {}).get(names.LABEL_WORKLOAD, ""),
                    meta.get("creationTimestamp", ""),
                )
            )
    return found


def _due_for_deletion(
    namespace: str, workload: Workload | None, created: str, *, retention: timedelta, now: datetime
) -> bool:
    """Is an object in `namespace` (of `workload`, None for an orphan) past its retention?"""
    if not namespace.startswith(settings.KUBE_NAMESPACE_PREFIX):
        return False  # not a team namespace: whatever wears our labels there is not ours to delete
    if workload is None:
        created_at = parse_datetime(created) if created else None
        # an orphan, but give a half-finished submission time to be recorded
        return created_at is not None and created_at + retention <= now
    if namespace != (workload.namespace or workload.team.namespace):
        return False  # a look-alike in another team's namespace is not this workload's object
    return workload.state in State.final() and workload.state_changed_at + retention <= now


def cleanup() -> dict[str, int]:
    """Delete Kubernetes objects of finished workloads (after the retention period) and orphans.

    Three list calls in all, whatever the number of workloads.
    """
    selector = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY},{names.LABEL_INSTANCE}={names.label_value(settings.PORTAL_INSTANCE)}"
    retention = timedelta(seconds=settings.PORTAL_RETENTION_SECONDS)
    now = timezone.now()
    found = _labelled_objects(selector)
    known = {
        w.uid: w
        for w in Workload.objects.filter(uid__in={uid for *_, uid, _ in found})
        .select_related("team")
        .only("uid", "state", "state_changed_at", "namespace", "team__slug")
    }
    deleted = 0
    for kind, namespace, name, uid, created in found:
        if not _due_for_deletion(namespace, known.get(uid), created, retention=retention, now=now):
            continue
        try:
            _delete(kind, name, namespace)
            deleted += 1
        except ApiException as exc:
            if exc.status != 404:
                log.warning("cleanup: could not delete %s %s/%s: %s", kind, namespace, name, kube.classify(exc).message)
    return {"deleted": deleted}


def _delete(kind: str, name: str, namespace: str) -> None:
    kube.delete(kind, namespace, name, {"propagationPolicy": "Background"} if kind != "Service" else None)
