"""Recording events: the one function other code calls (`notify`), and the hook on workload transitions.

An event is a row written in the caller's transaction (so a rolled-back change tells nobody) and handed
to Celery on commit; if the broker is down then, the periodic sweep hands it over later.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from jobs import sql as jobs_sql
from jobs.models import Kind, State, Workload
from jobs.services import transitions
from notifications.models import Event, Topic

log = logging.getLogger(__name__)

SUCCEEDED = "workload.succeeded"
FAILED = "workload.failed"
CANCELLED = "workload.cancelled"
STARTED = "workload.started"
IDLE_WARNING = "workload.idle_warning"
TIME_LIMIT_WARNING = "workload.time_limit_warning"
PREEMPTED = "workload.preempted"  # a lender reclaimed its GPUs (requeued or ended; see jobs.services.queue.preemption)
RETRIED = "workload.retried"  # ended through no fault of its own, requeued (jobs.services.retry)
GPU_UNHEALTHY = "workload.gpu_unhealthy"  # a GPU of its node failed; it runs on (jobs.services.cluster.node_health)

# Every kind of event and the preference topic it belongs to. A new kind is one line here.
KINDS: dict[str, Topic] = {
    SUCCEEDED: Topic.FINISHED,
    FAILED: Topic.PROBLEMS,
    CANCELLED: Topic.PROBLEMS,
    STARTED: Topic.STARTED,
    IDLE_WARNING: Topic.WARNINGS,
    TIME_LIMIT_WARNING: Topic.WARNINGS,
    PREEMPTED: Topic.PROBLEMS,
    RETRIED: Topic.PROBLEMS,
    GPU_UNHEALTHY: Topic.WARNINGS,
}


def notify(
    *, kind: str, workload: Workload, summary: str, key: str = "", gather: bool = False, **details: Any
) -> Event | None:
    """Record that `kind` happened to `workload`: its owner and its team's webhook hear about it once.

    Call it inside the transaction that made it happen. `key` says what "once" means (default: once per
    kind and workload; add a discriminator for events that may recur). `details` go into the message
    beside the workload's own facts. Returns None when an event with this key was already recorded.
    `gather`: where the caller records many moves in one transaction (the tracker's burst), the event is
    stored with the others of that transaction in one INSERT as it ends, and returned unsaved.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown notification kind {kind!r}; add it to notifications.events.KINDS")
    event = Event(
        key=key or f"{kind}:{workload.uid}",
        kind=kind,
        workload_id=workload.id,
        team_id=workload.team_id,
        recipient_id=workload.owner_id,
        summary=summary[:300],
        details={**workload_facts(workload), **details},
    )
    if gather and transitions.write_before_commit("notifications.events", event, _store_gathered):
        return event
    # One statement, no savepoint: an event already recorded under the key (a retried caller, or a state
    # reached twice, as a service whose pod was made again) stores nothing.
    if not jobs_sql.insert(event, unless_taken=("key",)):
        return None
    transaction.on_commit(lambda: _fan_out_soon(event.id))
    return event


def _store_gathered(events: list[Event]) -> None:
    """The gathered events in one statement; each stored one handed to a worker on commit."""
    jobs_sql.insert_many(events, unless_taken=("key",))
    for event in events:
        if event.pk is not None:
            transaction.on_commit(partial(_fan_out_soon, event.pk))


def _fan_out_soon(event_id: int) -> None:
    """Hand the committed event to a worker: with the others of a burst where the caller gathers its sends
    (the tracker, jobs.services.dispatch.sends_gathered), else alone."""
    from jobs.services import dispatch

    if not dispatch.gather("notifications.tasks.fan_out_many", event_id):
        enqueue("notifications.tasks.fan_out", event_id)


def enqueue(task_name: str, object_id: int) -> None:
    from portal.celery import app

    try:
        app.send_task(task_name, args=[object_id])
    except Exception as exc:  # kombu raises several types; all mean "not now": the sweep retries
        log.warning("could not enqueue %s(%s) (%s); the notification sweep will pick it up", task_name, object_id, exc)


def workload_facts(workload: Workload) -> dict[str, Any]:
    """What every message about a workload says, as it was when the event happened."""
    return {
        "uid": workload.uid,
        "name": workload.name,
        "kind": workload.kind,
        "team": workload.team.name,
        "state": workload.state,
        "reason": workload.reason,
        "message": workload.message,
        "gpu_type": workload.gpu_type.display_name,
        "gpu_count": workload.gpu_count,
        "gpu_hours": round(workload.gpu_seconds() / 3600, 4),
        "started_at": _iso(workload.started_at),
        "finished_at": _iso(workload.finished_at),
        "url": settings.SITE_URL.rstrip("/") + reverse("workload_detail", args=[workload.uid]),
    }


def workload_transitioned(workload: Workload, *, from_state: str, actor: Any = None) -> None:
    """The hook in jobs.services.transitions.transition, inside its transaction: which moves are news."""
    state, name = workload.state, workload.name
    if state == State.SUCCEEDED:
        notify(kind=SUCCEEDED, workload=workload, summary=f"{name} succeeded ({_gpu_hours(workload)}).", gather=True)
    elif state == State.FAILED:
        notify(kind=FAILED, workload=workload, summary=f"{name} failed: {_why(workload)}", gather=True)
    elif state == State.CANCELLED:
        if actor is not None and getattr(actor, "pk", None) == workload.owner_id:
            return  # people know what they cancelled themselves
        summary = f"{name} was stopped: {workload.message or workload.reason}"
        notify(kind=CANCELLED, workload=workload, summary=summary, gather=True)
    elif state == State.RUNNING and from_state != State.RUNNING:
        _started_after_a_wait(workload)


def _why(workload: Workload) -> str:
    return workload.message or workload.reason or "no reason given"


def _started_after_a_wait(workload: Workload) -> None:
    """A workload that waited in the queue long enough to be news has started."""
    waited = _waited(workload)
    if waited >= timedelta(seconds=settings.NOTIFY_QUEUED_MIN_SECONDS):
        notify(
            kind=STARTED,
            workload=workload,
            summary=f"{workload.name} started after waiting {_duration(waited)} in the queue.",
            gather=True,
            waited_seconds=int(waited.total_seconds()),
        )


def _waited(workload: Workload) -> timedelta:
    if workload.admitted_at is None:
        return timedelta(0)
    return workload.admitted_at - workload.created_at


def _gpu_hours(workload: Workload) -> str:
    return f"{workload.gpu_seconds() / 3600:.2f} GPU-hours"


def _duration(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def time_limit_warnings(*, now: datetime | None = None) -> int:
    """Warn owners of services that reach their time limit within NOTIFY_TIME_LIMIT_WARNING_SECONDS."""
    now = now or timezone.now()
    ahead = timedelta(seconds=settings.NOTIFY_TIME_LIMIT_WARNING_SECONDS)
    services = Workload.objects.filter(kind=Kind.SERVICE, state=State.RUNNING).exclude(started_at=None)
    due = []
    for workload in services.select_related("team", "gpu_type"):
        deadline = workload.started_at + timedelta(seconds=workload.time_limit_seconds)
        if now < deadline <= now + ahead:
            due.append((workload, deadline))
    warned = set(
        Event.objects.filter(key__in=[f"{TIME_LIMIT_WARNING}:{w.uid}" for w, _ in due]).values_list("key", flat=True)
    )
    count = 0
    for workload, deadline in due:
        if f"{TIME_LIMIT_WARNING}:{workload.uid}" in warned:
            continue
        with transaction.atomic():
            if notify(
                kind=TIME_LIMIT_WARNING,
                workload=workload,
                summary=f"{workload.name} reaches its time limit at {deadline:%Y-%m-%d %H:%M} UTC and will be stopped then.",
                stops_at=deadline.isoformat(),
            ):
                count += 1
    return count
