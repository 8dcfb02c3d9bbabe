"""Celery tasks: each loads by id, calls one service, and declares its retry policy here.

Transient Kubernetes failures (API server down, overloaded) retry with capped exponential backoff for as
long as it takes; nothing is marked failed because the cluster was briefly unreachable.
"""

from __future__ import annotations

import logging
from datetime import date

from celery import shared_task
from django.contrib.auth import get_user_model
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from jobs.models import Team, Workload, Workspace
from jobs.services import (
    accounting,
    admission,
    dispatch,
    estimates,
    inventory,
    lifecycle,
    object_creation,
    preemption,
    provisioning,
    secrets,
    workspaces,
)

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


@shared_task(name="jobs.tasks.submit", bind=True, acks_late=True, **{**RETRY, "autoretry_for": SUBMIT_RETRY})
def submit(self, workload_id: int) -> None:
    object_creation.workload_create_objects(workload_id)


@shared_task(name="jobs.tasks.submit_batch", bind=True, acks_late=True, **RETRY)
def submit_batch(self, workload_ids: list[int]) -> int:
    """An admission pass's creates, a batch at a time (see dispatch.enqueue_submits)."""
    return object_creation.workloads_create_objects(workload_ids)


@shared_task(name="jobs.tasks.provision_namespace", acks_late=True, **RETRY)
def provision_namespace(team_id: int) -> str | None:
    """Runs only in the provisioner (the provision queue); see jobs/services/provisioning.py."""
    team = Team.objects.filter(id=team_id).first()
    if team is None:
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


@shared_task(name="jobs.tasks.delete_objects", acks_late=True, **RETRY)
def delete_objects(workload_id: int) -> None:
    workload = Workload.objects.select_related("team").filter(id=workload_id).first()
    if workload is not None:
        object_creation.workload_delete_objects(workload)


@shared_task(name="jobs.tasks.write_secret", acks_late=True, **RETRY)
def write_secret(secret_id: int, version: int, sealed: str) -> str:
    """A user's secret, sealed by the web to this engine's key: opened and written here, in the engine,
    because the web's identity may write nothing in the cluster. Returns the outcome, never the value."""
    return secrets.secret_write(secret_id=secret_id, version=version, sealed=sealed)


@shared_task(name="jobs.tasks.remove_secret", acks_late=True, **RETRY)
def remove_secret(secret_id: int, version: int) -> str:
    return secrets.secret_remove(secret_id=secret_id, version=version)


@shared_task(name="jobs.tasks.delete_workspace_data", acks_late=True, **RETRY)
def delete_workspace_data(workspace_id: int, by_user_id: int) -> None:
    """An admin's "delete the data" runs here, in the engine: the web's identity may not delete claims."""
    workspace = Workspace.objects.select_related("team", "owner").filter(id=workspace_id).first()
    if workspace is not None:  # gone already: a redelivered task has nothing left to do
        workspaces.workspace_delete_data(workspace, by=get_user_model().objects.filter(id=by_user_id).first())


@shared_task(name="jobs.tasks.learn_workspace_volumes")
def learn_workspace_volumes() -> int:
    """Map workspace claims to their bound volumes (asked by the agents' ingest, and every minute)."""
    return workspaces.workspace_volumes_learn()


@shared_task(name="jobs.tasks.preempt_objects", acks_late=True, **RETRY)
def preempt_objects(workload_id: int, name: str) -> None:
    preemption.delete_preempted_objects(workload_id, name)


@shared_task(name="jobs.tasks.estimate")
def estimate(team_id: int, gpu_type_id: int) -> int:
    return len(estimates.estimate(team_id=team_id, gpu_type_id=gpu_type_id))


@shared_task(name="jobs.tasks.estimate_all")
def estimate_all() -> int:
    return estimates.estimate_all()


@shared_task(name="jobs.tasks.sweep")
def sweep() -> dict[str, int]:
    return lifecycle.sweep()


@shared_task(name="jobs.tasks.enforce_limits", **RETRY)
def enforce_limits() -> dict[str, int]:
    return lifecycle.enforce_limits()


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
