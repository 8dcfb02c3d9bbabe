"""Reads used by pages, the API and admin: each is a fixed number of queries, whatever the data size."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Exists, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from jobs.models import GpuNode, GpuType, Membership, Quota, Role, State, Team, Workload


def teams_for(user) -> QuerySet[Team]:
    if not user.is_authenticated:
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user).distinct()


def is_manager(user, team: Team) -> bool:
    return Membership.objects.filter(user=user, team=team, role=Role.MANAGER).exists()


def workloads_visible_to(user) -> QuerySet[Workload]:
    """Everything in the user's teams (teammates see each other's work; outsiders see nothing)."""
    if not user.is_authenticated:
        return Workload.objects.none()
    return Workload.objects.filter(Exists(Membership.objects.filter(user=user, team=OuterRef("team_id"))))


def with_queue_position(queryset: QuerySet[Workload]) -> QuerySet[Workload]:
    """Annotate `queue_position` (1 = next) on queued workloads, in one correlated subquery."""
    ahead = (
        Workload.objects.filter(team_id=OuterRef("team_id"), gpu_type_id=OuterRef("gpu_type_id"), state=State.QUEUED)
        .filter(
            Q(priority__gt=OuterRef("priority"))
            | Q(priority=OuterRef("priority"), created_at__lt=OuterRef("created_at"))
            | Q(priority=OuterRef("priority"), created_at=OuterRef("created_at"), id__lt=OuterRef("id"))
        )
        .order_by()
        .values("team_id")
        .annotate(n=Count("id"))
        .values("n")
    )
    return queryset.annotate(queue_position=Coalesce(Subquery(ahead, output_field=IntegerField()), Value(0)) + 1)


def queue_position(workload: Workload) -> int | None:
    if workload.state != State.QUEUED:
        return None
    return with_queue_position(Workload.objects.filter(id=workload.id)).values_list("queue_position", flat=True)[0]


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
