"""The start estimates' own record: the first estimate of each queued workload and every revision that
moved it, kept beside when it actually started, so the portal can say how good its estimates are on this
cluster (per GPU type, over the last 30 days) and a workload's page can tell its own story ("estimated
14:10 at submit, 14:25 at 13:50, started 14:22").

Pure parts (`revisions_to_store`, `accuracy`, `story`) are unit-tested; the rest reads and writes rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from jobs.models import EstimateRevision, GpuType, Workload

MOVED_SECONDS = 60.0  # a new estimate within a minute of the last one stored is not a revision
LATE_SECONDS = 60.0  # started more than a minute after its first estimate: late
WINDOW_DAYS = 30
MIN_WAIT_SECONDS = 60.0  # a relative error is taken over a wait of at least a minute


def revisions_to_store(
    changes: Iterable[tuple[int, datetime | None, datetime | None]], *, first: set[int]
) -> list[tuple[int, datetime | None]]:
    """Of (workload id, estimate stored before, new estimate), those to keep as a revision: each
    workload's first (`first`: ids with no revision yet) and each that moved by more than MOVED_SECONDS
    or came into or out of the horizon (None)."""
    return [
        (workload_id, after) for workload_id, before, after in changes if workload_id in first or _moved(before, after)
    ]


def _moved(before: datetime | None, after: datetime | None) -> bool:
    if before is None or after is None:
        return (before is None) != (after is None)
    return abs((after - before).total_seconds()) > MOVED_SECONDS


def record(changes: Sequence[tuple[int, datetime | None, datetime | None]], *, at: datetime) -> int:
    """Store the revisions among `changes` (see `revisions_to_store`); returns how many."""
    if not changes:
        return 0
    ids = [workload_id for workload_id, _, _ in changes]
    known = set(EstimateRevision.objects.filter(workload_id__in=ids).values_list("workload_id", flat=True).distinct())
    kept = revisions_to_store(changes, first=set(ids) - known)
    EstimateRevision.objects.bulk_create(
        EstimateRevision(workload_id=workload_id, at=at, estimated_start_at=estimate) for workload_id, estimate in kept
    )
    return len(kept)


# --- how good the estimates are ----------------------------------------------------------------------
@dataclass(frozen=True)
class Accuracy:
    """Of workloads that started: how far their first estimate was from their start (seconds), as the
    median and 90th percentile, the median relative to their wait (percent), and how many started late."""

    started: int
    p50_error_s: float | None
    p90_error_s: float | None
    p50_error_pct: float | None
    late: int


def _percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th quantile (0..1) by linear interpolation between closest ranks (as PostgreSQL's
    percentile_cont)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def accuracy(samples: Iterable[tuple[datetime, datetime | None, datetime]]) -> Accuracy:
    """From (submitted, first estimate, actual start) per started workload. A first estimate of None
    (not within the horizon) counts as late and is left out of the errors."""
    errors: list[float] = []
    relative: list[float] = []
    late = started = 0
    for submitted, estimate, start in samples:
        started += 1
        if estimate is None:
            late += 1
            continue
        error = (start - estimate).total_seconds()
        if error > LATE_SECONDS:
            late += 1
        errors.append(abs(error))
        relative.append(100.0 * abs(error) / max(MIN_WAIT_SECONDS, (start - submitted).total_seconds()))
    return Accuracy(
        started=started,
        p50_error_s=_percentile(errors, 0.5),
        p90_error_s=_percentile(errors, 0.9),
        p50_error_pct=_percentile(relative, 0.5),
        late=late,
    )


def _samples(gpu_type_ids: Iterable[int] | None, since: datetime):
    first = EstimateRevision.objects.filter(workload=OuterRef("pk")).order_by("at", "id")
    rows = (
        Workload.objects.annotate(began=Coalesce("started_at", "admitted_at"))
        .filter(began__gte=since, began__isnull=False)
        .filter(Exists(first))
        .annotate(first_estimate=Subquery(first.values("estimated_start_at")[:1]))
    )
    if gpu_type_ids is not None:
        rows = rows.filter(gpu_type_id__in=list(gpu_type_ids))
    return rows.order_by().values_list("gpu_type_id", "created_at", "first_estimate", "began")


@dataclass(frozen=True)
class TypeAccuracy:
    gpu_type: GpuType
    accuracy: Accuracy


def accuracy_by_gpu_type(
    *, gpu_type_ids: Iterable[int] | None = None, days: int = WINDOW_DAYS, now: datetime | None = None
) -> list[TypeAccuracy]:
    """Per GPU type (of `gpu_type_ids`, else every enabled one): the accuracy of the estimates of the
    workloads that started in the last `days` days (one query)."""
    now = now or timezone.now()
    by_type: dict[int, list[tuple[datetime, datetime | None, datetime]]] = {}
    for gpu_type_id, created, estimate, began in _samples(gpu_type_ids, now - timedelta(days=days)):
        by_type.setdefault(gpu_type_id, []).append((created, estimate, began))
    types = GpuType.objects.filter(id__in=list(gpu_type_ids)) if gpu_type_ids is not None else GpuType.objects
    return [
        TypeAccuracy(gpu_type=t, accuracy=accuracy(by_type.get(t.id, ())))
        for t in types.filter(enabled=True).order_by("slug")
    ]


# --- one workload's story ----------------------------------------------------------------------------
@dataclass(frozen=True)
class StoryLine:
    """One step of a workload's estimate history: `kind` is "estimate" (with `at`, when it was made, and
    `estimate`: None, not within the horizon) or "started" (`at`: when)."""

    kind: str
    at: datetime
    estimate: datetime | None = None
    first: bool = False


def story(revisions: Sequence[tuple[datetime, datetime | None]], *, started: datetime | None) -> list[StoryLine]:
    """The lines a workload's page shows: each estimate as it was made, then its start (pure)."""
    lines = [
        StoryLine("estimate", at=at, estimate=estimate, first=i == 0) for i, (at, estimate) in enumerate(revisions)
    ]
    if started is not None and lines:
        lines.append(StoryLine("started", at=started))
    return lines


def story_of(workload: Workload) -> list[StoryLine]:
    revisions = list(workload.estimate_revisions.order_by("at", "id").values_list("at", "estimated_start_at"))
    return story(revisions, started=workload.started_at or workload.admitted_at)
