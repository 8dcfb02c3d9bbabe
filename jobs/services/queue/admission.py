"""Admission: which queued workloads may take GPUs now, per cohort and GPU type; who borrows; who is
preempted so a lender gets its quota back.

One pass (`admission_pass`: a submission's own cohort and type, or `admit_all`: every cohort and type
with queued work) is three steps, all inside one transaction:
1. lock the quota rows of every team of the cohorts concerned for the GPU types (SELECT ... FOR UPDATE,
   in id order so two admissions never deadlock). Every admission that could lend or borrow the same
   GPUs takes the same locks, so concurrent admissions across a cohort run one after the other and can
   never over-admit or over-lend. A team without a cohort locks only its own rows;
2. gather the facts for all of them at once (quotas, budgets, what is held as sums, and of the queue
   only the head of each team's that a plan could reach, `sharing_plan.queue_head`, read in one query
   that orders and counts in SQL) and hand each cohort and type to the pure plan (`sharing_plan.plan`),
   which is deterministic;
3. apply the plans: guarded transitions for the victims, one UPDATE for the admitted (two: own quota and
   borrowed), their timeline rows in one insert, and the creates handed to the worker in batches.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Case, F, Q, Sum, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from jobs import queue_order
from jobs.models import GpuType, Quota, State, Team, Workload, WorkloadEvent
from jobs.services.dispatch import enqueue_estimate, enqueue_submits
from jobs.services.queue import borrow_share, reservation_plan, sharing_plan
from jobs.services.queue.cohort_facts import fair_share_usage_of, team_quotas
from jobs.services.queue.preemption import close_segment, preempt
from jobs.services.queue.reservations import ReservationBook
from jobs.services.queue.sharing_plan import Held, QueueEntry
from jobs.services.queue.stop_cost import StopCost
from jobs.services.transitions import note
from jobs.services.usage.accounting import counted_start

log = logging.getLogger(__name__)


def gpus_held(*, team_id: int, gpu_type_id: int) -> int:
    return (
        Workload.objects.filter(team_id=team_id, gpu_type_id=gpu_type_id, state__in=State.holding()).aggregate(
            total=Sum("gpu_count")
        )["total"]
        or 0
    )


def plan_admission(queued: list[tuple[int, int]], free: int) -> list[int]:
    """Pure: from queued (id, gpus) in queue order, the ids that fit into `free` GPUs, best-effort."""
    admitted: list[int] = []
    smallest_refused: int | None = None
    for workload_id, gpus in queued:
        if free <= 0:
            break
        if smallest_refused is not None and gpus >= smallest_refused:
            continue
        if gpus <= free:
            admitted.append(workload_id)
            free -= gpus
        else:
            smallest_refused = gpus if smallest_refused is None else min(smallest_refused, gpus)
    return admitted


def quota_admit(*, team_id: int, gpu_type_id: int) -> list[int]:
    """Admit what fits for the team's cohort (or the team alone) and GPU type; returns admitted ids."""
    return admission_pass(team_ids=[team_id], gpu_type_ids=[gpu_type_id], requesting=team_id)  # and its cohort


def _admit_message(*, borrowed: bool, quota: int, reclaimed: int) -> str:
    if borrowed:
        return f"GPUs borrowed from the cohort's idle quota (beyond the team's {quota} GPU quota)."
    if reclaimed:
        return f"GPUs reserved ({quota} GPU quota); reclaimed from {reclaimed} borrowed workload(s)."
    return f"GPUs reserved ({quota} GPU quota)."


def admit_all() -> int:
    """One admission pass over every cohort (or lone team) and GPU type with queued work."""
    pairs = list(
        Workload.objects.filter(state=State.QUEUED).values_list("team_id", "gpu_type_id").distinct().order_by()
    )
    if not pairs:
        return 0
    return len(admission_pass(team_ids={t for t, _ in pairs}, gpu_type_ids={g for _, g in pairs}))


# --- the pass: one locked decision for many cohorts and GPU types ------------------------------------
# What it brings into Python grows with neither the queue nor what teams hold: what teams hold is read as
# sums per team, GPU type and owner, with the borrowed workloads one by one (the only ones a plan may
# preempt; few, bounded by borrowing limits), in one query; of the queue, only the head of each team's,
# which PostgreSQL picks out of the whole queue. Everything else is one query per pass and one bulk write.


def admission_pass(*, team_ids: Iterable[int], gpu_type_ids: Iterable[int], requesting: int | None = None) -> list[int]:
    """Admit what fits for every cohort (or lone team) of `team_ids` and every type of `gpu_type_ids`, in
    one transaction that locks all their quota rows (in id order, as every admission does, so two passes
    never deadlock and never over-admit). `requesting`: a team that must hold a quota for the (single)
    type, else nothing is done (a submission's own pass). Returns the admitted ids in queue order."""
    types = sorted(set(gpu_type_ids))
    with transaction.atomic():
        cohort_of = _cohorts(team_ids)
        quotas = _lock_pass_quotas(cohort_of, types)
        if requesting is not None and not any(q.team_id == requesting for q in quotas):
            return []
        groups = _pass_groups(quotas, cohort_of)
        if not groups:
            return []
        members = {q.team_id for q in quotas}
        teams_of = {key: team_quotas(group_quotas) for key, group_quotas in groups.items()}
        held = _held_by_group(members, types, cohort_of)
        # Borrowed marks that no longer hold, and borrowed work beyond lowered limits (settle_running, below).
        _settle_held(teams_of, held)
        queue, left_out = _read_queue(quotas, members, teams_of, held, cohort_of)
        if not queue:
            return []
        now = timezone.now()
        fair_borrowing = _fair_borrowing(quotas, cohort_of, types, now=now)  # cohorts that share borrowed GPUs fairly
        decided = _plan_groups(
            groups,
            queue,
            left_out,
            teams_of,
            held,
            members=members,
            types=types,
            now=now,
            fair_borrowing=fair_borrowing,
        )
        if decided.admitted:
            uids = _mark_admitted(decided.admitted, borrowed=decided.borrowed, reclaimed=decided.reclaimed,
                                  quota_of=decided.quota_of, now=now)  # fmt: skip
            enqueue_submits(uids)
    if decided.admitted:
        log.info("admission pass: %d admitted (%d borrowed, %d preempted) over %d group(s)", len(decided.admitted),
                 len(decided.borrowed), sum(map(len, decided.reclaimed.values())), len(groups))  # fmt: skip
    return decided.admitted


def _settle_held(
    teams_of: Mapping[GroupKey, Mapping[int, sharing_plan.TeamQuota]], held: dict[GroupKey, list[Held]]
) -> None:
    for key, teams in teams_of.items():
        if held.get(key):
            held[key] = settle_running(teams, held[key], gpu_type_id=key[1], at=timezone.now())


def _read_queue(
    quotas: list[Quota],
    members: set[int],
    teams_of: Mapping[GroupKey, Mapping[int, sharing_plan.TeamQuota]],
    held: Mapping[GroupKey, list[Held]],
    cohort_of: dict[int, tuple[int, ...]],
) -> tuple[QueueHeads, dict[GroupKey, int]]:
    """The head of each waiting team's queue (`_queue_heads`): only it can matter to the plan
    (sharing_plan.queue_head). A team whose budget is spent does not wait here."""
    waiting_teams = members - _budgets_spent(q.team for q in quotas)
    fair = fair_share_usage_of({q.team_id: q.team for q in quotas if q.team_id in waiting_teams}.values())
    aging = {q.gpu_type_id for q in quotas if q.gpu_type.queue_aging}
    reserving = {q.gpu_type_id for q in quotas if q.gpu_type.reserve_after_seconds is not None}
    return _queue_heads(
        _rooms(teams_of, held, waiting_teams), cohort_of, fair, aging_types=aging, reserving_types=reserving
    )


def _rooms(
    teams_of: Mapping[GroupKey, Mapping[int, sharing_plan.TeamQuota]],
    held: Mapping[GroupKey, list[Held]],
    waiting_teams: set[int],
) -> dict[tuple[int, int], sharing_plan.Room]:
    """The room each team with work waiting has in its cohort, per (team, GPU type)."""
    rooms: dict[tuple[int, int], sharing_plan.Room] = {}
    for key, teams in teams_of.items():
        room = sharing_plan.admission_room(teams, held.get(key, []))
        for team_id in waiting_teams.intersection(key[0]):
            rooms[(team_id, key[1])] = room.get(team_id, sharing_plan.NO_ROOM)
    return rooms


@dataclass
class _Decided:
    """What a pass decided over its groups: admitted ids in queue order, those borrowing, the workloads
    preempted for each admitted one, and each admitted one's team quota."""

    admitted: list[int] = field(default_factory=list)
    borrowed: set[int] = field(default_factory=set)
    reclaimed: dict[int, list[int]] = field(default_factory=dict)
    quota_of: dict[int, int] = field(default_factory=dict)


def _plan_groups(
    groups: Mapping[GroupKey, list[Quota]],
    queue: QueueHeads,
    left_out: Mapping[GroupKey, int],
    teams_of: Mapping[GroupKey, Mapping[int, sharing_plan.TeamQuota]],
    held: Mapping[GroupKey, list[Held]],
    *,
    members: set[int],
    types: list[int],
    now: datetime,
    fair_borrowing: Mapping[GroupKey, dict[int, float]],
) -> _Decided:
    """Plan every group with work waiting, reservations kept (bounded waits, where a GPU type reserves), and
    borrowed GPUs shared fairly where a cohort asks for it (`fair_borrowing`: its teams' borrowed hours)."""
    gpu_types = {q.gpu_type_id: q.gpu_type for group_quotas in groups.values() for q in group_quotas}
    book = ReservationBook.load(members, types, now=now, gpu_types=gpu_types.values())
    decided = _Decided()
    for key in groups:
        if queue.get(key):
            _plan_group(
                book, key, teams_of[key], held.get(key, []), queue[key], left_out, decided,
                now=now, borrowed_hours=fair_borrowing.get(key),
            )  # fmt: skip
    book.save()
    return decided


def _plan_group(
    book: ReservationBook,
    key: GroupKey,
    teams: Mapping[int, sharing_plan.TeamQuota],
    held: list[Held],
    heads: list[tuple[int, QueueEntry]],
    left_out: Mapping[GroupKey, int],
    decided: _Decided,
    *,
    now: datetime,
    borrowed_hours: dict[int, float] | None = None,
) -> None:
    """Plan one group (a cohort or lone team, one GPU type): preempt what the plan reclaims, note what it
    admits in `decided`, and have the queue's estimates made again where work still waits."""
    entries = [e for _, e in heads]
    result = book.plan(teams, held, sharing_plan.order_ranked(heads), gpu_type_id=key[1], borrowed_hours=borrowed_hours)
    if result.waiting or left_out.get(key):
        enqueue_estimate(team_id=entries[0].team_id, gpu_type_id=key[1])  # when will the queue move?
    for victim_id, for_id in sorted(result.preempt.items()):
        preempt(victim_id, for_workload_id=for_id, at=now)
        decided.reclaimed.setdefault(for_id, []).append(victim_id)
    decided.admitted.extend(result.admit)
    decided.borrowed.update(result.borrowed)
    # A promised workload the pass did not read (two of its size ahead of it) is admitted too: its team from the book.
    team_of = {**book.promised_teams(key[1]), **{w.id: w.team_id for w in entries}}
    decided.quota_of.update({w_id: teams[t].quota for w_id, t in team_of.items() if t in teams})


GroupKey = tuple[tuple[int, ...], int]  # (the cohort's team ids, or the lone team's; GPU type id)


def _fair_borrowing(
    quotas: list[Quota], cohort_of: dict[int, tuple[int, ...]], types: list[int], *, now: datetime
) -> dict[GroupKey, dict[int, float]]:
    """Per group of a cohort with fair borrowing: each team's decayed borrowed GPU-hours on the type (one
    query for the cohorts' flags; two more only where one has it)."""
    cohort_ids = {q.team.cohort_id for q in quotas if q.team.cohort_id is not None}
    fair = borrow_share.fair_cohorts(cohort_ids) if cohort_ids else set()
    if not fair:
        return {}
    members = sorted({q.team_id for q in quotas if q.team.cohort_id in fair})
    hours = borrow_share.borrowed_hours(members, types, now=now)
    groups: dict[GroupKey, dict[int, float]] = {}
    for q in quotas:
        if q.team.cohort_id in fair:
            key = (cohort_of[q.team_id], q.gpu_type_id)
            groups.setdefault(key, {})[q.team_id] = hours.get((q.team_id, q.gpu_type_id), 0.0)
    return groups


def _cohorts(team_ids: Iterable[int]) -> dict[int, tuple[int, ...]]:
    """Each team's cohort as the sorted ids of its teams (a team alone: itself), with every member of the
    given teams' cohorts included (one query)."""
    ids = list(team_ids)
    their_cohorts = Team.objects.filter(id__in=ids, cohort__isnull=False).values("cohort_id")
    rows = list(
        Team.objects.filter(Q(id__in=ids) | Q(cohort_id__in=their_cohorts)).order_by().values_list("id", "cohort_id")
    )
    members: dict[int, list[int]] = {}
    for team_id, cohort_id in rows:
        if cohort_id is not None:
            members.setdefault(cohort_id, []).append(team_id)
    cohort_of = {t: (t,) for t, c in rows if c is None}
    for team_list in members.values():
        for team_id in team_list:
            cohort_of[team_id] = tuple(sorted(team_list))
    return cohort_of


def _lock_pass_quotas(cohort_of: dict[int, tuple[int, ...]], types: list[int]) -> list[Quota]:
    return list(
        # The quota rows alone (`of`): locking their teams' rows too would hold up every submission of
        # those teams for the whole pass (a workload's insert checks its team with FOR KEY SHARE).
        Quota.objects.select_for_update(of=("self",))
        .filter(team_id__in=list(cohort_of), gpu_type_id__in=types)
        .select_related("team", "gpu_type")  # the type's queue order (aging) comes with it
        .order_by("id")
    )


def _pass_groups(quotas: list[Quota], cohort_of: dict[int, tuple[int, ...]]) -> dict[GroupKey, list[Quota]]:
    groups: dict[GroupKey, list[Quota]] = {}
    for q in quotas:
        groups.setdefault((cohort_of[q.team_id], q.gpu_type_id), []).append(q)
    return groups


def _budgets_spent(teams: Iterable[Team]) -> set[int]:
    """Teams whose monthly GPU-hour budget is used up (a cheap bound for all, a report where it is near)."""
    from jobs.services.usage.accounting import budgets_spent

    return budgets_spent({t.id: t for t in teams}.values())


QueueHeads = dict[GroupKey, list[tuple[int, QueueEntry]]]

# The head of every team's queue per GPU type (sharing_plan.queue_head, in SQL): each queued workload's
# place in its team's own order (`_TEAM_ORDER_SQL`: queue_order.TEAM_ORDER), and its
# number among the team's queued workloads of its size (per person where the team caps people), kept
# where a plan could reach it. The first of each team is always kept, with the team's queue length.
# Where a type reserves (GpuType.reserve_after_seconds), the first `depth` of each team's queue are kept
# too, whether or not they fit: backfill reserves for them (reservation_plan.RESERVE_DEPTH); left out, a
# large workload behind another got no reservation until the first started, and everything that came
# meanwhile was promised GPUs before it.
# Parameters: the teams and types with their rooms, aging and depth, the fair-share usage per team and
# person, the time to age to, the state.
_QUEUE_HEADS_SQL = """
WITH room AS (
    SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::int[], %s::bool[], %s::bool[], %s::int[])
        AS r(team_id, gpu_type_id, gpus, per_person, aging, depth)
), usage AS (
    SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::float8[]) AS u(team_id, owner_id, gpu_hours)
), queue AS (
    SELECT w.id, w.team_id, w.gpu_type_id, w.owner_id, w.gpu_count, w.priority, w.created_at, w.requeued_at,
           r.gpus AS room, r.per_person, r.depth,
           row_number() OVER (
               PARTITION BY w.team_id, w.gpu_type_id
               ORDER BY {order}
           ) - 1 AS place,
           count(*) OVER (PARTITION BY w.team_id, w.gpu_type_id) AS queued
    FROM {workload} w
    JOIN room r ON r.team_id = w.team_id AND r.gpu_type_id = w.gpu_type_id
    LEFT JOIN usage u ON u.team_id = w.team_id AND u.owner_id = w.owner_id
    WHERE w.state = %s AND w.team_id = ANY(%s::bigint[]) AND w.gpu_type_id = ANY(%s::bigint[])
      AND (w.retry_not_before IS NULL OR w.retry_not_before <= now())  -- a retry waits out its backoff
), numbered AS (
    SELECT q.*, row_number() OVER (
        PARTITION BY team_id, gpu_type_id, gpu_count, CASE WHEN per_person THEN owner_id END ORDER BY place
    ) AS nth
    FROM queue q
)
SELECT id, team_id, gpu_type_id, owner_id, gpu_count, priority, created_at, requeued_at, place, queued
FROM numbered
WHERE place = 0 OR place < depth OR room IS NULL OR gpu_count = 0
   OR (gpu_count <= room AND (nth - 1) * gpu_count <= room)
"""

# The team's own order over the queue's columns: the person's usage from `usage`, GPUs x seconds waited (to
# the time given) where the type ages (r.aging), none elsewhere.
_TEAM_ORDER_SQL = queue_order.order_by_sql({
    "priority": "w.priority", "requeued": "w.requeued_at", "fair_share": "coalesce(u.gpu_hours, 0)",
    "aged": f"CASE WHEN r.aging THEN {queue_order.aged_sql(gpus='w.gpu_count', created='w.created_at')} END",
    "created": "w.created_at", "id": "w.id",
})  # fmt: skip


def aging_gpu_types(gpu_type_ids: Iterable[int]) -> set[int]:
    """Those of `gpu_type_ids` whose queues age (GpuType.queue_aging)."""
    return set(GpuType.objects.filter(id__in=list(gpu_type_ids), queue_aging=True).values_list("id", flat=True))


def _queue_heads(
    rooms: dict[tuple[int, int], sharing_plan.Room],
    cohort_of: dict[int, tuple[int, ...]],
    fair: dict[int, dict[int, float]],
    *,
    aging_types: set[int] | None = None,
    reserving_types: set[int] | None = None,
) -> tuple[QueueHeads, dict[GroupKey, int]]:
    """The head of the queue of every (team, GPU type) of `rooms` (one query), as (place in the team's
    own queue, entry) per group, and how many queued workloads of each group were left out. `aging_types`:
    the GPU types whose queues age, when the caller knows them (else read); `reserving_types`: those that
    reserve, whose first RESERVE_DEPTH of each team are read whether or not they fit."""
    heads: QueueHeads = {}
    left_out: dict[GroupKey, int] = {}
    if not rooms:
        return heads, left_out
    if connection.vendor != "postgresql":
        return _queue_heads_read_whole(rooms, cohort_of, fair, reserving_types=reserving_types)
    pairs = sorted(rooms)
    if aging_types is None:
        aging_types = aging_gpu_types({g for _, g in pairs})
    params = _queue_heads_params(rooms, pairs, fair, aging_types, reserving_types or set())
    queued: dict[tuple[int, int], int] = {}
    with connection.cursor() as cursor:
        cursor.execute(_QUEUE_HEADS_SQL.format(workload=Workload._meta.db_table, order=_TEAM_ORDER_SQL), params)
        for w_id, team_id, gpu_type_id, owner_id, gpus, priority, created, requeued, place, count in cursor:
            key = (cohort_of[team_id], gpu_type_id)
            heads.setdefault(key, []).append(
                (place, QueueEntry(
                    id=w_id, team_id=team_id, user_id=owner_id, gpus=gpus, priority=priority,
                    created=created.timestamp(), requeued=requeued.timestamp() if requeued else None,
                ))
            )  # fmt: skip
            queued[(team_id, gpu_type_id)] = count
            left_out[key] = left_out.get(key, 0) - 1
    for (team_id, gpu_type_id), count in queued.items():
        left_out[(cohort_of[team_id], gpu_type_id)] += count
    return heads, left_out


def _queue_heads_params(
    rooms: dict[tuple[int, int], sharing_plan.Room],
    pairs: list[tuple[int, int]],
    fair: dict[int, dict[int, float]],
    aging_types: set[int],
    reserving_types: set[int],
) -> list:
    """_QUEUE_HEADS_SQL's parameters, in its order."""
    usage = [(t, owner, hours) for t, by_owner in fair.items() for owner, hours in by_owner.items()]
    return [
        [t for t, _ in pairs],
        [g for _, g in pairs],
        [rooms[p].gpus for p in pairs],
        [rooms[p].per_person for p in pairs],
        [g in aging_types for _, g in pairs],
        [reservation_plan.RESERVE_DEPTH if g in reserving_types else 0 for _, g in pairs],
        [t for t, _, _ in usage],
        [o for _, o, _ in usage],
        [h for _, _, h in usage],
        timezone.now(),
        State.QUEUED,
        sorted({t for t, _ in pairs}),
        sorted({g for _, g in pairs}),
    ]


def _queue_heads_read_whole(
    rooms: dict[tuple[int, int], sharing_plan.Room],
    cohort_of: dict[int, tuple[int, ...]],
    fair: dict[int, dict[int, float]],
    *,
    reserving_types: set[int] | None = None,
) -> tuple[QueueHeads, dict[GroupKey, int]]:
    """`_queue_heads` where SQL cannot pick them (SQLite in development): the whole queue, cut in Python."""
    by_pair: dict[tuple[int, int], list[QueueEntry]] = {}
    rows = (
        Workload.objects.filter(
            team_id__in={t for t, _ in rooms}, gpu_type_id__in={g for _, g in rooms}, state=State.QUEUED
        )
        .exclude(retry_not_before__gt=timezone.now())
        .values_list("id", "team_id", "gpu_type_id", "owner_id", "gpu_count", "priority", "created_at", "requeued_at")
    )
    for w_id, team_id, gpu_type_id, owner_id, gpus, priority, created, requeued in rows:
        if (team_id, gpu_type_id) in rooms:
            by_pair.setdefault((team_id, gpu_type_id), []).append(
                QueueEntry(
                    id=w_id, team_id=team_id, user_id=owner_id, gpus=gpus, priority=priority,
                    created=created.timestamp(), requeued=requeued.timestamp() if requeued else None,
                )
            )  # fmt: skip
    heads: QueueHeads = {}
    left_out: dict[GroupKey, int] = {}
    aging_types = aging_gpu_types({g for _, g in by_pair})
    now = timezone.now().timestamp()
    for (team_id, gpu_type_id), entries in by_pair.items():
        aging_now = now if gpu_type_id in aging_types else None
        own_order = sharing_plan.team_queues(entries, fair, aging_now=aging_now)[team_id]
        head = sharing_plan.queue_head(own_order, rooms[(team_id, gpu_type_id)])
        if gpu_type_id in (reserving_types or ()):  # the first few whether or not they fit, as the SQL keeps them
            kept = {place for place, _ in head}
            deeper = [(p, e) for p, e in enumerate(own_order[: reservation_plan.RESERVE_DEPTH]) if p not in kept]
            head = sorted(head + deeper, key=lambda pair: pair[0])
        key = (cohort_of[team_id], gpu_type_id)
        heads.setdefault(key, []).extend(head)
        left_out[key] = left_out.get(key, 0) + len(entries) - len(head)
    return heads, left_out


def _held_by_group(
    team_ids: set[int], types: list[int], cohort_of: dict[int, tuple[int, ...]]
) -> dict[GroupKey, list[Held]]:
    """What the teams hold, as the plan needs it: workloads on their own quota summed per team, GPU type
    and owner (the plan counts them, and never preempts them), borrowed ones one by one (it may)."""
    holding = Workload.objects.filter(team_id__in=list(team_ids), gpu_type_id__in=types, state__in=State.holding())
    # One query: own workloads grouped per team, type and owner; borrowed ones each a group of their own.
    if_borrowed = {
        "one_id": Case(When(borrowed=True, then=F("id"))),
        "its_priority": Case(When(borrowed=True, then=F("priority"))),
        "its_order": Case(When(borrowed=True, then=Coalesce("admitted_at", "created_at"))),
        "its_start": Case(When(borrowed=True, then=F("started_at"))),
        "its_checkpoint": Case(When(borrowed=True, then=F("last_checkpoint_at"))),
    }
    rows = (
        holding.annotate(**if_borrowed)
        .values_list("team_id", "gpu_type_id", "owner_id", "borrowed", *if_borrowed)
        .annotate(gpus=Sum("gpu_count"))
        .order_by()
    )
    held: dict[GroupKey, list[Held]] = {}
    stand_ins = 0
    now = timezone.now()
    rows = list(rows)
    # What a stop would lose, and the minimum runtimes (two reads): only where something is borrowed, the
    # one kind of workload a plan may stop.
    at_risk = StopCost(team_ids, types, now=now) if any(row[3] for row in rows) else None
    for team_id, gpu_type_id, owner_id, borrowed, w_id, priority, order, started, checkpoint, gpus in rows:
        key = (cohort_of[team_id], gpu_type_id)
        if borrowed:
            held.setdefault(key, []).append(
                Held(id=w_id, team_id=team_id, gpus=gpus, user_id=owner_id, priority=priority, borrowed=True,
                     order=order.timestamp(), **at_risk.of(team_id, gpu_type_id, gpus, started, checkpoint))
            )  # fmt: skip
        else:
            # A stand-in id that no workload has: the plan only uses ids of what it may preempt.
            stand_ins += 1
            held.setdefault(key, []).append(Held(id=-stand_ins, team_id=team_id, gpus=gpus, user_id=owner_id))
    return held


_OWN_MESSAGE = "GPUs reserved from the team's quota; creating Kubernetes objects."
_BORROWED_MESSAGE = "GPUs borrowed from the cohort's idle quota; creating Kubernetes objects."
# QUEUED -> SUBMITTING for the ids given as one array (an IN list of 10,000 parameters cost 0.3 s to
# build and send), and their timeline rows from arrays (10,000 model instances cost 0.8 s of CPU).
# QUEUED -> SUBMITTING for the ids given as one array (an IN list of 10,000 parameters cost 0.3 s to
# build and send), and their timeline rows from arrays (10,000 model instances cost 0.8 s of CPU): one
# statement. `{moves}`: one UPDATE per kind (own, borrowed) that has ids, each a CTE `moved_<kind>`;
# the main query reads them in that order (UNION ALL runs its parts in turn), so the own ones are
# updated (and locked, in id order: `id = ANY` scans the index) before the borrowed, as when they were
# two statements. The timeline CTE, read by nothing, runs to its end after them.
_MARK_ADMITTED_MOVE = """moved_{kind} AS (
    UPDATE {workload}
    SET state = %(submitting)s, reason = 'Admitted', message = %(message_{kind})s, borrowed = %(borrowed_{kind})s,
        admitted_at = %(now)s, state_changed_at = %(now)s, updated_at = %(now)s
    WHERE id = ANY(%(ids_{kind})s::bigint[]) AND state = %(queued)s
    RETURNING id, uid
)"""
_MARK_ADMITTED_SQL = """
WITH {moves}, timeline AS (
    INSERT INTO {event} (workload_id, at, source, from_state, to_state, reason, message)
    SELECT e.workload_id, %(now)s, %(source)s, %(queued)s, %(submitting)s, 'Admitted', e.message
    FROM unnest(%(ids)s::bigint[], %(messages)s::text[]) AS e(workload_id, message)
)
{reads}
"""


def _mark_admitted(
    admitted: list[int], *, borrowed: set[int], reclaimed: dict[int, list[int]], quota_of: dict[int, int], now
) -> list[str]:
    """QUEUED -> SUBMITTING for every admitted workload with its timeline row: one statement on PostgreSQL.
    Returns the uids of those moved, in the order given (the worker's tasks name workloads by uid)."""
    own = [w for w in admitted if w not in borrowed]
    lent = [w for w in admitted if w in borrowed]
    messages = [
        _admit_message(
            borrowed=workload_id in borrowed,
            quota=quota_of[workload_id],
            reclaimed=len(reclaimed.get(workload_id, ())),
        )
        for workload_id in admitted
    ]
    if connection.vendor != "postgresql":  # SQLite in development: no arrays
        _mark_admitted_orm(admitted, own=own, lent=lent, messages=messages, now=now)
        uid_of = dict(Workload.objects.filter(id__in=admitted).values_list("id", "uid"))
        return [uid_of[w] for w in admitted if w in uid_of]
    params: dict[str, Any] = {
        "submitting": State.SUBMITTING,
        "queued": State.QUEUED,
        "now": now,
        "ids": admitted,
        "messages": messages,
        "source": WorkloadEvent.Source.PORTAL,
    }
    kinds = []
    for kind, ids, is_borrowed, message in (("own", own, False, _OWN_MESSAGE), ("lent", lent, True, _BORROWED_MESSAGE)):
        if ids:
            kinds.append(kind)
            params.update({f"ids_{kind}": ids, f"message_{kind}": message, f"borrowed_{kind}": is_borrowed})
    with connection.cursor() as cursor:
        cursor.execute(_mark_admitted_sql(tuple(kinds)), params)
        uid_of = dict(cursor.fetchall())
    return [uid_of[w] for w in admitted if w in uid_of]


@functools.cache
def _mark_admitted_sql(kinds: tuple[str, ...]) -> str:
    workload = connection.ops.quote_name(Workload._meta.db_table)
    return _MARK_ADMITTED_SQL.format(
        moves=", ".join(_MARK_ADMITTED_MOVE.format(kind=kind, workload=workload) for kind in kinds),
        event=connection.ops.quote_name(WorkloadEvent._meta.db_table),
        reads=" UNION ALL ".join(f"SELECT id, uid FROM moved_{kind}" for kind in kinds),  # noqa: S608 - fixed names
    )


def _mark_admitted_orm(admitted: list[int], *, own: list[int], lent: list[int], messages: list[str], now) -> None:
    """`_mark_admitted` through the ORM, where the database has no arrays."""
    for ids, is_borrowed, message in ((own, False, _OWN_MESSAGE), (lent, True, _BORROWED_MESSAGE)):
        if ids:
            Workload.objects.filter(id__in=ids, state=State.QUEUED).update(
                state=State.SUBMITTING, reason="Admitted", message=message, borrowed=is_borrowed,
                admitted_at=now, state_changed_at=now, updated_at=now,
            )  # fmt: skip
    WorkloadEvent.objects.bulk_create(
        (
            WorkloadEvent(
                workload_id=workload_id,
                at=now,
                from_state=State.QUEUED,
                to_state=State.SUBMITTING,
                reason="Admitted",
                message=message,
            )
            for workload_id, message in zip(admitted, messages, strict=True)
        ),
        batch_size=2000,
    )


# --- settling what runs: before each plan, under the same locks ---------------------------------------
# Every admission first settles what runs: a borrowed workload that its own team's quota covers again
# (its teammates' work ended) stops being borrowed, and so stops being reclaimable; and where limits were
# lowered (a borrowing limit, a lending cap, a quota) the borrowed work that now exceeds them is preempted,
# the same way a lender reclaims: grace period, timeline, owner told.


def settle_running(
    teams: Mapping[int, sharing_plan.TeamQuota], held: list[Held], *, gpu_type_id: int, at: datetime
) -> list[Held]:
    """Under the cohort's quota locks: flip borrowed marks that no longer hold and preempt borrowed work
    beyond lowered limits. Returns what holds GPUs afterwards, as the admission plan should see it.

    `held` may sum a team's own workloads into stand-ins (negative ids, as the bulk admission pass
    reads them); where a lowered quota no longer covers them they are read one by one.

    A team alone (no cohort) never borrows: only a mark left over from a cohort it left is cleared, and
    a lowered quota lets its running work finish (its quota is a wall for new work only)."""
    settled = sharing_plan.settle(teams, held)
    if len(teams) == 1 and not any(t.borrowing_limit for t in teams.values()):
        settled = sharing_plan.Settled(now_own=settled.now_own)
    elif any(i < 0 for i in settled.now_borrowed):
        held = _own_one_by_one(held, gpu_type_id)
        settled = sharing_plan.settle(teams, held)
    if not (settled.now_own or settled.now_borrowed or settled.preempt):
        return held
    _flip_marks(settled.now_own, borrowed=False, at=at)
    _flip_marks(settled.now_borrowed, borrowed=True, at=at)
    names = dict(Team.objects.filter(id__in=set(settled.preempt.values())).values_list("id", "name"))
    for victim_id, team_id in sorted(settled.preempt.items()):
        preempt(victim_id, at=at, because=_beyond_limits(names[team_id], teams[team_id]))
    flipped = settled.now_own | settled.now_borrowed
    return [replace(h, borrowed=not h.borrowed) if h.id in flipped else h for h in held if h.id not in settled.preempt]


def _own_one_by_one(held: list[Held], gpu_type_id: int) -> list[Held]:
    """`held` with each team's summed own workloads (stand-ins) replaced by the workloads themselves."""
    teams = {h.team_id for h in held if h.id < 0}
    own = [
        Held(
            id=w_id,
            team_id=team_id,
            gpus=gpus,
            user_id=owner_id,
            priority=priority,
            order=(admitted or created).timestamp(),
        )
        for w_id, team_id, gpus, owner_id, priority, admitted, created in Workload.objects.filter(
            team_id__in=teams, gpu_type_id=gpu_type_id, state__in=State.holding(), borrowed=False
        ).values_list("id", "team_id", "gpu_count", "owner_id", "priority", "admitted_at", "created_at")
    ]
    return [h for h in held if h.id >= 0] + own


LIMITS_LOWERED = "the sharing limits were lowered"  # how a workload stopped by settle_running is told why


def _beyond_limits(team_name: str, quota: sharing_plan.TeamQuota) -> str:
    return (
        f"{LIMITS_LOWERED}: team {team_name} may hold {quota.quota} GPU(s) of its own plus "
        f"{quota.borrowing_limit} borrowed, and its cohort lends less than it had borrowed (this workload ran "
        "on borrowed GPUs)."
    )


def _flip_marks(ids: set[int], *, borrowed: bool, at: datetime) -> None:
    """Mark workloads borrowed or not from `at`. A started run keeps the stretch before as a segment
    with the old mark, so usage bills each part as it was."""
    for workload in Workload.objects.filter(id__in=ids, borrowed=not borrowed):
        if workload.started_at is not None:
            close_segment(
                workload,
                began=counted_start(workload.started_at, workload.counted_from),
                at=at,
                borrowed=not borrowed,
                attempt=workload.attempt,
                reason="BorrowedMarkChanged",
            )
            Workload.objects.filter(id=workload.id).update(borrowed=borrowed, counted_from=at, updated_at=at)
        else:
            Workload.objects.filter(id=workload.id).update(borrowed=borrowed, updated_at=at)
        workload.borrowed = borrowed
        if borrowed:
            message = (
                "Now borrowed: the team's quota was lowered and no longer covers it; it runs on GPUs its cohort "
                "lends, and a lender may reclaim them."
            )
        else:
            message = "No longer borrowed: the team's own quota covers it now, so it can no longer be preempted."
        note(
            workload,
            reason="Borrowed" if borrowed else "NoLongerBorrowed",
            message=message,
            source=WorkloadEvent.Source.PORTAL,
        )
