"""Celery tasks of notifications: thin, by id; the services decide (notifications.delivery)."""

from __future__ import annotations

from celery import shared_task

from notifications import delivery, events


@shared_task(name="notifications.tasks.fan_out", acks_late=True)
def fan_out(event_id: int) -> int:
    return delivery.event_fan_out(event_id)


@shared_task(name="notifications.tasks.fan_out_many", acks_late=True)
def fan_out_many(event_ids: list[int]) -> int:
    """A burst's events (the tracker's, gathered): each fanned out as `fan_out` does it, all of them in
    two statements on PostgreSQL (`delivery.events_fan_out`)."""
    return delivery.events_fan_out(event_ids)


# No Celery-level retry: a failed attempt is rescheduled in the database (bounded, with backoff) and the
# sweep hands it over when due, so a retry survives a worker restart and is never sent twice.
@shared_task(name="notifications.tasks.send", acks_late=True)
def send(delivery_id: int) -> str:
    return delivery.delivery_send(delivery_id)


@shared_task(name="notifications.tasks.sweep")
def sweep() -> dict[str, int]:
    return delivery.notifications_sweep()


@shared_task(name="notifications.tasks.time_limit_warnings")
def time_limit_warnings() -> int:
    return events.time_limit_warnings()
