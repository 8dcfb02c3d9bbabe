"""Workload pages: the list, the detail page with its live parts, logs, events and cancelling.

Every lookup goes through jobs.policy, so a workload of another team is a 404, never a 403
that would confirm it exists.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from jobs import policy
from jobs.forms import WorkloadFilterForm
from jobs.models import GpuType, Kind, State, Workload
from jobs.selectors import queue_position, team_quota_use, with_queue_position, workloads_visible_to
from jobs.services.cancel import workload_cancel
from jobs.services.errors import WorkloadStateError
from jobs.services.logs import LogsUnavailable, follow_logs, workload_events, workload_logs
from jobs.views_common import team_page

log = logging.getLogger(__name__)

PAGE_SIZE = 25
LOG_TAIL = 500
CLUSTER_UNREACHABLE = "The cluster can't be reached right now; try again in a moment."


def _workload(request: HttpRequest, uid: str) -> Workload:
    return policy.workload_or_404(
        request.user, uid, Workload.objects.select_related("team", "owner", "gpu_type", "catalog_image")
    )


@team_page
def workload_list(request: HttpRequest) -> HttpResponse:
    team = request.acting.team
    gpu_types = list(GpuType.objects.all())
    filters = WorkloadFilterForm(request.GET or None, gpu_types=gpu_types)
    chosen = filters.cleaned_data if filters.is_valid() else {}
    workloads = workloads_visible_to(request.user).filter(team=team)
    if chosen.get("scope", "mine") in ("mine", ""):
        workloads = workloads.filter(owner=request.user)
    state = chosen.get("state")
    if state == "active":
        workloads = workloads.filter(state__in=State.active())
    elif state == "finished":
        workloads = workloads.filter(state__in=State.final())
    elif state:
        workloads = workloads.filter(state=state)
    if chosen.get("kind"):
        workloads = workloads.filter(kind=chosen["kind"])
    if chosen.get("gpu_type"):
        workloads = workloads.filter(gpu_type__slug=chosen["gpu_type"])
    workloads = with_queue_position(workloads.select_related("owner", "gpu_type")).order_by("-created_at", "-id")
    page = Paginator(workloads, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "jobs/workload_list.html",
        {"filters": filters, "page": page, "scope": chosen.get("scope") or "mine", "filtered": bool(chosen)},
    )


def _detail_context(request: HttpRequest, workload: Workload) -> dict:
    position = queue_position(workload)
    quota = None
    if workload.state == State.QUEUED:
        quota = next((q for q in team_quota_use(workload.team) if q.gpu_type.id == workload.gpu_type_id), None)
    return {
        "workload": workload,
        "may_cancel": not workload.is_final and policy.may_cancel(request.user, workload),
        "position": position,
        "quota": quota,
        "timeline": list(workload.events.all()),
        "gpu_seconds": workload.gpu_seconds(timezone.now()),
        "service_address": (
            f"{workload.k8s_name}.{workload.namespace}.svc:{workload.port}"
            if workload.kind == Kind.SERVICE and workload.k8s_name and workload.namespace and workload.port
            else ""
        ),
    }


@team_page
def workload_detail(request: HttpRequest, uid: str) -> HttpResponse:
    return render(request, "jobs/workload_detail.html", _detail_context(request, _workload(request, uid)))


@team_page
def workload_live(request: HttpRequest, uid: str) -> HttpResponse:
    """The parts of the detail page that change: polled by htmx until the workload is final."""
    return render(request, "jobs/_workload_live.html", _detail_context(request, _workload(request, uid)))


@team_page
def workload_logs_partial(request: HttpRequest, uid: str) -> HttpResponse:
    workload = _workload(request, uid)
    text, problem = "", ""
    try:
        text = workload_logs(workload, tail=LOG_TAIL)
    except LogsUnavailable as exc:
        problem = str(exc)
    except Exception:  # the API server is down or refuses us: a message, never a 500
        log.warning("reading logs of %s failed", workload.uid, exc_info=True)
        problem = CLUSTER_UNREACHABLE
    return render(request, "jobs/_workload_logs.html", {"workload": workload, "text": text, "problem": problem})


def _sse(event: str, data: str) -> str:
    lines = data.split("\n") or [""]
    return f"event: {event}\n" + "".join(f"data: {line}\n" for line in lines) + "\n"


@team_page
def workload_logs_stream(request: HttpRequest, uid: str) -> HttpResponse:
    """Server-sent events: each log line as the container writes it, then `end` (or `unavailable`)."""
    workload = _workload(request, uid)

    def events() -> Iterator[str]:
        try:
            for line in follow_logs(workload, tail=0, timeout_seconds=600):
                yield _sse("line", line)
            yield _sse("end", "The log stream ended.")
        except LogsUnavailable as exc:
            yield _sse("unavailable", str(exc))
        except Exception:
            log.warning("following logs of %s failed", workload.uid, exc_info=True)
            yield _sse("unavailable", CLUSTER_UNREACHABLE)

    response = StreamingHttpResponse(events(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx and friends: pass lines through as they come
    return response


@team_page
def workload_events_partial(request: HttpRequest, uid: str) -> HttpResponse:
    workload = _workload(request, uid)
    events, problem = [], ""
    try:
        events = workload_events(workload)
    except Exception:
        log.warning("reading events of %s failed", workload.uid, exc_info=True)
        problem = CLUSTER_UNREACHABLE
    return render(request, "jobs/_workload_events.html", {"workload": workload, "events": events, "problem": problem})


@team_page
def workload_cancel_confirm(request: HttpRequest, uid: str) -> HttpResponse:
    """Without JavaScript the Cancel button leads here; with it, the browser asks in a dialog."""
    workload = _workload(request, uid)
    if workload.is_final:
        return redirect("workload_detail", uid=workload.uid)
    return render(request, "jobs/workload_cancel.html", {"workload": workload})


@team_page
@require_POST
def workload_cancel_view(request: HttpRequest, uid: str) -> HttpResponse:
    workload = _workload(request, uid)
    if not policy.may_cancel(request.user, workload):
        messages.error(request, "Only its owner or a team manager can cancel this workload.")
        return redirect("workload_detail", uid=workload.uid)
    try:
        workload_cancel(workload=workload, by=request.user)
    except WorkloadStateError as exc:
        messages.info(request, str(exc))
    else:
        messages.success(request, f"{workload.name} was cancelled; its GPUs are free again.")
    return redirect("workload_detail", uid=workload.uid)
