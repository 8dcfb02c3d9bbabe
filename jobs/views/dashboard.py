"""The dashboard: my workloads, my team's quota use, and room in the cluster."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from jobs.models import GpuType, State
from jobs.selectors import cluster_capacity, team_quota_use, with_queue_position, workloads_visible_to
from jobs.services.usage.accounting import budget_use
from jobs.views.common import team_page

DASHBOARD_ROWS = 8


@team_page
def dashboard(request: HttpRequest) -> HttpResponse:
    team = request.acting.team
    mine = workloads_visible_to(request.user).filter(team=team, owner=request.user).select_related("gpu_type")
    active = list(with_queue_position(mine.filter(state__in=State.active())).order_by("-created_at")[:DASHBOARD_ROWS])
    recent = list(mine.filter(state__in=State.final()).order_by("-created_at")[:DASHBOARD_ROWS])
    capacity = sorted(cluster_capacity(GpuType.objects.filter(enabled=True)).values(), key=lambda c: c.gpu_type.slug)
    return render(
        request,
        "jobs/dashboard.html",
        {
            "active": active,
            "recent": recent,
            "quota_use": team_quota_use(team),
            "capacity": capacity,
            "budget": budget_use(team),
        },
    )
