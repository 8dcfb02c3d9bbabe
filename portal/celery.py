"""The Celery application: workers and beat are started with `celery -A portal ...`."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
# All Celery settings live in Django settings under the CELERY_ prefix.
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def engine_worker_holds_the_private_key(sender, **kwargs) -> None:
    """A worker that runs the engine's tasks stops at once, saying why, when it cannot open sealed values.

    The provisioner is a worker too but consumes only its own queue and never opens one: it is not asked."""
    from django.conf import settings

    from portal import sealing
    from portal.env import ConfigError

    queues = sender.app.amqp.queues
    consumed = set(queues.consume_from or queues)
    if consumed <= {settings.PROVISION_QUEUE}:
        return
    try:
        sealing.require_private_key()
    except ConfigError as exc:
        # Celery logs and swallows an Exception raised by a signal handler; SystemExit stops the worker.
        raise SystemExit(f"GPU Portal worker cannot start: {exc}") from exc
