"""Handing work to Celery once the database says so, without ever losing a submission to a broker outage.

Every enqueue happens on commit. If Redis is down the enqueue fails quietly (logged): the workload is
already stored in a state that the periodic sweep recognises, and the sweep hands it over again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

from django.db import transaction

log = logging.getLogger(__name__)


def _no_broker() -> bool:
    """No broker configured (REDIS_URL unset outside development): every send is skipped with a warning and
    the sweeps pick the work up once one is."""
    from django.conf import settings

    return settings.CELERY_BROKER_URL == settings.NO_BROKER


def _send(task_name: str, *args: int | str, countdown: float = 0.0) -> None:
    from portal.celery import app

    if _no_broker():
        log.warning("could not enqueue %s%s: no broker (set REDIS_URL to this portal's Redis)", task_name, args)
        return
    try:
        app.send_task(task_name, args=list(args), countdown=countdown or None)
    except Exception as exc:  # kombu raises several types; any of them means "not now"
        log.warning("could not enqueue %s%s (%s); the periodic sweep will pick it up", task_name, args, exc)


# --- gathered sends: a burst's hand-overs as one message --------------------------------------------------
_gathering = threading.local()


@contextmanager
def sends_gathered() -> Iterator[None]:
    """Inside the block, `gather` keeps this thread's hand-overs of one kind (committed work named by id)
    and sends them after it as one message per kind, with every id: the tracker recording a burst of ends
    publishes one fan-out of their notifications, not one per workload. Work whose message is lost (the
    process dies before the block ends, the broker is down) is found by its sweep, as any lost hand-over."""
    if getattr(_gathering, "ids", None) is not None:  # nested: the outer block sends
        yield
        return
    _gathering.ids, _gathering.once = {}, {}
    try:
        yield
    finally:
        gathered, _gathering.ids = _gathering.ids, None
        once, _gathering.once = _gathering.once, None
        held = getattr(_gathering, "held", None)
        for task_name, ids in gathered.items():
            if held is None:
                _send_ids(task_name, ids)
            else:
                held.setdefault(task_name, []).extend(ids)
        for send in once.values():
            send()


@contextmanager
def gathered_ids_held() -> Iterator[None]:
    """Inside the block, what this thread's `sends_gathered` blocks gathered (committed work named by id) is
    kept until `send_held()` (or the block's end) instead of sent at each one's end: the tracker, whose
    bursts under a busy cluster hold one or two ends each, publishes their notifications' fan-out once a
    second, not once a burst. (The `once_after_gathering` sends, an admission pass asked for, still go
    at each block's end.) Work whose message is lost with the process is found by its sweep."""
    _gathering.held = {}
    try:
        yield
    finally:
        send_held()
        _gathering.held = None


def send_held() -> int:
    """Send what `gathered_ids_held` kept so far, one message per kind; returns how many ids went."""
    held = getattr(_gathering, "held", None)
    if not held:
        return 0
    _gathering.held = {}
    for task_name, ids in held.items():
        _send_ids(task_name, ids)
    return sum(len(ids) for ids in held.values())


def once_after_gathering(key: tuple, send) -> None:
    """Run `send` now, or, inside this thread's `sends_gathered` block, once per `key` after it (when all of
    the block's work is committed): a burst of ends in one team and GPU type asks for one admission pass,
    with one Redis round trip, instead of one each."""
    once = getattr(_gathering, "once", None)
    if once is None:
        send()
    else:
        once.setdefault(key, send)


def gather(task_name: str, object_id: int) -> bool:
    """Keep `object_id` for one `task_name([ids])` message at the end of this thread's `sends_gathered`
    block; False outside one (the caller sends its own message)."""
    ids = getattr(_gathering, "ids", None)
    if ids is None:
        return False
    ids.setdefault(task_name, []).append(object_id)
    return True


def _send_ids(task_name: str, ids: list[int]) -> None:
    from portal.celery import app

    if _no_broker():
        log.warning("could not enqueue %s for %d object(s): no broker (set REDIS_URL)", task_name, len(ids))
        return
    try:
        app.send_task(task_name, args=[ids])
    except Exception as exc:  # kombu raises several types; any of them means "not now": the sweep retries
        log.warning("could not enqueue %s for %d object(s) (%s); the sweep will pick them up", task_name, len(ids), exc)


def _task(task_name: str):
    """The registered Celery task of that name, for the few hand-offs that run it the way the caller's
    configuration says (eagerly in tests and development, else through the broker). The task modules are
    loaded here, as a worker loads them, so no service imports jobs/tasks.py (which imports the services)."""
    from portal.celery import app

    if task_name not in app.tasks:
        app.loader.import_default_modules()
    return app.tasks[task_name]


def request_provisioning(*, team_id: int, slug: str) -> None:
    """Ask the provisioner (the worker of settings.PROVISION_QUEUE) for a team's namespace, now (not on
    commit: the caller is a worker waiting for it)."""
    from django.conf import settings

    _task("jobs.tasks.provision_namespace").apply_async(args=[team_id, slug], queue=settings.PROVISION_QUEUE)


def write_secret(secret_id: int, version: int, sealed: str, k8s_name: str) -> None:
    """Hand a sealed secret value to the engine's worker (the row id with the Secret's name: a task that
    reached another portal's engine matches no row there)."""
    _task("jobs.tasks.write_secret").delay(secret_id, version, sealed, k8s_name)


def remove_secret(secret_id: int, version: int, k8s_name: str) -> None:
    """Ask the engine's worker to delete a forgotten secret's Kubernetes Secret."""
    _task("jobs.tasks.remove_secret").delay(secret_id, version, k8s_name)


def enqueue_workspace_data_delete(*, workspace_id: int, by_user_id: int, claim: str) -> None:
    """Once committed, have the engine delete a workspace's data (the web's identity may not delete claims);
    `claim` ("namespace/claim") lets the task refuse a row that is not that claim."""
    task = _task("jobs.tasks.delete_workspace_data")
    transaction.on_commit(partial(task.delay, workspace_id, by_user_id, claim), robust=True)


def enqueue_admission(*, team_id: int, gpu_type_id: int) -> None:
    transaction.on_commit(lambda: _send("jobs.tasks.admit", team_id, gpu_type_id))


ADMISSION_REQUEST_TTL = 10  # seconds; then a request is sent again (a backlog; a pass lost with a killed worker)
# While submissions keep coming, a team and GPU type's requested passes start at most this often: a burst
# is admitted a few dozen at a time (one pass, a few create batches) instead of one pass and one create
# task per workload. A lone submission is not held back: its pass starts at once.
ADMISSION_PACE_SECONDS = 0.1


def _admission_key(team_id: int, gpu_type_id: int) -> str:
    return f"admission-requested:{team_id}:{gpu_type_id}"


def _last_pass_key(team_id: int, gpu_type_id: int) -> str:
    return f"admission-started:{team_id}:{gpu_type_id}"


def request_admission(*, team_id: int, gpu_type_id: int) -> None:
    """Ask a worker for an admission pass, once while one is waiting to start.

    A pass admits everything queued for the team and GPU type, and the waiting one starts after the
    caller's workload was committed (callers commit first), so it will see it: a second request would
    only queue a pass with nothing left to do. Without Redis, the request is simply sent.
    """
    from django.core.cache import caches

    def send() -> None:
        countdown = 0.0
        try:
            cache = caches["api"]
            if not cache.add(_admission_key(team_id, gpu_type_id), 1, timeout=ADMISSION_REQUEST_TTL):
                return
            last_started = cache.get(_last_pass_key(team_id, gpu_type_id))
            if last_started is not None:
                countdown = max(0.0, min(ADMISSION_PACE_SECONDS, last_started + ADMISSION_PACE_SECONDS - time.time()))
        except Exception as exc:  # the cache is Redis: down means "send it anyway"
            log.info("admission request not coalesced (%s)", exc)
        _send("jobs.tasks.admit", team_id, gpu_type_id, countdown=countdown)

    transaction.on_commit(lambda: once_after_gathering(("admit", team_id, gpu_type_id), send))


def admission_starting(*, team_id: int, gpu_type_id: int) -> None:
    """A worker's pass is starting: requests from now on need a pass of their own (it may not see them),
    not started before ADMISSION_PACE_SECONDS from now."""
    from django.core.cache import caches

    try:
        caches["api"].set(_last_pass_key(team_id, gpu_type_id), time.time(), timeout=1)
        caches["api"].delete(_admission_key(team_id, gpu_type_id))
    except Exception as exc:
        log.info("could not clear the admission request (%s)", exc)


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


# Tasks name a workload by its uid, never by its row id alone: a task that reached the wrong portal's worker
# (two portals sharing a broker) finds no workload of that uid there, where a row id would name a stranger.
def enqueue_submit(uid: str) -> None:
    transaction.on_commit(lambda: _send("jobs.tasks.submit", uid))


# An admission pass hands its creates to the worker in batches: at most SUBMIT_BATCH workloads a task
# (one load, one namespace check, one transaction for all of them). A batch creates its workloads'
# objects several at a time (object_creation.CREATES_IN_FLIGHT per worker process), so a few admitted
# together go as one task, and a long queue is spread over the worker's threads (and workers) 50 at a time.
SUBMIT_BATCH = 50


def submit_batches(uids: list) -> list[list]:
    """Pure: the uids split into batches of at most SUBMIT_BATCH, in order."""
    return [uids[start : start + SUBMIT_BATCH] for start in range(0, len(uids), SUBMIT_BATCH)]


def enqueue_submits(uids: list[str]) -> None:
    """Create the objects of many admitted workloads (an admission pass's, by uid), in batches, on one broker
    connection, once the admission is committed."""
    batches = submit_batches(list(uids))
    if not batches:
        return

    def send() -> None:
        from portal.celery import app

        if _no_broker():
            log.warning("could not enqueue %d submission(s): no broker (set REDIS_URL)", sum(map(len, batches)))
            return
        try:
            with app.producer_or_acquire() as producer:
                for batch in batches:
                    app.send_task("jobs.tasks.submit_batch", args=[batch], producer=producer)
        except Exception as exc:  # kombu raises several types; any of them means "not now"
            count = sum(map(len, batches))
            log.warning("could not enqueue %d submission(s) (%s); the periodic sweep will pick them up", count, exc)

    transaction.on_commit(send)


def enqueue_delete(workload) -> None:
    """Delete the objects of a workload that has ended (the task refuses one that has not)."""
    uid = workload.uid
    transaction.on_commit(lambda: _send("jobs.tasks.delete_objects", uid))


def enqueue_preempt_delete(workload, name: str) -> None:
    """Delete the objects `name` of an attempt that preemption ended."""
    uid = workload.uid
    transaction.on_commit(lambda: _send("jobs.tasks.preempt_objects", uid, name))


def enqueue_rollup(day_iso: str) -> None:
    from portal.celery import app

    def send() -> None:
        if _no_broker():
            log.warning("could not enqueue usage roll-up for %s: no broker (set REDIS_URL)", day_iso)
            return
        try:
            app.send_task("jobs.tasks.rollup_day", args=[day_iso])
        except Exception as exc:
            log.warning("could not enqueue usage roll-up for %s (%s); the hourly roll-up will redo it", day_iso, exc)

    transaction.on_commit(send)


WORKSPACE_VOLUMES_REQUEST_TTL = 10  # seconds: agents report every few seconds; one pass per ten is plenty


def request_workspace_volumes() -> None:
    """Ask a worker to learn which volumes new workspace claims are bound to, at most once per TTL
    (asked when a node agent reports a volume the portal cannot place yet)."""
    from django.core.cache import caches

    def send() -> None:
        try:
            if not caches["api"].add("workspace-volumes-requested", 1, timeout=WORKSPACE_VOLUMES_REQUEST_TTL):
                return
        except Exception as exc:  # the cache is Redis: down means "send it anyway"
            log.info("workspace volume request not coalesced (%s)", exc)
        _send("jobs.tasks.learn_workspace_volumes")

    transaction.on_commit(send)


def publish_ssh_keys(workload_ids: list[int]) -> None:
    """Ask the engine's worker to rewrite these services' authorized_keys Secrets (jobs.services.ssh_access)."""
    transaction.on_commit(partial(_send, "jobs.tasks.ssh_keys_publish", *workload_ids))
