"""Recording a checkpoint a job reported, and reading the newest one back for pages, the API and the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from jobs.models import Checkpoint, State, Workload
from jobs.services.checkpoints.cost import age_words


class CheckpointRefused(Exception):
    """The workload cannot take a checkpoint now (it has ended)."""


@transaction.atomic
def record_checkpoint(
    workload: Workload, *, step: int | None = None, path: str = "", note: str = "", attempt: int | None = None,
    at: datetime | None = None,
) -> Checkpoint:  # fmt: skip
    """Keep the checkpoint and make it the workload's newest. An attempt the job names that is not one of
    its own (larger than the current) is taken as the current one."""
    at = at or timezone.now()
    locked = Workload.objects.select_for_update().filter(id=workload.id).first()
    if locked is None or locked.state in State.final():
        raise CheckpointRefused("The workload has ended; it takes no more checkpoints.")
    if attempt is None or attempt > locked.attempt:
        attempt = locked.attempt
    checkpoint = Checkpoint.objects.create(
        workload=locked, attempt=attempt, at=at, step=step, path=path[:1024], note=note[:500]
    )
    Workload.objects.filter(id=locked.id).update(last_checkpoint_at=at, last_checkpoint_step=step, updated_at=at)
    workload.last_checkpoint_at, workload.last_checkpoint_step = at, step
    return checkpoint


@dataclass(frozen=True)
class LastCheckpoint:
    at: datetime
    step: int | None
    age_seconds: float

    @property
    def age(self) -> str:
        return age_words(self.age_seconds)


def last_checkpoint(workload: Workload, now: datetime | None = None) -> LastCheckpoint | None:
    if workload.last_checkpoint_at is None:
        return None
    now = now or timezone.now()
    return LastCheckpoint(
        at=workload.last_checkpoint_at,
        step=workload.last_checkpoint_step,
        age_seconds=max(0.0, (now - workload.last_checkpoint_at).total_seconds()),
    )
