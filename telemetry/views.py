"""The nodes page and the per-workload GPU chart (partial and JSON). The agents' REST endpoint is api/views_agent.py."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from jobs import policy
from jobs.models import Workload
from jobs.views.gpu_health import health_history
from telemetry.chart import workload_gpu_chart
from telemetry.selectors import nodes_overview, workload_gpu_series, workload_gpu_summary

log = logging.getLogger(__name__)


@login_required
@require_GET
def nodes(request: HttpRequest) -> HttpResponse:
    rows = nodes_overview(request.user)
    return render(
        request,
        "telemetry/nodes.html",
        {
            "nodes": rows,
            # Nodes no agent ever reported for: one card that says what an agent is, not one card each.
            "without_agent": [r for r in rows if not r.telemetry and not r.gpus],
            "any_simulated": any(r.telemetry and r.telemetry.simulated for r in rows),
            "health_marks": health_history(),
            # The label gang jobs may ask to share (a zone, a rack): each node shows its value.
            "topology_label": settings.GANG_TOPOLOGY_LABEL,
            "now": timezone.now(),
        },
    )


def _visible_workload(request: HttpRequest, uid: str) -> Workload:
    return policy.workload_or_404(request.user, uid)


@login_required
@require_GET
def workload_gpu_partial(request: HttpRequest, uid: str) -> HttpResponse:
    """The chart partial alone, for an htmx refresh on the workload page."""
    workload = _visible_workload(request, uid)
    return render(request, "telemetry/_workload_gpu.html", {"gpu_chart": workload_gpu_chart(workload)})


@login_required
@require_GET
def workload_gpu_json(request: HttpRequest, uid: str) -> JsonResponse:
    workload = _visible_workload(request, uid)
    return JsonResponse(
        {"workload": workload.uid, "summary": workload_gpu_summary(workload), "series": workload_gpu_series(workload)}
    )
