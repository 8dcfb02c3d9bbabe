"""Celery tasks of the API app: thin wrappers around one service each."""

from __future__ import annotations

from celery import shared_task

from api.idempotency import idempotency_prune


@shared_task(name="api.tasks.prune_idempotency_records")
def prune_idempotency_records() -> int:
    return idempotency_prune()
