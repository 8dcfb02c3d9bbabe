"""Running the notification pipeline in the test process, as the Celery tasks would."""

from __future__ import annotations

from notifications.delivery import delivery_send, event_fan_out
from notifications.models import Delivery, Event


def deliver_everything() -> dict[str, str]:
    """Fan out every event not yet fanned out and send every pending delivery once; returns outcomes."""
    for event_id in Event.objects.filter(fanned_out_at=None).values_list("id", flat=True):
        event_fan_out(event_id)
    return {
        str(d.id): delivery_send(d.id) for d in Delivery.objects.filter(status=Delivery.Status.PENDING).order_by("id")
    }
