"""The launch form: pick an image, GPUs and limits; submit through jobs.services.submit."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from jobs.forms import LaunchForm, initial_from_workload, join_args
from jobs.models import AllowedRegistry, CatalogImage, GpuType
from jobs.selectors import (
    cluster_capacity,
    launch_outlook,
    queue_position,
    team_quota_use,
    workloads_visible_to,
)
from jobs.services.submit import workload_submit
from jobs.services.validation import SubmissionInvalid
from jobs.views_common import team_page


def _gpu_type_rows(team, gpu_types: list[GpuType]) -> list[dict]:
    """Per GPU type: free/total in the cluster and the team's quota left, for the GPU type picker."""
    capacity = cluster_capacity(gpu_types)
    quota = {use.gpu_type.id: use for use in team_quota_use(team)}
    return [{"gpu_type": t, "capacity": capacity[t.id], "quota": quota.get(t.id)} for t in gpu_types]


@team_page
def launch(request: HttpRequest) -> HttpResponse:
    acting = request.acting
    catalog = list(CatalogImage.objects.filter(enabled=True))
    gpu_types = list(GpuType.objects.filter(enabled=True))
    options = {"catalog": catalog, "gpu_types": gpu_types, "may_set_priority": acting.is_manager}
    if request.method == "POST":
        form = LaunchForm(request.POST, **options)
        if form.is_valid():
            try:
                workload = workload_submit(team=acting.team, owner=request.user, spec=form.spec())
            except SubmissionInvalid as exc:
                form.add_submission_errors(exc.errors)
            else:
                # Admission runs in a worker right after this commit; whether it will have to wait is
                # known now: the request is larger than the quota the team has left.
                outlook = launch_outlook(acting.team, workload.gpu_type, workload.gpu_count)
                position = queue_position(workload)
                if outlook.must_wait and position:
                    messages.warning(
                        request,
                        f"{workload.name} waits for your team's {workload.gpu_type.display_name} quota: "
                        f"#{position} in the queue. It starts by itself when GPUs are released.",
                    )
                else:
                    messages.success(request, f"{workload.name} was submitted.")
                return redirect("workload_detail", uid=workload.uid)
    else:
        initial = {}
        clone_of = request.GET.get("clone")
        if clone_of:
            source = workloads_visible_to(request.user).select_related("gpu_type").filter(uid=clone_of).first()
            if source is None:
                raise Http404("No such workload.")
            initial = initial_from_workload(source)
        elif catalog:
            first = catalog[0]
            initial = {
                "catalog_image": str(first.id),
                "kind": "service" if first.suits == "service" else "batch",
                "command": join_args(first.default_command),
                "args": join_args(first.default_args),
                "port": first.default_port,
            }
        if gpu_types and "gpu_type" not in initial:
            with_quota = {use.gpu_type.slug for use in team_quota_use(acting.team) if use.limit}
            initial["gpu_type"] = next((t.slug for t in gpu_types if t.slug in with_quota), gpu_types[0].slug)
        initial.setdefault("time_limit", 1)
        initial.setdefault("time_limit_unit", "hours")
        form = LaunchForm(initial=initial, **options)
    outlook = _outlook_for(acting.team, gpu_types, form)
    return render(
        request,
        "jobs/launch.html",
        {
            "form": form,
            "catalog": catalog,
            "gpu_type_rows": _gpu_type_rows(acting.team, gpu_types),
            "outlook": outlook,
            # Custom images are offered only where a registry is allowed for them.
            "registries": list(AllowedRegistry.objects.values_list("host", flat=True)),
        },
        status=400 if form.is_bound else 200,
    )


def _outlook_for(team, gpu_types: list[GpuType], form: LaunchForm):
    slug = form["gpu_type"].value()
    gpu_type = next((t for t in gpu_types if t.slug == slug), None)
    try:
        count = int(form["gpu_count"].value() or 1)
    except (TypeError, ValueError):
        count = 1
    if gpu_type is None or count < 1:
        return None
    return launch_outlook(team, gpu_type, count)


@team_page
def launch_outlook_partial(request: HttpRequest) -> HttpResponse:
    """The "will it wait?" notice, refreshed by htmx as the GPU type or count changes."""
    gpu_type = GpuType.objects.filter(slug=request.GET.get("gpu_type", ""), enabled=True).first()
    try:
        count = int(request.GET.get("gpu_count") or 1)
    except ValueError:
        count = 0
    outlook = launch_outlook(request.acting.team, gpu_type, count) if gpu_type and count >= 1 else None
    return render(request, "jobs/_launch_outlook.html", {"outlook": outlook})
