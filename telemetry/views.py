"""The agent's ingest endpoint, the nodes page, and the per-workload GPU chart (partial and JSON)."""

from __future__ import annotations

import json
import logging

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from agent.report import Report, ReportError
from jobs import policy
from jobs.models import Workload
from telemetry.chart import workload_gpu_chart
from telemetry.selectors import nodes_overview, workload_gpu_series, workload_gpu_summary
from telemetry.services.ingest import ReportRejected, report_ingest
from telemetry.services.tokens import agent_token_check, agent_token_may_report

log = logging.getLogger(__name__)


def _error(status: int, message: str, **extra: object) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


def _unauthorized(message: str) -> JsonResponse:
    response = _error(401, message)
    response["WWW-Authenticate"] = 'Bearer realm="gpuportal-agent"'
    return response


@csrf_exempt
def agent_report(request: HttpRequest) -> HttpResponse:
    """POST /api/v1/agent/reports: one gpuportal.agent.report/v1 body, bearer-token authenticated.

    202 stored (or a duplicate acknowledged), 400 naming the bad field, 401 bad or missing token,
    405 not a POST, 413 body over TELEMETRY_MAX_REPORT_BYTES, 503 the portal could not store it (the
    agent keeps the report and retries).
    """
    if request.method != "POST":
        response = _error(405, "POST a report here")
        response["Allow"] = "POST"
        return response
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    row = agent_token_check(token.strip()) if scheme.lower() == "bearer" else None
    if row is None:
        return _unauthorized("a valid agent token is required (Authorization: Bearer <token>)")
    limit = settings.TELEMETRY_MAX_REPORT_BYTES
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return _error(400, "body: bad Content-Length", field="body")
    if declared > limit:
        return _error(413, f"body: a report may be at most {limit} bytes", field="body")
    raw = request.read(limit + 1)
    if len(raw) > limit:
        return _error(413, f"body: a report may be at most {limit} bytes", field="body")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return _error(400, "body: not JSON", field="body")
    try:
        report = Report.from_dict(body)
    except ReportError as exc:
        message = str(exc)
        return _error(400, message, field=message.partition(":")[0])
    if not agent_token_may_report(row, report.node):
        log.warning("agent token %s refused: it may not report for node %s", row.prefix, report.node[:253])
        return _unauthorized("this agent token may not report for this node")
    try:
        result = report_ingest(report=report, received_at=timezone.now())
    except ReportRejected as exc:
        message = str(exc)
        return _error(400, message, field=message.partition(":")[0])
    except Exception:
        # Never a 500 page for an agent: say "later", and it keeps the report and retries.
        log.exception("could not store a report from node %s", report.node)
        return _error(503, "the portal could not store the report now; retry later")
    return JsonResponse(
        {"stored": result.stored, "node": result.node, "gpus": result.gpus, "workloads": result.workloads},
        status=202,
    )


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
