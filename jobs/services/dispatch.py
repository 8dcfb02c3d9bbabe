"""Handing work to Celery once the database says so, without ever losing a submission to a broker outage.

Every enqueue happens on commit. If Redis is down the enqueue fails quietly (logged): the workload is
already stored in a state that the periodic sweep recognises, and the sweep hands it over again.
"""

from __future__ import annotations

import logging

from django.db import transaction

log = logging.getLogger(__name__)


def _send(task_name: str, *args: int | str) -> None:
    from portal.celery import app

    try:
        app.send_task(task_name, args=list(args))
    except Exception as exc:  # kombu raises several types; any of them means "not now"
        log.warning("could not enqueue %s%s (%s); the periodic sweep will pick it up", task_name, args, exc)


def enqueue_admission(*, team_id: int, gpu_type_id: int) -> None:
    transaction.on_commit(lambda: _send("jobs.tasks.admit", team_id, gpu_type_id))


ESTIMATE_DEBOUNCE_SECONDS = 2


def enqueue_estimate(*, team_id: int, gpu_type_id: int) -> None:
    """Refresh the queue's start estimates soon: at most one request per team and type every couple of
    seconds (a burst of submissions asks once; the periodic refresh catches anything skipped)."""

    def send() -> None:
        from django.core.cache import caches

        try:
            if not caches["api"].add(f"estimate:{team_id}:{gpu_type_id}", 1, timeout=ESTIMATE_DEBOUNCE_SECONDS):
                return
        except Exception as exc:  # Redis down: the periodic refresh will do
            log.warning("could not debounce the estimate request (%s)", exc)
            return
        _send("jobs.tasks.estimate", team_id, gpu_type_id)

    transaction.on_commit(send)


def enqueue_submit(workload_id: int) -> None:
    transaction.on_commit(lambda: _send("jobs.tasks.submit", workload_id))


def enqueue_delete(workload_id: int) -> None:
    transaction.on_commit(lambda: _send("jobs.tasks.delete_objects", workload_id))


def enqueue_preempt_delete(workload_id: int, name: str) -> None:
    transaction.on_commit(lambda: _send("jobs.tasks.preempt_objects", workload_id, name))


def enqueue_rollup(day_iso: str) -> None:
    from portal.celery import app

    def send() -> None:
        try:
            app.send_task("jobs.tasks.rollup_day", args=[day_iso])
        except Exception as exc:
            log.warning("could not enqueue usage roll-up for %s (%s); the hourly roll-up will redo it", day_iso, exc)

    transaction.on_commit(send)
