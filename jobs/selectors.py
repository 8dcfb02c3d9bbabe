"""Reads used by pages, the API and admin: each is a fixed number of queries, whatever the data size."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import (
    Case,
    Count,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from identity.models import Membership, Role
from jobs import policy, queue_order
from jobs.models import Dataset, GpuNode, GpuType, Quota, RunSegment, State, Team, Workload, Workspace
from jobs.models.workloads import segment_gpu_seconds


def teams_for(user) -> QuerySet[Team]:
    if not user.is_authenticated:
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user).distinct()


def team_datasets(team: Team) -> QuerySet[Dataset]:
    """The datasets `team` may mount (enabled, and allowed to it by an admin), by name: the names a submission's
    `datasets` takes. Another team's are never among them."""
    return Dataset.objects.filter(enabled=True, teams=team).order_by("name")


def is_manager(user, team: Team) -> bool:
    return Membership.objects.filter(user=user, team=team, role=Role.MANAGER).exists()


def workloads_visible_to(user) -> QuerySet[Workload]:
    """Everything the user may see; the rule is `jobs.policy.visible_workloads`."""
    return policy.visible_workloads(user)


def _queued_ahead(condition: Q) -> Coalesce:
    # Counts team_id, which the (team, gpu_type, state, -priority, created_at) index holds: an index range
    # scan, often index-only, instead of visiting every queued row.
    rows = (
        Workload.objects.filter(
            condition, team_id=OuterRef("team_id"), gpu_type_id=OuterRef("gpu_type_id"), state=State.QUEUED
        )
        .order_by()
        .values("team_id")
        .annotate(n=Count("team_id"))
        .values("n")
    )
    return Coalesce(Subquery(rows, output_field=IntegerField()), Value(0))


def queue_position_expression() -> Case:
    """The one queue-position computation: 1 + the queued workloads of the same team and GPU type ahead
    in admission order (higher priority; then, where the GPU type ages, more GPUs x time waited; then
    earlier, then lower id); None unless queued. As before aging, it leaves out what only the pass knows
    (fair share, requeued work first).

    Written as three range counts that each follow the queue index, rather than one count with an OR
    that makes PostgreSQL visit every queued row of the team (10,000 queued in one team: ~5 ms instead
    of ~200 ms a page). Under CASE, PostgreSQL runs the subqueries for queued rows alone. Where the type
    ages, the same priority is one range, filtered by the aged order (the GPU type's queue_aging).
    """
    plain = [_queued_ahead(q) for q in queue_order.ahead_q(queue_order.INDEX_ORDER, _outer)]
    return Case(
        When(state=State.QUEUED, gpu_type__queue_aging=True, then=plain[0] + _aged_ahead() + Value(1)),
        When(state=State.QUEUED, then=sum(plain[1:], plain[0]) + Value(1)),
        default=None,
        output_field=IntegerField(),
    )


def _outer(key: queue_order.Key) -> tuple[str, Any]:
    """A key's field on the row, held against the outer row's; GPUs x time waited as annotated (`_aged_ahead`)."""
    if key is queue_order.AGED:
        return "theirs", F("mine")
    field = queue_order.FIELDS[key.name]
    return field, OuterRef(field)


def _aged_ahead() -> Coalesce:
    """Of the same priority, those ahead in the aged order (queue_order.POSITION_ORDER after priority: more
    GPUs x time waited, then earlier, then lower id), in one count: the weight is no column of an index."""
    now = timezone.now()
    _, same_priority = queue_order.ahead_q(queue_order.POSITION_ORDER, _outer, split=1)
    rows = (
        Workload.objects.filter(team_id=OuterRef("team_id"), gpu_type_id=OuterRef("gpu_type_id"), state=State.QUEUED)
        .annotate(
            theirs=queue_order.AgedWeight(F("gpu_count"), F("created_at"), now),
            mine=queue_order.AgedWeight(OuterRef("gpu_count"), OuterRef("created_at"), now),
        )
        .filter(same_priority)
        .order_by()
        .values("team_id")
        .annotate(n=Count("team_id"))
        .values("n")
    )
    return Coalesce(Subquery(rows, output_field=IntegerField()), Value(0))


# queue_position_expression for one workload whose fields are known (just stored): the same range counts
# (queue_order.INDEX_ORDER), with its values as parameters, and its GPU type's slug, in one cheap statement.
# Where the type ages the count is the same: a workload submitted now has waited nothing, so every earlier
# one of its priority has waited more GPU-seconds (at least 1 GPU x its wait) and is ahead of it.
_POSITION_SQL = "SELECT (SELECT slug FROM {gpu_type} WHERE id = %(type)s), 1 + {ahead}"
_POSITION_COUNT = """(SELECT count(team_id) FROM {workload}
    WHERE team_id = %(team)s AND gpu_type_id = %(type)s AND state = %(queued)s AND {ahead})"""
_POSITION_AHEAD = queue_order.ahead_sql(
    queue_order.FIELDS, {"priority": "%(priority)s", "created": "%(created)s", "id": "%(id)s"}
)


def queued_position_and_type(workload: Workload) -> tuple[GpuType, int]:
    """For a workload just stored QUEUED in this transaction: its GPU type (only the slug read) and its
    queue position, as `with_queue_position` would give it, in one statement."""
    from django.db import connection

    counts = (_POSITION_COUNT.format(workload=Workload._meta.db_table, ahead=ahead) for ahead in _POSITION_AHEAD)
    sql = _POSITION_SQL.format(gpu_type=GpuType._meta.db_table, ahead="\n + ".join(counts))
    params = {
        "type": workload.gpu_type_id, "team": workload.team_id, "queued": State.QUEUED,
        # As stored: SQLite keeps datetimes as text without the zone, which a raw parameter would compare against.
        "priority": workload.priority, "created": connection.ops.adapt_datetimefield_value(workload.created_at),
        "id": workload.id,
    }  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        slug, position = cursor.fetchone()
    return GpuType.from_db(connection.alias, ["id", "slug"], [workload.gpu_type_id, slug]), position


# `_POSITION_SQL`'s count for a workload being stored by the same statement (`jobs.sql.insert_then`'s
# `also`): its id is `stored`'s, and the counts see the queue as it was before the statement, which is
# what they count (those ahead of it, never itself).
_STORED_POSITION_SQL = """
1 + (SELECT count(team_id) FROM {workload}
     WHERE team_id = %s AND gpu_type_id = %s AND state = %s AND priority > %s)
  + (SELECT count(team_id) FROM {workload}
     WHERE team_id = %s AND gpu_type_id = %s AND state = %s AND priority = %s AND created_at < %s)
  + (SELECT count(team_id) FROM {workload}
     WHERE team_id = %s AND gpu_type_id = %s AND state = %s AND priority = %s AND created_at = %s
           AND id < stored.id)
"""


def stored_position_sql(workload: Workload) -> tuple[str, list]:
    """The select list and parameters that give a workload's queue position from the statement that
    stores it QUEUED (PostgreSQL), as `queued_position_and_type` would give it after the insert."""
    from django.db import connection

    created = connection.ops.adapt_datetimefield_value(workload.created_at)
    queue = [workload.team_id, workload.gpu_type_id, State.QUEUED, workload.priority]
    return _STORED_POSITION_SQL.format(workload=connection.ops.quote_name(Workload._meta.db_table)), [
        *queue,
        *queue,
        created,
        *queue,
        created,
    ]


def with_queue_position(queryset: QuerySet[Workload]) -> QuerySet[Workload]:
    """Annotate `queue_position` (queue_position_expression) on every row of the queryset."""
    return queryset.annotate(queue_position=queue_position_expression())


# queue_position_expression for a page of workloads: each queue its page touches (team and GPU type) is
# numbered once in admission order and the page's rows are picked out, instead of three counts per row
# (a page at the back of a queue of Q counted about 50 x Q rows: 13 ms a page with 200 queued).
# Where the GPU type ages, GPUs x seconds waited (to the time given) comes after priority, as in admission.
_QUEUE_NUMBERED_SQL = """
SELECT id, position FROM (
    SELECT w.id, row_number() OVER (PARTITION BY w.team_id, w.gpu_type_id ORDER BY {order}) AS position
    FROM {workload} w JOIN {gpu_type} g ON g.id = w.gpu_type_id
    WHERE w.state = %s AND ({queues})
) AS numbered
WHERE id IN ({ids})
"""


def queue_positions(workloads: Iterable[Workload]) -> dict[int, int]:
    """Queue position of each queued workload given (a page already fetched), in one query: the same
    numbers as `queue_position_expression` (1 + those of the same team and GPU type ahead in admission
    order), for those still queued when it runs."""
    from django.db import connection

    queued = [w for w in workloads if w.state == State.QUEUED]
    if not queued:
        return {}
    ids = sorted({w.id for w in queued})
    queues = sorted({(w.team_id, w.gpu_type_id) for w in queued})
    sql = _QUEUE_NUMBERED_SQL.format(
        workload=connection.ops.quote_name(Workload._meta.db_table),
        gpu_type=connection.ops.quote_name(GpuType._meta.db_table),
        order=_position_order_sql(connection.vendor),
        queues=" OR ".join(["(w.team_id = %s AND w.gpu_type_id = %s)"] * len(queues)),
        ids=", ".join(["%s"] * len(ids)),
    )
    params: list[Any] = [connection.ops.adapt_datetimefield_value(timezone.now()), State.QUEUED.value]
    for team_id, gpu_type_id in queues:
        params += [team_id, gpu_type_id]
    params += ids
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return dict(cursor.fetchall())


def _position_order_sql(vendor: str) -> str:
    """queue_order.POSITION_ORDER over `_QUEUE_NUMBERED_SQL`'s columns: GPUs x seconds waited (to the time
    given) where the type ages, none elsewhere."""
    aged = queue_order.aged_sql(gpus="w.gpu_count", created="w.created_at", vendor=vendor)
    columns = {"priority": "w.priority", "aged": f"CASE WHEN g.queue_aging THEN {aged} END"}
    return queue_order.order_by_sql(columns | {"created": "w.created_at", "id": "w.id"}, queue_order.POSITION_ORDER)


def with_related_names(queryset: QuerySet[Workload]) -> QuerySet[Workload]:
    """The workloads with their team's slug, owner's username and GPU type's slug as columns of their own
    (for `attach_related_names`), instead of three whole related rows (and objects) per workload."""
    return queryset.annotate(
        listed_team_slug=F("team__slug"),
        listed_owner_username=F("owner__username"),
        listed_gpu_type_slug=F("gpu_type__slug"),
        listed_team_retry_limit=F("team__default_retry_limit"),
    )


def attach_related_names(workloads: Iterable[Workload]) -> None:
    """Give workloads read through `with_related_names` their team, owner and GPU type as objects holding
    the id and slug (username) alone, one object per distinct row; any other field is read when used."""
    user_model = Workload._meta.get_field("owner").related_model
    shared: dict[tuple[type, int], Any] = {}

    def one(model, db: str | None, pk: int, name: str, value: str):
        instance = shared.get((model, pk))
        if instance is None:
            instance = shared[(model, pk)] = model.from_db(db, ["id", name], [pk, value])
        return instance

    for w in workloads:
        db, cache = w._state.db, w._state.fields_cache
        cache["team"] = one(Team, db, w.team_id, "slug", w.listed_team_slug)
        cache["owner"] = one(user_model, db, w.owner_id, user_model.USERNAME_FIELD, w.listed_owner_username)
        cache["gpu_type"] = one(GpuType, db, w.gpu_type_id, "slug", w.listed_gpu_type_slug)


def with_earlier_runs(workloads: Iterable[Workload]) -> None:
    """Read the GPU time of earlier runs (ended by preemption, then requeued) for a page of workloads in
    one query, so each row's `gpu_seconds` needs none; workloads never requeued need nothing."""
    requeued = {w.id: w for w in workloads if w.attempt}
    if not requeued:
        return
    parts: dict[int, list[tuple[int, datetime, datetime]]] = {i: [] for i in requeued}
    for workload_id, attempt, gpus, started, finished in RunSegment.objects.filter(
        workload_id__in=list(requeued)
    ).values_list("workload_id", "attempt", "gpu_count", "started_at", "finished_at"):
        if attempt < requeued[workload_id].attempt:
            parts[workload_id].append((gpus, started, finished))
    for workload_id, segments in parts.items():
        requeued[workload_id]._earlier_gpu_seconds = segment_gpu_seconds(segments)


def queue_position(workload: Workload) -> int | None:
    # One workload: three range counts up to its place beat numbering its whole queue.
    return with_queue_position(Workload.objects.filter(id=workload.id)).values_list("queue_position", flat=True).first()


@dataclass(frozen=True)
class QuotaUse:
    gpu_type: GpuType
    limit: int
    used: int
    queued: int

    @property
    def free(self) -> int:
        return max(0, self.limit - self.used)


def team_quota_use(team: Team) -> list[QuotaUse]:
    """Per GPU type the team has a quota for: the limit, GPUs held now, and GPUs waiting in the queue."""
    held = (
        Workload.objects.filter(team_id=team.id, state__in=State.holding())
        .values("gpu_type_id")
        .annotate(n=Sum("gpu_count"))
    )
    waiting = (
        Workload.objects.filter(team_id=team.id, state=State.QUEUED).values("gpu_type_id").annotate(n=Sum("gpu_count"))
    )
    held_by = {row["gpu_type_id"]: row["n"] for row in held}
    waiting_by = {row["gpu_type_id"]: row["n"] for row in waiting}
    return [
        QuotaUse(
            gpu_type=q.gpu_type,
            limit=q.max_gpus,
            used=held_by.get(q.gpu_type_id, 0),
            queued=waiting_by.get(q.gpu_type_id, 0),
        )
        for q in Quota.objects.filter(team=team).select_related("gpu_type").order_by("gpu_type__slug")
    ]


@dataclass(frozen=True)
class Capacity:
    gpu_type: GpuType
    total: int
    free: int
    largest_node: int
    nodes: int


def cluster_capacity(gpu_types: Iterable[GpuType] | None = None) -> dict[int, Capacity]:
    """Free and total GPUs per type from the last inventory sync (ready, schedulable nodes only)."""
    types = list(gpu_types) if gpu_types is not None else list(GpuType.objects.all())
    result = {t.id: Capacity(gpu_type=t, total=0, free=0, largest_node=0, nodes=0) for t in types}
    for node in GpuNode.objects.filter(gpu_type__in=types, ready=True, schedulable=True):
        current = result[node.gpu_type_id]
        result[node.gpu_type_id] = Capacity(
            gpu_type=current.gpu_type,
            total=current.total + node.gpus_allocatable,
            free=current.free + max(0, node.gpus_allocatable - node.gpus_in_use),
            largest_node=max(current.largest_node, node.gpus_allocatable),
            nodes=current.nodes + 1,
        )
    return result


# --- what the web pages (and the API) need about the person acting ---------------------------------
def memberships_of(user) -> list[Membership]:
    """The user's memberships with their teams, by team name (one query)."""
    if not user.is_authenticated:
        return []
    return list(Membership.objects.filter(user=user).select_related("team").order_by("team__name", "team_id"))


def current_membership(user, team_id: int | str | None = None) -> Membership | None:
    """The membership the user acts through: the one for `team_id` if they belong to it, else their first.

    Pages keep `team_id` in the session; a user in one team never has to choose.
    """
    memberships = memberships_of(user)
    for membership in memberships:
        if str(membership.team_id) == str(team_id):
            return membership
    return memberships[0] if memberships else None


@dataclass(frozen=True)
class LaunchOutlook:
    """What would happen to a request for `gpu_count` GPUs of a type, if submitted now."""

    gpu_type: GpuType
    gpu_count: int
    limit: int | None  # the team's quota for the type; None: no quota, cannot be used
    used: int  # GPUs the team holds now
    queued_workloads: int  # the team's workloads already waiting for this type
    queued_gpus: int
    cluster_free: int
    cluster_total: int
    copies: int = 1  # a sweep from the launch page: this many workloads of gpu_count GPUs each
    gang: Any = None  # a gang job: its nodes and the cluster's room for them (queue.gangs.GangOutlook)

    @property
    def quota_left(self) -> int:
        return max(0, (self.limit or 0) - self.used)

    @property
    def must_wait(self) -> bool:
        """Admission is best-effort: a request that fits into the quota left is admitted at once."""
        return self.limit is not None and self.gpu_count <= self.limit and self.gpu_count > self.quota_left

    @property
    def expected_position(self) -> int:
        return self.queued_workloads + 1

    @property
    def cluster_short(self) -> bool:
        """The cluster has fewer free GPUs than asked: the pod waits for the scheduler even with quota."""
        return self.cluster_free < self.gpu_count * self.copies_start_now

    @property
    def copies_start_now(self) -> int:
        """How many of the copies the quota left admits at once (each on its own: best-effort, as one)."""
        if self.limit is None or self.gpu_count > self.limit:
            return 0
        return min(self.copies, self.quota_left // self.gpu_count)

    @property
    def copies_waiting(self) -> int:
        return self.copies - self.copies_start_now


def launch_outlook(team: Team, gpu_type: GpuType, gpu_count: int, copies: int = 1) -> LaunchOutlook:
    """Quota and cluster room for one GPU type, for the launch form's "will it wait?" notice (3 queries)."""
    limit = Quota.objects.filter(team=team, gpu_type=gpu_type).values_list("max_gpus", flat=True).first()
    counts = Workload.objects.filter(team=team, gpu_type=gpu_type, state__in=State.active()).aggregate(
        used=Coalesce(Sum("gpu_count", filter=Q(state__in=State.holding())), 0),
        queued_workloads=Count("id", filter=Q(state=State.QUEUED)),
        queued_gpus=Coalesce(Sum("gpu_count", filter=Q(state=State.QUEUED)), 0),
    )
    capacity = cluster_capacity([gpu_type])[gpu_type.id]
    return LaunchOutlook(
        gpu_type=gpu_type,
        gpu_count=gpu_count,
        limit=limit,
        used=counts["used"],
        queued_workloads=counts["queued_workloads"],
        queued_gpus=counts["queued_gpus"],
        cluster_free=capacity.free,
        cluster_total=capacity.total,
        copies=copies,
    )


WORKSPACE_KINDS = ("home", "team")


def _workspace_use(wanted: set[tuple[str, str]]) -> dict[tuple[str, str], tuple[int | None, Any]]:
    """(used bytes, when measured) of each (namespace, claim) of `wanted` that has a workspace row."""
    if not wanted:
        return {}
    match = Q()
    for namespace in {namespace for namespace, _ in wanted}:
        match |= Q(namespace=namespace, claim_name__in=[c for n, c in wanted if n == namespace])
    rows = Workspace.objects.filter(match).values_list("namespace", "claim_name", "used_bytes", "used_measured_at")
    return {(namespace, claim): (used, measured) for namespace, claim, used, measured in rows}


def _with_use(w: Workload, use: dict[tuple[str, str], tuple[int | None, Any]]) -> list[dict[str, Any]]:
    mounts = []
    for mount in w.mounts or []:
        mount = dict(mount)
        if mount.get("kind") in WORKSPACE_KINDS:
            used, measured = use.get((w.namespace or w.team.namespace, mount.get("claim", "")), (None, None))
            mount["used_bytes"], mount["used_measured_at"] = used, measured
        mounts.append(mount)
    return mounts


def mounts_with_use(workloads: Iterable[Workload]) -> dict[int, list[dict[str, Any]]]:
    """Each workload's stored mounts, its workspaces with the latest measured use added (`used_bytes`,
    `used_measured_at`: null until a node agent measured it). One query for any number of workloads."""
    workloads = list(workloads)
    wanted = {
        (w.namespace or w.team.namespace, m["claim"])
        for w in workloads
        for m in w.mounts or []
        if m.get("kind") in WORKSPACE_KINDS and m.get("claim")
    }
    use = _workspace_use(wanted)
    return {w.id: _with_use(w, use) for w in workloads}
