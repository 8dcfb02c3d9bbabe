"""Workload pages: the list, the detail page with its live parts, logs, events and cancelling.

Every lookup goes through jobs.policy, so a workload of another team is a 404, never a 403
that would confirm it exists.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from identity.models import SshKey
from jobs import policy
from jobs.forms import WorkloadFilterForm
from jobs.models import GpuType, Kind, State, Workload
from jobs.paging import CappedPaginator
from jobs.selectors import (
    mounts_with_use,
    queue_position,
    team_quota_use,
    with_queue_position,
    workloads_visible_to,
)
from jobs.services import opening
from jobs.services.cancel import workload_cancel
from jobs.services.errors import WorkloadStateError
from jobs.services.logs.container_logs import LogsUnavailable, follow_logs, workload_events, workload_logs
from jobs.services.logs.follow_slots import HeldStream, TooManyStreams
from jobs.services.opening import workload_share
from jobs.services.queue import estimate_history, reservations
from jobs.services.queue.aging_explained import aging_line
from jobs.services.queue.gangs import gang_ranks
from jobs.services.queue.stop_cost import min_runtime_seconds, preemptible_from
from jobs.views.common import team_page

log = logging.getLogger(__name__)

PAGE_SIZE = 25
LIST_COUNT_CAP = 1000  # rows counted past the page asked for; a longer list says "more than N"
LOG_TAIL = 500
CLUSTER_UNREACHABLE = "The cluster can't be reached right now; try again in a moment."


def _workload(request: HttpRequest, uid: str) -> Workload:
    return policy.workload_or_404(
        request.user, uid, Workload.objects.select_related("team", "owner", "gpu_type", "catalog_image")
    )


def _filtered(workloads, chosen: dict, *, user):
    """The list's workloads as the filter form chose: scope (mine by default), state, kind, GPU type."""
    if chosen.get("scope", "mine") in ("mine", ""):
        workloads = workloads.filter(owner=user)
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
    return workloads


@team_page
def workload_list(request: HttpRequest) -> HttpResponse:
    team = request.acting.team
    gpu_types = list(GpuType.objects.all())
    filters = WorkloadFilterForm(request.GET or None, gpu_types=gpu_types)
    chosen = filters.cleaned_data if filters.is_valid() else {}
    workloads = _filtered(workloads_visible_to(request.user).filter(team=team), chosen, user=request.user)
    # The page's ids first (an index walk), then those rows with details and queue positions: in one
    # query PostgreSQL computed the queue position of every matching row before sorting (0.7 s at 100k).
    ordered_ids = workloads.order_by("-created_at", "-id").values_list("id", flat=True)
    paginator = CappedPaginator(ordered_ids, PAGE_SIZE, count_queryset=workloads, cap=LIST_COUNT_CAP)
    page = paginator.get_page(request.GET.get("page"))
    ids = list(page.object_list)
    rows = with_queue_position(Workload.objects.filter(id__in=ids).select_related("owner", "gpu_type")).in_bulk()
    page.object_list = [rows[i] for i in ids if i in rows]
    return render(
        request,
        "jobs/workload_list.html",
        {"filters": filters, "page": page, "scope": chosen.get("scope") or "mine", "filtered": bool(chosen)},
    )


def resilience_facts(workload: Workload) -> dict:
    """The retry limit in force, and while it runs on borrowed GPUs, when it may be preempted (if later than now)."""
    limit = workload.retry_limit if workload.retry_limit is not None else workload.team.default_retry_limit
    free_at = None
    if workload.borrowed and workload.state == State.RUNNING:
        free_at = preemptible_from(
            workload.started_at,
            min_runtime_seconds(
                type_minimum=workload.gpu_type.min_runtime_seconds,
                cohort_minimum=workload.team.cohort.min_runtime_seconds if workload.team.cohort_id else 0,
            ),
        )
        free_at = free_at if free_at and free_at > timezone.now() else None
    return {"retry_limit": limit, "preemptible_from": free_at}


def _detail_context(request: HttpRequest, workload: Workload) -> dict:
    position = queue_position(workload)
    quota = None
    if workload.state == State.QUEUED:
        quota = next((q for q in team_quota_use(workload.team) if q.gpu_type.id == workload.gpu_type_id), None)
    return {
        "workload": workload,
        "may_cancel": not workload.is_final and policy.may_cancel(request.user, workload),
        "may_open": policy.may_open(request.user, workload),
        "may_share": policy.may_share(request.user, workload),
        "open_path": opening.open_path(workload),
        "open_link": opening.open_link(workload),
        "open_address": opening.service_origin(workload.uid) + opening.open_path(workload),
        "position": position,
        "quota": quota,
        "timeline": list(workload.events.all()),
        "promise": reservations.promise_of(workload),
        "aging_line": aging_line(workload),
        "estimate_story": estimate_history.story_of(workload),
        "gpu_seconds": workload.gpu_seconds(timezone.now()),
        "env_shown": policy.visible_env(request.user, workload),
        "mounts": mounts_with_use([workload])[workload.id],
        "ranks": gang_ranks(workload),
        "rank_numbers": range(workload.nodes) if workload.nodes > 1 else (),
        "gang_window_seconds": settings.GANG_START_WINDOW_SECONDS,
        "ssh_key_count": SshKey.objects.filter(user=request.user).count() if workload.kind == Kind.SERVICE else 0,
        "runs_sshd": workload.catalog_image is not None and workload.catalog_image.runs_sshd,
        "ssh_origin": opening.service_origin(workload.uid),
        "service_address": (
            f"{workload.k8s_name}.{workload.namespace}.svc:{workload.port}"
            if workload.kind == Kind.SERVICE and workload.k8s_name and workload.namespace and workload.port
            else ""
        ),
        **resilience_facts(workload),
    }


@team_page
def workload_detail(request: HttpRequest, uid: str) -> HttpResponse:
    return render(request, "jobs/workload_detail.html", _detail_context(request, _workload(request, uid)))


@team_page
def workload_live(request: HttpRequest, uid: str) -> HttpResponse:
    """The parts of the detail page that change: polled by htmx until the workload is final."""
    return render(request, "jobs/_workload_live.html", _detail_context(request, _workload(request, uid)))


def _rank(request: HttpRequest, workload: Workload) -> int | None:
    """A gang job's rank picked on the page (?rank=N); None (rank 0) when absent or not one of its ranks."""
    raw = request.GET.get("rank", "")
    return int(raw) if raw.isdigit() and int(raw) < workload.nodes else None


@team_page
def workload_logs_partial(request: HttpRequest, uid: str) -> HttpResponse:
    workload = _workload(request, uid)
    text, problem = "", ""
    try:
        text = workload_logs(workload, tail=LOG_TAIL, rank=_rank(request, workload))
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
    """Server-sent events: the log's last LOG_TAIL lines (those the page shows, so that nothing written in
    between is missed), then each line as the container writes it, then `end` (or `unavailable`)."""
    workload = _workload(request, uid)
    seconds = settings.LOG_FOLLOW_PAGE_SECONDS
    rank = _rank(request, workload)

    def events() -> Iterator[str]:
        try:
            for line in follow_logs(workload, tail=LOG_TAIL, timeout_seconds=seconds, rank=rank):
                yield _sse("line", line)
            yield _sse("end", "The log stream ended.")
        except LogsUnavailable as exc:
            yield _sse("unavailable", str(exc))
        except Exception:
            log.warning("following logs of %s failed", workload.uid, exc_info=True)
            yield _sse("unavailable", CLUSTER_UNREACHABLE)

    try:
        stream = HeldStream(events(), user_id=request.user.id, seconds=seconds)
    except TooManyStreams as exc:
        # The page's script shows the message and does not reconnect.
        response = StreamingHttpResponse(iter([_sse("unavailable", str(exc))]), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        return response
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx and friends: pass lines through as they come
    return response


@team_page
def workload_events_partial(request: HttpRequest, uid: str) -> HttpResponse:
    workload = _workload(request, uid)
    events, problem = [], ""
    try:
        events = workload_events(workload, rank=_rank(request, workload))
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


@login_required
def workload_open(request: HttpRequest, uid: str) -> HttpResponse:
    """An Open button's target when services have an origin of their own: the browser leaves with a
    single-use ticket for the proxy there (jobs.services.opening). Without one, the service's own path."""
    workload = _workload(request, uid)
    if not policy.may_open(request.user, workload):
        raise Http404("No such workload.")
    if not settings.PROXY_ORIGIN:
        return redirect(opening.open_path(workload))
    response = redirect(
        opening.handoff_url(user=request.user, workload=workload, next_path=request.GET.get("next", ""))
    )
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"  # the ticket is in the URL
    return response


@team_page
@require_POST
def workload_share_view(request: HttpRequest, uid: str) -> HttpResponse:
    """The owner's "Shared with my team" checkbox."""
    workload = _workload(request, uid)
    shared = request.POST.get("shared_with_team") in ("1", "on", "true")
    try:
        changed = workload_share(workload=workload, by=request.user, shared=shared)
    except WorkloadStateError as exc:
        messages.error(request, str(exc))
    else:
        if changed:
            messages.success(request, "Your teammates can open it now." if shared else "Only you can open it now.")
    return redirect("workload_detail", uid=workload.uid)
