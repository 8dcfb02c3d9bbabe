"""Reads about sharing: a team's queue explained per GPU type (own quota, borrowed, lent, waiting, and
why each of the first waiting workloads is not admitted yet), for the queue page and the API."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, Sum
from django.utils import timezone

from jobs import queue_order
from jobs.models import GpuType, Quota, State, Team, Workload
from jobs.services.queue.cohort_facts import cohort_team_ids, team_fair_share, team_quotas
from jobs.services.queue.forecast import about
from jobs.services.queue.sharing_plan import Reason, TeamQuota
from jobs.services.queue.start_estimates import forecast_cohort, stored_at

FIRST_WAITING = 10


@dataclass(frozen=True)
class WaitingExplained:
    workload: Workload
    position: int
    reason: str
    explanation: str
    estimated_start_at: datetime | None

    @property
    def eta(self) -> str:
        if self.estimated_start_at is None:
            return about(None)
        return about(max(0.0, (self.estimated_start_at - timezone.now()).total_seconds()))


@dataclass(frozen=True)
class TypeQueue:
    gpu_type: GpuType
    quota: int
    borrowing_limit: int
    lending_limit: int | None
    in_cohort: bool
    held: int  # GPUs the team holds, borrowed ones included
    borrowed: int  # of those, beyond its own quota
    lent: int  # of its idle quota, GPUs other teams of the cohort use now
    waiting_workloads: int
    waiting_gpus: int
    first_waiting: list[WaitingExplained] = field(default_factory=list)


def explain(reason: str, *, team: TeamQuota, held: int, user_held: int, pool_use: int, pool_cap: int) -> str:
    """Why one workload waits, in words (pure)."""
    if reason == Reason.TEAM_QUOTA:
        return f"The team holds {held} of its {team.quota} GPU quota; it starts when enough are released."
    if reason == Reason.BORROWING_LIMIT:
        return (
            f"The team already borrows {max(0, held - team.quota)} GPU(s), its borrowing limit is "
            f"{team.borrowing_limit}."
        )
    if reason == Reason.COHORT:
        return (
            f"The cohort has no idle GPUs to lend: {pool_use} of the {pool_cap} it shares are in use. "
            "It starts when a teammate's or another team's work ends."
        )
    if reason == Reason.USER_CAP:
        return f"Its owner holds {user_held} GPU(s); the team allows {team.user_max_gpus} per member."
    if reason == Reason.CLUSTER:
        return "The cluster has no free GPUs of this type for the team's cohort right now."
    if reason == Reason.NO_QUOTA:
        return "The team has no quota for this GPU type."
    if reason == Reason.MIN_RUNTIME:
        return (
            "Other teams run on GPUs borrowed from this team's quota, but they have not yet run the minimum "
            "time before borrowed work may be preempted (set per GPU type or cohort); it starts as soon as "
            "they have, or when they end."
        )
    return "Waiting for the next admission pass."


@dataclass
class _TypeView:
    """What the page shows of one GPU type, however it was read: the cohort's quotas, the GPUs each team
    holds (and each of the team's people), the team's waiting (count, GPUs) and its first waiting with
    their estimates (when, and why they wait)."""

    teams: dict[int, TeamQuota]
    usage: dict[int, int]
    user_usage: dict[int, int]
    waiting_workloads: int
    waiting_gpus: int
    shown: list[Workload]
    estimates: dict[int, tuple[datetime | None, str]]


def _forecast_view(team: Team, quota: Quota, first: int, now: datetime) -> _TypeView | None:
    """The view from the cohort's facts and a forecast of its queue until the team's first waiting start."""
    facts, estimates = forecast_cohort(team_id=team.id, gpu_type_id=quota.gpu_type_id, team_head=first)
    if facts is None:
        return None
    usage: dict[int, int] = dict.fromkeys(facts.teams, 0)
    user_usage: dict[int, int] = {}
    for h in facts.held:
        usage[h.team_id] = usage.get(h.team_id, 0) + h.gpus
        if h.team_id == team.id:
            user_usage[h.user_id] = user_usage.get(h.user_id, 0) + h.gpus
    mine = [w for w in facts.queued if w.team_id == team.id]
    rows = Workload.objects.filter(id__in=[w.id for w in mine[:first]]).select_related("owner", "gpu_type")
    by_id = {w.id: w for w in rows}
    shown = [by_id[w.id] for w in mine[:first]]
    told = {}
    for w in shown:
        e = estimates.get(w.id)
        start_in = e.start_in if e else None
        told[w.id] = (now + timedelta(seconds=start_in) if start_in is not None else None, e.reason if e else "")
    return _TypeView(
        teams=facts.teams,
        usage=usage,
        user_usage=user_usage,
        waiting_workloads=len(mine),
        waiting_gpus=sum(w.gpus for w in mine),
        shown=shown,
        estimates=told,
    )


def _stored_views(
    team: Team, quotas: list[Quota], first: int, usage_hours: Mapping[int, float] | None = None
) -> dict[int, _TypeView]:
    """Per GPU type whose cohort estimates were stored recently (`start_estimates.stored_at`), the view from
    the stored estimates and a few aggregates: its cost follows what the page shows, not how much is queued
    or runs. A type is left out (forecast on the view instead) where one of its first waiting was queued
    or requeued after the estimates were made. PostgreSQL only (the queue's order in SQL)."""
    team_ids = cohort_team_ids(team.id)
    stamps = stored_at(team_ids, [q.gpu_type_id for q in quotas])
    if not stamps or connection.vendor != "postgresql":
        return {}
    types = sorted(stamps)
    teams_of: dict[int, list[Quota]] = {}
    for q in Quota.objects.filter(team_id__in=team_ids, gpu_type_id__in=types).select_related("team"):
        teams_of.setdefault(q.gpu_type_id, []).append(q)
    usage: dict[int, dict[int, int]] = {g: {} for g in types}
    user_usage: dict[int, dict[int, int]] = {g: {} for g in types}
    held = (
        Workload.objects.filter(team_id__in=team_ids, gpu_type_id__in=types, state__in=State.holding())
        .values_list("gpu_type_id", "team_id", "owner_id")
        .annotate(gpus=Sum("gpu_count"))
        .order_by()
    )
    for gpu_type_id, team_id, owner_id, gpus in held:
        usage[gpu_type_id][team_id] = usage[gpu_type_id].get(team_id, 0) + gpus
        if team_id == team.id:
            user_usage[gpu_type_id][owner_id] = gpus
    waiting = dict.fromkeys(types, (0, 0)) | {
        g: (n, gpus or 0)
        for g, n, gpus in Workload.objects.filter(team=team, gpu_type_id__in=types, state=State.QUEUED)
        .values_list("gpu_type_id")
        .annotate(n=Count("id"), gpus=Sum("gpu_count"))
        .values_list("gpu_type_id", "n", "gpus")
        .order_by()
    }
    share: dict[int, float] = {}
    if team.fair_share:
        share = dict(usage_hours) if usage_hours is not None else team_fair_share(team, timezone.now())
    aging = set(GpuType.objects.filter(id__in=types, queue_aging=True).values_list("id", flat=True))
    views: dict[int, _TypeView] = {}
    for g in types:
        shown = list(_team_head(team, g, share, aging=g in aging, first=first)[:first])
        made = stamps[g]
        if any(w.created_at >= made or (w.requeued_at is not None and w.requeued_at >= made) for w in shown):
            continue  # queued since the last estimates: not in them
        teams = team_quotas(teams_of[g])
        views[g] = _TypeView(
            teams=teams,
            usage=dict.fromkeys(teams, 0) | usage[g],
            user_usage=user_usage[g],
            waiting_workloads=waiting[g][0],
            waiting_gpus=waiting[g][1],
            shown=shown,
            estimates={w.id: (w.estimated_start_at, w.wait_reason) for w in shown},
        )
    return views


# The candidates for a team's first `first` waiting of a type, without ordering its whole queue: within one
# person the fair-share key is the same, so a person's first in the team's order are their first by
# priority and age (queue_order.INDEX_ORDER, the queue index's order, read `first` deep); requeued work
# goes first and is read whole (it is rare); everyone without recent usage shares the key 0 and is read
# as one.
_HEAD_CANDIDATES_SQL = """
SELECT id FROM {workload}
WHERE team_id = %s AND gpu_type_id = %s AND state = %s AND requeued_at IS NOT NULL
UNION ALL
SELECT c.id FROM unnest(%s::bigint[]) AS o(owner_id) CROSS JOIN LATERAL (
    SELECT id FROM {workload} w
    WHERE w.team_id = %s AND w.gpu_type_id = %s AND w.state = %s AND w.requeued_at IS NULL
      AND w.owner_id = o.owner_id
    ORDER BY {order} LIMIT %s
) AS c
UNION ALL
(SELECT id FROM {workload}
 WHERE team_id = %s AND gpu_type_id = %s AND state = %s AND requeued_at IS NULL AND owner_id <> ALL(%s::bigint[])
 ORDER BY {order} LIMIT %s)
"""


def _team_head(team: Team, gpu_type_id: int, share: dict[int, float], *, aging: bool, first: int):
    """The team's queued workloads of the type in the team's own queue order (`queue_order.TEAM_ORDER`), as
    admission's SQL orders them; the first `first` of them are right (where the type does not age,
    only the candidates for them are ordered: `_HEAD_CANDIDATES_SQL`)."""
    order = queue_order.orm_order(fair_share=share, aging_now=timezone.now() if aging else None)
    rows = Workload.objects.filter(team=team, gpu_type_id=gpu_type_id, state=State.QUEUED)
    if not aging:  # aging orders by a weight of each row's own: the whole queue is ordered
        queue = [team.id, gpu_type_id, State.QUEUED.value]
        owners = sorted(share)
        sql = _HEAD_CANDIDATES_SQL.format(
            workload=connection.ops.quote_name(Workload._meta.db_table),
            order=queue_order.order_by_sql(queue_order.FIELDS, queue_order.INDEX_ORDER),
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [*queue, owners, *queue, first, *queue, owners, first])
            rows = rows.filter(id__in=[row[0] for row in cursor.fetchall()])
    return rows.select_related("owner", "gpu_type").order_by(*order)


def team_queue_explained(
    team: Team, *, first: int = FIRST_WAITING, usage_hours: Mapping[int, float] | None = None
) -> list[TypeQueue]:
    """Per GPU type the team has a quota for: the picture of its share and its first waiting workloads.
    `usage_hours`: each person's fair-share usage in the team (`cohort_facts.team_fair_share`), where the
    caller has read it already."""
    result: list[TypeQueue] = []
    now = timezone.now()
    quotas = list(Quota.objects.filter(team=team).select_related("gpu_type").order_by("gpu_type__slug"))
    stored = _stored_views(team, quotas, first, usage_hours) if quotas else {}
    for quota in quotas:
        view = stored.get(quota.gpu_type_id) or _forecast_view(team, quota, first, now)
        if view is None:
            continue
        me = view.teams[team.id]
        usage = view.usage
        pool_cap = sum(t.lendable for t in view.teams.values())
        pool_use = sum(max(0, usage[t] - q.guaranteed) for t, q in view.teams.items())
        borrowed_by_others = sum(max(0, usage[t] - q.quota) for t, q in view.teams.items() if t != team.id)
        idle_lendable = min(me.lendable, max(0, me.quota - usage[team.id]))
        first_waiting = []
        for position, w in enumerate(view.shown, start=1):
            estimated_start_at, reason = view.estimates.get(w.id, (None, ""))
            first_waiting.append(
                WaitingExplained(
                    workload=w,
                    position=position,
                    reason=reason,
                    explanation=explain(
                        reason,
                        team=me,
                        held=usage[team.id],
                        user_held=view.user_usage.get(w.owner_id, 0),
                        pool_use=pool_use,
                        pool_cap=pool_cap,
                    ),
                    estimated_start_at=estimated_start_at,
                )
            )
        result.append(
            TypeQueue(
                gpu_type=quota.gpu_type,
                quota=quota.max_gpus,
                borrowing_limit=me.borrowing_limit,
                lending_limit=quota.lending_limit,
                in_cohort=len(view.teams) > 1 or team.cohort_id is not None,
                held=usage[team.id],
                borrowed=max(0, usage[team.id] - quota.max_gpus),
                lent=min(idle_lendable, borrowed_by_others),
                waiting_workloads=view.waiting_workloads,
                waiting_gpus=view.waiting_gpus,
                first_waiting=first_waiting,
            )
        )
    return result
