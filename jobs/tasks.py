"""Celery tasks: each loads what it names, calls one service, and declares its retry policy here.

Transient Kubernetes failures (API server down, overloaded) retry with capped exponential backoff for as
long as it takes; nothing is marked failed because the cluster was briefly unreachable.

A task may reach a worker it was not meant for (another portal that shares the broker, a message sent by
hand, a redelivery long after the fact), so none trusts its arguments: workloads are named by uid (a row
id would name a stranger in another portal's database), and a task that deletes or changes Kubernetes
objects reads the workload again and acts only when its state asks for it. A delete refused is logged as
a warning naming where the task came from.
"""

from __future__ import annotations

import logging
from datetime import date

from celery import shared_task
from django.contrib.auth import get_user_model
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from jobs.kube import names
from jobs.models import Team, Workload, Workspace
from jobs.services import dispatch, lifecycle, provisioning, ssh_access
from jobs.services.cluster import inventory, object_creation
from jobs.services.queue import admission, gangs, preemption, start_estimates
from jobs.services.storage import secrets, workspaces
from jobs.services.usage import accounting

log = logging.getLogger(__name__)

TRANSIENT = (ApiException, HTTPError, ConnectionError, TimeoutError, OSError)
RETRY = {
    "autoretry_for": TRANSIENT,
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": None,
}

# A submission also waits, retrying, for a secret it names that the engine is still writing.
SUBMIT_RETRY = (*TRANSIENT, object_creation.SecretPending)


@shared_task(name="jobs.tasks.admit")
def admit(team_id: int, gpu_type_id: int) -> list[int]:
    dispatch.admission_starting(team_id=team_id, gpu_type_id=gpu_type_id)
    return admission.quota_admit(team_id=team_id, gpu_type_id=gpu_type_id)


def _origin(task) -> str:
    """Where a task came from, for a log line: the sending process's node name and the task's id."""
    request = task.request
    return f"{getattr(request, 'origin', None) or 'an unknown sender'} (task {request.id})"


def _create_named(task, uids: list) -> int:
    """Create the objects of the workloads named by uid, in the order given (object_creation loads them by
    uid with their related rows in one statement). Anything not a uid (a row id from an older portal's
    message) is skipped, saying so: the sweep hands real work over again."""
    named = [uid for uid in uids if isinstance(uid, str)]
    if len(named) != len(uids):
        log.warning("%s: ignored %d workload(s) not named by uid, from %s", task.name, len(uids) - len(named),
                    _origin(task))  # fmt: skip

    def unknown(missing: list) -> None:
        log.warning("%s: workload(s) %s unknown here (another portal's?), from %s; nothing to do", task.name,
                    ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else ""), _origin(task))  # fmt: skip

    return object_creation.workloads_create_objects(named, by="uid", unknown=unknown) if named else 0


def _workload(task, uid) -> Workload | None:
    if not isinstance(uid, str):
        log.warning("%s: ignored, it names workload %r not by uid (from %s)", task.name, uid, _origin(task))
        return None
    workload = Workload.objects.select_related("team").filter(uid=uid).first()
    if workload is None:
        log.warning("%s: workload(s) %s unknown here (another portal's?), from %s; nothing to do", task.name, uid,
                    _origin(task))  # fmt: skip
    return workload


@shared_task(name="jobs.tasks.submit", bind=True, acks_late=True, **{**RETRY, "autoretry_for": SUBMIT_RETRY})
def submit(self, uid: str) -> None:
    """Creates objects only for an admitted workload that has none yet (object_creation checks its state)."""
    _create_named(self, [uid])


@shared_task(name="jobs.tasks.submit_batch", bind=True, acks_late=True, **RETRY)
def submit_batch(self, uids: list[str]) -> int:
    """An admission pass's creates, a batch at a time (see dispatch.enqueue_submits)."""
    return _create_named(self, uids)


@shared_task(name="jobs.tasks.provision_namespace", acks_late=True, **RETRY)
def provision_namespace(team_id: int, slug: str | None = None) -> str | None:
    """Runs only in the provisioner (the provision queue); see jobs/services/provisioning.py. It only makes
    what this portal's own team row asks for (idempotent); a `slug` that does not match the row is refused."""
    team = Team.objects.filter(id=team_id).first()
    if team is None or (slug is not None and team.slug != slug):
        log.warning("provisioning asked for team %s (%s), which is not this portal's; ignored", team_id, slug)
        return None
    try:
        return provisioning.namespace_provision(team)
    except provisioning.NamespaceRefused as exc:
        log.error("provisioning refused for team %s: %s", team_id, exc)
        return None


@shared_task(name="jobs.tasks.provision_existing", acks_late=True, **RETRY)
def provision_existing() -> int:
    """Runs only in the provisioner, once as it starts (portal/celery.py): existing team namespaces get what
    this version binds there (see provisioning.existing_namespaces_refresh)."""
    return len(provisioning.existing_namespaces_refresh())


@shared_task(name="jobs.tasks.delete_objects", bind=True, acks_late=True, **RETRY)
def delete_objects(self, uid: str) -> bool:
    """Delete an ended workload's objects (cancelled, stopped, failed, preempted). Returns whether it did:
    a workload that has not ended (no one cancelled, preempted or stopped it) keeps its objects."""
    workload = _workload(self, uid)
    if workload is None:
        return False
    if not workload.is_final:
        log.warning(
            "refused to delete the objects of workload %s (%s, %s): it has not ended (no one cancelled, "
            "preempted or stopped it); the request came from %s",
            workload.uid, workload.name, workload.state, _origin(self),
        )  # fmt: skip
        return False
    # A batch job stopped on purpose (cancel, time limit) gets the checkpoint contract's grace after SIGTERM.
    object_creation.workload_delete_objects(workload, grace_seconds=object_creation.stop_grace_seconds(workload))
    return True


@shared_task(name="jobs.tasks.write_secret", acks_late=True, **RETRY)
def write_secret(secret_id: int, version: int, sealed: str, k8s_name: str | None = None) -> str:
    """A user's secret, sealed by the web to this engine's key: opened and written here, in the engine,
    because the web's identity may write nothing in the cluster. Returns the outcome, never the value."""
    return secrets.secret_write(secret_id=secret_id, version=version, sealed=sealed, k8s_name=k8s_name)


@shared_task(name="jobs.tasks.ssh_keys_publish", acks_late=True, **RETRY)
def ssh_keys_publish(*workload_ids: int) -> int:
    """Rewrite the authorized_keys Secrets of these services (keys or sharing changed)."""
    return ssh_access.publish_all(list(workload_ids))


@shared_task(name="jobs.tasks.remove_secret", acks_late=True, **RETRY)
def remove_secret(secret_id: int, version: int, k8s_name: str | None = None) -> str:
    """Only a row of this name, in the DELETING state, at this version (a stray task matches none)."""
    return secrets.secret_remove(secret_id=secret_id, version=version, k8s_name=k8s_name)


@shared_task(name="jobs.tasks.delete_workspace_data", acks_late=True, **RETRY)
def delete_workspace_data(workspace_id: int, by_user_id: int, claim: str | None = None) -> None:
    """An admin's "delete the data" runs here, in the engine: the web's identity may not delete claims.
    `claim` ("namespace/claim"): the row must be that claim, or nothing is deleted (a task meant for another
    portal names a row id that is a stranger's workspace here)."""
    workspace = Workspace.objects.select_related("team", "owner").filter(id=workspace_id).first()
    if workspace is not None and claim is not None and f"{workspace.namespace}/{workspace.claim_name}" != claim:
        log.warning("refused to delete the data of workspace %s: it is not %s", workspace_id, claim)
        return
    if workspace is not None:  # gone already: a redelivered task has nothing left to do
        workspaces.workspace_delete_data(workspace, by=get_user_model().objects.filter(id=by_user_id).first())


@shared_task(name="jobs.tasks.learn_workspace_volumes")
def learn_workspace_volumes() -> int:
    """Map workspace claims to their bound volumes (asked by the agents' ingest, and every minute)."""
    return workspaces.workspace_volumes_learn()


@shared_task(name="jobs.tasks.preempt_objects", bind=True, acks_late=True, **RETRY)
def preempt_objects(self, uid: str, name: str) -> bool:
    """Delete the objects `name` of an attempt that preemption ended: one of this workload's own attempts,
    and not the one it runs now unless the workload has ended. Returns whether it did."""
    workload = _workload(self, uid)
    if workload is None:
        return False
    attempts = {names.attempt_name(workload.name, workload.uid, n) for n in range(workload.attempt + 1)}
    current = workload.k8s_name or names.attempt_name(workload.name, workload.uid, workload.attempt)
    if name not in attempts | {current} or (name == current and not workload.is_final):
        log.warning(
            "refused to delete %s of workload %s (%s, %s, attempt %s): not an attempt that preemption ended; "
            "the request came from %s",
            name, workload.uid, workload.name, workload.state, workload.attempt, _origin(self),
        )  # fmt: skip
        return False
    preemption.delete_preempted_objects(workload.id, name)
    return True


@shared_task(name="jobs.tasks.estimate")
def estimate(team_id: int, gpu_type_id: int) -> int:
    return len(start_estimates.estimate(team_id=team_id, gpu_type_id=gpu_type_id))


@shared_task(name="jobs.tasks.estimate_all")
def estimate_all() -> int:
    return start_estimates.estimate_all()


@shared_task(name="jobs.tasks.sweep")
def sweep() -> dict[str, int]:
    return lifecycle.sweep()


@shared_task(name="jobs.tasks.enforce_limits", **RETRY)
def enforce_limits() -> dict[str, int]:
    return lifecycle.enforce_limits()


@shared_task(name="jobs.tasks.gang_start_window", **RETRY)
def gang_start_window() -> int:
    return gangs.release_overdue()


@shared_task(name="jobs.tasks.cleanup")
def cleanup() -> dict[str, int]:
    return lifecycle.cleanup()


@shared_task(name="jobs.tasks.sync_inventory")
def sync_inventory() -> int:
    return inventory.inventory_sync()


@shared_task(name="jobs.tasks.rollup_usage")
def rollup_usage() -> int:
    return accounting.rollup_pending()


@shared_task(name="jobs.tasks.rollup_day")
def rollup_day(day_iso: str) -> int:
    return accounting.usage_rollup_day(date.fromisoformat(day_iso))
