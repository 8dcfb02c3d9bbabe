"""Celery tasks of the telemetry app: thin wrappers around one service each."""

from __future__ import annotations

from celery import shared_task

from telemetry.services.idle import idle_check
from telemetry.services.ingest import telemetry_prune


@shared_task(name="telemetry.tasks.check_idle_services")
def check_idle_services() -> dict[str, int]:
    return idle_check()


@shared_task(name="telemetry.tasks.prune")
def prune() -> int:
    return telemetry_prune()
