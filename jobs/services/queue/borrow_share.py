"""Fair share between the teams of a cohort (issue 38, item 4): where a cohort asks for it
(`Cohort.fair_borrowing`), GPUs it lends go first to the team that has borrowed least recently, not to
whichever team's workload came first. "Recently" is each team's borrowed GPU-hours on the GPU type,
halved every BORROWED_HALF_LIFE_HOURS (as a person's usage orders a team's own queue under fair share).

Read in one query per table for every cohort of an admission pass; the plan orders its borrowing round
by it (`sharing_plan.borrowing_order`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from jobs.models import Cohort, Quota, RunSegment, Team, Workload
from jobs.services.queue.sharing_plan import decayed_usage
from jobs.services.usage.accounting import counted_start

BORROWED_HALF_LIFE_HOURS = 24
HORIZON_HALF_LIVES = 5  # older borrowing counts less than 1/32: not read


def fair_cohorts(cohort_ids: Iterable[int]) -> set[int]:
    """The cohorts of these that share borrowed GPUs fairly."""
    return set(Cohort.objects.filter(id__in=list(cohort_ids), fair_borrowing=True).values_list("id", flat=True))


def borrowed_hours(
    team_ids: Iterable[int], gpu_type_ids: Iterable[int], *, now: datetime
) -> dict[tuple[int, int], float]:
    """Per (team, GPU type): decayed GPU-hours the team ran on borrowed GPUs (runs going on and ended,
    and the borrowed stretches of runs whose mark changed)."""
    teams, types = list(team_ids), list(gpu_type_ids)
    since = now - timedelta(hours=BORROWED_HALF_LIFE_HOURS * HORIZON_HALF_LIVES)
    intervals: dict[int, list[tuple[int, float, float, int]]] = {}
    runs = (
        Workload.objects.filter(team_id__in=teams, gpu_type_id__in=types, borrowed=True, started_at__isnull=False)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=since))
        .values_list("team_id", "gpu_type_id", "started_at", "counted_from", "finished_at", "gpu_count")
    )
    for team_id, gpu_type_id, started, counted_from, finished, gpus in runs:
        begin = counted_start(started, counted_from)
        intervals.setdefault(gpu_type_id, []).append((team_id, begin.timestamp(), (finished or now).timestamp(), gpus))
    segments = RunSegment.objects.filter(
        team_id__in=teams, gpu_type_id__in=types, borrowed=True, finished_at__gte=since
    ).values_list("team_id", "gpu_type_id", "started_at", "finished_at", "gpu_count")
    for team_id, gpu_type_id, started, finished, gpus in segments:
        intervals.setdefault(gpu_type_id, []).append((team_id, started.timestamp(), finished.timestamp(), gpus))
    hours: dict[tuple[int, int], float] = {}
    for gpu_type_id, rows in intervals.items():
        decayed = decayed_usage(rows, now.timestamp(), BORROWED_HALF_LIFE_HOURS * 3600.0)
        hours.update({(team_id, gpu_type_id): h for team_id, h in decayed.items()})
    return hours


@dataclass(frozen=True)
class BorrowTurn:
    """Where a team stands for borrowed GPUs of one type in a cohort with fair borrowing: its own decayed
    borrowed GPU-hours, and how many other teams of the cohort borrowed less (they borrow before it) or
    more (after it). Other teams are counted, never named."""

    gpu_type: str
    mine: float
    before_me: int
    after_me: int


def borrow_turns(team: Team) -> list[BorrowTurn]:
    """The queue page's explanation of fair borrowing for `team` (empty where its cohort has none)."""
    if team.cohort_id is None or not fair_cohorts([team.cohort_id]):
        return []
    quotas = list(
        Quota.objects.filter(team__cohort_id=team.cohort_id).select_related("gpu_type").order_by("gpu_type__slug")
    )
    hours = borrowed_hours({q.team_id for q in quotas}, {q.gpu_type_id for q in quotas}, now=timezone.now())
    turns = []
    for q in quotas:
        if q.team_id != team.id:
            continue
        mine = hours.get((team.id, q.gpu_type_id), 0.0)
        others = [hours.get((o.team_id, o.gpu_type_id), 0.0) for o in quotas if o.gpu_type_id == q.gpu_type_id]
        others.remove(mine)
        turns.append(
            BorrowTurn(
                gpu_type=q.gpu_type.display_name,
                mine=mine,
                before_me=sum(1 for h in others if h < mine),
                after_me=sum(1 for h in others if h >= mine),
            )
        )
    return turns
