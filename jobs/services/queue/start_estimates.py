"""Estimated start times of queued workloads, stored on each row so every page, the API and the CLI
read them for free. Recomputed per cohort and GPU type after each admission and by the periodic sweep."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, Sum
from django.db.models.functions import ExtractHour
from django.utils import timezone

from jobs.models import GpuType, Kind, Quota, State, Team, Workload
from jobs.selectors import cluster_capacity
from jobs.services.queue import borrow_share, estimate_history, forecast_backfill, reservation_plan, reservations
from jobs.services.queue.cohort_facts import CohortFacts, cohort_team_ids, gather_cohort_facts
from jobs.services.queue.forecast import (
    MAX_QUEUED,
    Aging,
    Arrival,
    Demand,
    Estimate,
    Planner,
    demand_from,
    expected_arrivals,
    expected_run,
    forecast,
    remaining,
)
from jobs.services.queue.sharing_plan import Waiting
from jobs.services.usage.accounting import local_tz

log = logging.getLogger(__name__)

HISTORY_RUNS = 20  # an owner's last runs on a GPU type that make up "their typical run"
DEMAND_CACHE_SECONDS = 600  # teams' habits change slowly: read once per cohort and type per ten minutes


def run_history(owner_ids: set[int], gpu_type_id: int) -> dict[int, list[tuple[float, float]]]:
    """Each owner's recent successful runs on the type: (seconds it lasted, time limit it ran under),
    one query."""
    since = timezone.now() - timedelta(days=settings.PORTAL_HISTORY_DAYS)
    history: dict[int, list[tuple[float, float]]] = defaultdict(list)
    rows = (
        Workload.objects.filter(
            owner_id__in=owner_ids,
            gpu_type_id=gpu_type_id,
            state=State.SUCCEEDED,
            started_at__isnull=False,
            finished_at__gte=since,
        )
        .order_by("-finished_at")
        .values_list("owner_id", "started_at", "finished_at", "time_limit_seconds")[
            : HISTORY_RUNS * max(1, len(owner_ids))
        ]
    )
    for owner_id, started, finished, limit in rows:
        if len(history[owner_id]) < HISTORY_RUNS:
            history[owner_id].append(((finished - started).total_seconds(), float(limit)))
    return history


def arrival_demand(team_ids: list[int], gpu_type_id: int) -> dict[int, Demand]:
    """Each team's habits on the type over the history window: how many workloads it submits at each
    hour of the day, the sizes they ask for and how long those runs last (one aggregate query, kept a
    few minutes per process)."""
    # v2: sizes per team (a cached Demand of the earlier layout would not read back as one).
    key = f"estimates:demand:v2:{gpu_type_id}:{','.join(map(str, sorted(team_ids)))}"
    demand = cache.get(key)
    if demand is not None:
        return demand
    now = timezone.now()
    since = now - timedelta(days=settings.PORTAL_HISTORY_DAYS)
    ran = Q(started_at__isnull=False, finished_at__isnull=False)
    run_time = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
    rows = list(
        Workload.objects.filter(team_id__in=team_ids, gpu_type_id=gpu_type_id, created_at__gte=since)
        .annotate(hour=ExtractHour("created_at", tzinfo=local_tz()))
        .values("team_id", "hour", "gpu_count")
        .annotate(
            created=Count("id"),
            ran=Count("id", filter=ran),
            run_time=Sum(run_time, filter=ran),
            first=Min("created_at"),
        )
        .order_by()
    )
    # A cohort newer than the window has fewer days behind it (one at least).
    first = min((row["first"] for row in rows), default=since)
    days = max(1.0, (now - first).total_seconds() / 86400.0)
    demand = demand_from(
        (
            (
                row["team_id"],
                row["hour"],
                row["gpu_count"],
                row["created"],
                row["ran"],
                (row["run_time"] or timedelta()).total_seconds(),
            )
            for row in rows
        ),
        days,
    )
    cache.set(key, demand, DEMAND_CACHE_SECONDS)
    return demand


def forecast_cohort(
    *, team_id: int, gpu_type_id: int, team_head: int | None = None
) -> tuple[CohortFacts | None, dict[int, Estimate]]:
    """The facts of the team's cohort for one GPU type, and the forecast of its queue (nothing stored).
    `team_head`: only the team's first that many queued workloads are read (a page), so the forecast
    stops once they start: its cost then follows their place in the queue, not the queue's length."""
    team_ids = cohort_team_ids(team_id)
    quotas = list(Quota.objects.filter(team_id__in=team_ids, gpu_type_id=gpu_type_id).select_related("team"))
    if not quotas:
        return None, {}
    facts = gather_cohort_facts(quotas, gpu_type_id)
    if not facts.queued:
        return facts, {}
    # Only what the forecast reads: the running, and the queue as far as it looks (MAX_QUEUED).
    ids = [h.id for h in facts.held] + [w.id for w in facts.queued[:MAX_QUEUED]]
    info = {
        w_id: (owner_id, limit, began, kind == Kind.BATCH and restartable)
        for w_id, owner_id, limit, began, kind, restartable in Workload.objects.filter(id__in=ids).values_list(
            "id", "owner_id", "time_limit_seconds", "started_at", "kind", "restartable"
        )
    }
    history = run_history({owner for owner, _, _, _ in info.values()}, gpu_type_id)
    now = timezone.now()
    running = []
    durations = {}
    for h in facts.held:
        owner, limit, began, restartable = info[h.id]
        elapsed = (now - began).total_seconds() if began else 0.0
        past = history.get(owner, ())
        durations[h.id] = expected_run(limit, past)  # its next run, should a lender's work requeue it
        running.append((replace(h, restartable=restartable), remaining(durations[h.id], elapsed, limit, past)))
    for w in facts.queued:
        if w.id in info:
            durations[w.id] = expected_run(info[w.id][1], history.get(info[w.id][0], ()))
    # The cluster's GPUs of this type that teams outside the cohort do not hold.
    capacity = cluster_capacity().get(gpu_type_id)
    outside = (
        Workload.objects.filter(gpu_type_id=gpu_type_id, state__in=State.holding())
        .exclude(team_id__in=team_ids)
        .aggregate(n=Sum("gpu_count"))["n"]
        or 0
    )
    # The cohort's teams go on submitting while these wait: a lender's own work comes before a borrower.
    local = timezone.localtime(now, local_tz())
    hour = local.hour + local.minute / 60 + local.second / 3600
    arrivals = expected_arrivals(arrival_demand(team_ids, gpu_type_id), hour=hour) if len(facts.teams) > 1 else []
    estimates = forecast(
        facts.teams,
        running,
        facts.queued,
        durations,
        capacity=max(0, capacity.total - outside) if capacity and capacity.total else None,
        arrivals=arrivals,
        planner=backfill_planner(
            facts,
            info,
            arrivals,
            gpu_type_id=gpu_type_id,
            now=now,
            borrowed_hours=fair_borrowing(team_ids, gpu_type_id),
        ),
        until=None if team_head is None else [w.id for w in facts.queued if w.team_id == team_id][:team_head],
        aged=Aging(start=now.timestamp(), usage=facts.fair_usage) if facts.aged_at is not None else None,
    )
    return facts, estimates


def fair_borrowing(team_ids: Sequence[int], gpu_type_id: int) -> dict[int, float] | None:
    """Per team of a cohort with fair borrowing, its decayed borrowed GPU-hours on the type (else None)."""
    cohorts = set(Team.objects.filter(id__in=team_ids, cohort__isnull=False).values_list("cohort_id", flat=True))
    if not cohorts or not borrow_share.fair_cohorts(cohorts):
        return None
    hours = borrow_share.borrowed_hours(team_ids, [gpu_type_id], now=timezone.now())
    return {t: hours.get((t, gpu_type_id), 0.0) for t in team_ids}


def backfill_planner(
    facts: CohortFacts,
    info: Mapping[int, tuple[int, int, datetime | None, bool]],
    arrivals: Sequence[Arrival],
    *,
    gpu_type_id: int,
    now: datetime,
    borrowed_hours: Mapping[int, float] | None = None,
) -> Planner | None:
    """Where the GPU type reserves, the forecast's planner that keeps its reservations and backfills as
    admission does (`forecast_backfill`); else None (best effort, as admission is), or where the cohort
    shares borrowed GPUs fairly, best effort in that order."""
    waits = GpuType.objects.filter(id=gpu_type_id).values_list("reserve_after_seconds", "reserve_deeper_after_seconds")
    reserve_after, reserve_deeper_after = waits.first() or (None, None)
    if reserve_after is None:
        return forecast_backfill.FairBorrowingPlanner(borrowed_hours) if borrowed_hours else None
    at = now.timestamp()
    limits = {w_id: float(limit) for w_id, (_, limit, _, _) in info.items()}
    limits.update({a.waiting.id: a.run_seconds for a in arrivals})  # expected work: its expected run
    ends = {
        h.id: reservation_plan.ends_by(
            started=info[h.id][2].timestamp() if info[h.id][2] else None, admitted=None, time_limit=limits[h.id], now=at
        )
        for h in facts.held
        if h.id in info
    }
    queued = {w.id: w for w in facts.queued}
    standing: dict[int, list[tuple[Waiting, float]]] = {}
    for w_id, row in reservations.standing_for(queued).items():
        due = row.starts_by.timestamp() - reservation_plan.PROMISE_SLACK_SECONDS
        standing.setdefault(row.team_id, []).append((queued[w_id], due))
    return forecast_backfill.BackfillPlanner(
        start=at,
        reserve_after=float(reserve_after),
        time_limits=limits,
        ends_by=ends,
        standing=standing,
        borrowed_hours=borrowed_hours,
        reserve_deeper_after=float(reserve_deeper_after),
    )


# When each cohort's stored estimates were last made, per GPU type (the shared cache, so the web processes
# see what the worker stored): a page may show the stored estimates of workloads queued before then,
# instead of forecasting again on every view, while they are this fresh (a missed refresh or two).
STORED_FRESH_SECONDS = 3
UPDATE_BATCH = 500  # rows per UPDATE: Django's bulk update is a CASE over its rows (quadratic in one batch)
STORED_MOVED_SECONDS = 5.0  # a new estimate this close to the stored one is not written again


def fresh_seconds() -> float:
    """How old stored estimates may be for a page to show them: a few periodic refreshes' worth."""
    return float(STORED_FRESH_SECONDS * settings.PORTAL_ESTIMATE_SECONDS)


def _stored_key(team_ids: Sequence[int], gpu_type_id: int) -> str:
    return f"estimates:stored-at:{gpu_type_id}:{','.join(map(str, sorted(team_ids)))}"


def stored_at(team_ids: Sequence[int], gpu_type_ids: Sequence[int]) -> dict[int, datetime]:
    """Per GPU type, when the cohort's estimates were last stored (the facts read after this), where that is
    within `fresh_seconds`; types without, or with the cache unreachable, are left out."""
    from django.core.cache import caches

    keys = {_stored_key(team_ids, g): g for g in gpu_type_ids}
    try:
        found = caches["api"].get_many(list(keys))
    except Exception as exc:  # the cache down: every type is forecast on the view
        log.info("could not read when estimates were stored (%s)", exc)
        return {}
    oldest = timezone.now() - timedelta(seconds=fresh_seconds())
    stamps = {keys[k]: datetime.fromtimestamp(float(v), tz=UTC) for k, v in found.items() if v is not None}
    return {g: at for g, at in stamps.items() if at >= oldest}


def _note_stored(team_ids: Sequence[int], gpu_type_id: int, at: datetime) -> None:
    from django.core.cache import caches

    def note() -> None:
        try:
            caches["api"].set(_stored_key(team_ids, gpu_type_id), at.timestamp(), timeout=int(fresh_seconds()) + 1)
        except Exception as exc:  # pages forecast again until the cache is back
            log.info("could not note when estimates were stored (%s)", exc)

    transaction.on_commit(note)


def _moved(before: datetime | None, after: datetime | None) -> bool:
    """Whether a new estimate differs from the stored one: in or out of the horizon, or by more than
    STORED_MOVED_SECONDS (a forecast made again from an unchanged world moves by a few microseconds)."""
    if before is None or after is None:
        return (before is None) != (after is None)
    return abs((after - before).total_seconds()) > STORED_MOVED_SECONDS


# One statement for the rows whose estimate moved (PostgreSQL): Django's bulk update is a CASE over its
# rows, which costs more to build than the forecast itself once a few thousand move.
_STORE_SQL = """
UPDATE {workload} AS w SET estimated_start_at = v.at, wait_reason = v.reason
FROM unnest(%s::bigint[], %s::timestamptz[], %s::text[]) AS v(id, at, reason)
WHERE w.id = v.id
"""


def _store(changed: Sequence[tuple[int, datetime | None, str]]) -> None:
    """Write (workload id, estimated start, wait reason) onto the rows."""
    if not changed:
        return
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                _STORE_SQL.format(workload=connection.ops.quote_name(Workload._meta.db_table)),
                [[c[0] for c in changed], [c[1] for c in changed], [c[2] for c in changed]],
            )
        return
    rows = [Workload(id=i, estimated_start_at=at, wait_reason=reason) for i, at, reason in changed]
    Workload.objects.bulk_update(rows, ["estimated_start_at", "wait_reason"], batch_size=UPDATE_BATCH)


def estimate(*, team_id: int, gpu_type_id: int) -> dict[int, Estimate]:
    """Forecast the queue of the team's cohort for one GPU type and store each estimate (only the rows whose
    estimate or reason moved are written), then note when (`stored_at`)."""
    began = timezone.now()  # what was queued before this is in the facts the forecast reads
    _facts, estimates = forecast_cohort(team_id=team_id, gpu_type_id=gpu_type_id)
    if not estimates:
        return {}
    now = timezone.now()
    team_ids = cohort_team_ids(team_id)
    # The cohort's queue of the type (what the forecast read), not an IN list of every id in it.
    rows = Workload.objects.filter(team_id__in=team_ids, gpu_type_id=gpu_type_id, state=State.QUEUED)
    changed: list[tuple[int, datetime | None, str]] = []
    moves = []
    promised = reservations.standing_for(estimates)  # the forecast lets work pass that backfill holds back
    for row_id, before, reason_before in rows.values_list("id", "estimated_start_at", "wait_reason"):
        e = estimates.get(row_id)
        if e is None:
            continue  # queued since the forecast read the queue: the next one will see it
        after = now + timedelta(seconds=e.start_in) if e.start_in is not None else None
        if row_id in promised:
            by = promised[row_id].starts_by
            after = min(after or by, by)
        if e.reason != reason_before or _moved(before, after):
            changed.append((row_id, after, e.reason))
        moves.append((row_id, before, after))
    _store(changed)
    estimate_history.record(moves, at=now)  # the first estimate and each revision, kept beside the start
    _note_stored(team_ids, gpu_type_id, began)
    return estimates


def estimate_all() -> int:
    """Refresh every cohort's estimates (the periodic sweep)."""
    pairs = Workload.objects.filter(state=State.QUEUED).values_list("team_id", "gpu_type_id").distinct().order_by()
    done: set[tuple[tuple[int, ...], int]] = set()
    count = 0
    for team_id, gpu_type_id in list(pairs):
        key = (tuple(cohort_team_ids(team_id)), gpu_type_id)
        if key in done:
            continue
        done.add(key)
        try:
            count += len(estimate(team_id=team_id, gpu_type_id=gpu_type_id))
        except Exception:
            log.exception("estimates for team %s / gpu type %s failed", team_id, gpu_type_id)
    return count
