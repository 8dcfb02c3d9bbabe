"""The Celery application: workers and beat are started with `celery -A portal ...`."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import beat_init, task_postrun, task_prerun, worker_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
# All Celery settings live in Django settings under the CELERY_ prefix.
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# A worker process keeps its database connection from one task to the next (settings.CELERY_DB_REUSE_MAX,
# read by Celery's Django fix-up, which otherwise closes it before and after every task whatever
# CONN_MAX_AGE says); between tasks Django's own rule decides, as between a web process's requests.


@task_prerun.connect
@task_postrun.connect
def connections_as_between_requests(sender=None, **kwargs) -> None:
    """Close a connection that is too old, broken or left in a failed transaction, as Django does around a
    request; a healthy one stays for the next task. Tasks run eagerly (inside a request) are left alone."""
    if sender is not None and getattr(sender.request, "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()


def require_broker(what: str) -> None:
    """A worker or beat with no broker of this portal's own stops at once, saying why (settings give no
    default: a shared one would let portals run each other's tasks)."""
    from django.conf import settings

    if settings.CELERY_BROKER_URL == settings.NO_BROKER:
        raise SystemExit(f"GPU Portal {what} cannot start: set REDIS_URL (or CELERY_BROKER_URL) to this portal's Redis")


@beat_init.connect
def beat_has_a_broker(sender, **kwargs) -> None:
    require_broker("beat")


@worker_init.connect
def engine_worker_holds_the_private_key(sender, **kwargs) -> None:
    """A worker that runs the engine's tasks stops at once, saying why, when it cannot open sealed values.

    The provisioner is a worker too but consumes only its own queue and never opens one: it is not asked."""
    from portal import sealing
    from portal.env import ConfigError

    require_broker("worker")
    if _consumes_only_provision(sender.app):
        return
    try:
        sealing.require_private_key()
    except ConfigError as exc:
        # Celery logs and swallows an Exception raised by a signal handler; SystemExit stops the worker.
        raise SystemExit(f"GPU Portal worker cannot start: {exc}") from exc


def _consumes_only_provision(app) -> bool:
    from django.conf import settings

    queues = app.amqp.queues
    return set(queues.consume_from or queues) <= {settings.PROVISION_QUEUE}


@worker_ready.connect
def provisioner_refreshes_existing_namespaces(sender, **kwargs) -> None:
    """The provisioner, as it starts, asks itself to bring existing team namespaces up to date, so what a new
    version binds there (the proxy's read role, say) reaches namespaces made by an older one."""
    from django.conf import settings

    if _consumes_only_provision(sender.app):
        sender.app.send_task("jobs.tasks.provision_existing", queue=settings.PROVISION_QUEUE)
