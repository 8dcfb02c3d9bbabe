"""The launch form: pick an image, GPUs and limits; submit through jobs.services.submission.intake."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.db import transaction
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse

from jobs import policy
from jobs.forms import LaunchForm, initial_from_workload, join_args
from jobs.models import AllowedRegistry, CatalogImage, GpuType, Workload
from jobs.selectors import (
    cluster_capacity,
    launch_outlook,
    queue_position,
    team_quota_use,
)
from jobs.services.queue.gangs import gang_outlook
from jobs.services.storage.workspaces import workspace_mounts
from jobs.services.submission import intake_facts
from jobs.services.submission.intake import (
    copies_of,
    gather_facts,
    submission_refusals,
    workload_submit,
    workloads_submit_many,
)
from jobs.services.usage.accounting import budget_use
from jobs.services.validation import SubmissionInvalid, cuda_tuple
from jobs.views.common import team_page


def _gpu_type_rows(team, gpu_types: list[GpuType], max_cuda: dict[str, str | None]) -> list[dict]:
    """Per GPU type: free/total in the cluster, the team's quota left and the drivers' highest CUDA."""
    capacity = cluster_capacity(gpu_types)
    quota = {use.gpu_type.id: use for use in team_quota_use(team)}
    return [
        {"gpu_type": t, "capacity": capacity[t.id], "quota": quota.get(t.id), "max_cuda": max_cuda.get(t.slug) or ""}
        for t in gpu_types
    ]


def _default_gpu_type(gpu_types: list[GpuType], facts, cuda_needed: str) -> str:
    """The first GPU type the team has quota for whose drivers run the image's CUDA version."""

    def fits(slug: str) -> bool:
        known = facts.gpu_types[slug].max_cuda
        return not cuda_needed or not known or cuda_tuple(known) >= cuda_tuple(cuda_needed)

    usable = [t.slug for t in gpu_types if facts.gpu_types[t.slug].quota]
    return next((slug for slug in usable if fits(slug)), usable[0] if usable else gpu_types[0].slug)


def _launch_choices(request: HttpRequest):
    """The launch form's choices and what submission judges against (quotas, node sizes, driver CUDA
    versions, datasets, secrets): gathered once, for the form, the picker, the outlook and the submission.
    Returns (catalog, gpu_types, facts, the form's keyword arguments)."""
    catalog = list(CatalogImage.objects.filter(enabled=True))
    gpu_types = list(GpuType.objects.filter(enabled=True))
    facts = gather_facts(team=request.acting.team, user=request.user)
    options = {
        "catalog": catalog,
        "gpu_types": gpu_types,
        "may_set_priority": facts.may_set_priority,
        "datasets": sorted(name for name, allowed in facts.datasets.items() if allowed),
        "secrets": sorted(facts.secrets),
        "default_time_limit": facts.default_time_limit,
    }
    return catalog, gpu_types, facts, options


# A Launch pressed after the session ended (expired, or signed out in another tab): what was typed waits in
# the browser's session, which survives signing in, and fills the form again right after. Kept briefly, so
# that someone else signing in at that browser later does not find it.
LAUNCH_DRAFT = "launch_draft"
LAUNCH_DRAFT_SECONDS = 15 * 60


def _draft_kept_across_sign_in(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.method == "POST" and not request.user.is_authenticated:
            fields = {key: values for key, values in request.POST.lists() if key != "csrfmiddlewaretoken"}
            request.session[LAUNCH_DRAFT] = {"at": time.time(), "fields": fields}
            return redirect_to_login(request.get_full_path())
        return view(request, *args, **kwargs)

    return wrapper


def _kept_draft(request: HttpRequest) -> QueryDict | None:
    """The form a Launch sent while signed out carried, once, if it is recent."""
    draft = request.session.pop(LAUNCH_DRAFT, None)
    if not isinstance(draft, dict) or time.time() - float(draft.get("at", 0)) > LAUNCH_DRAFT_SECONDS:
        return None
    data = QueryDict(mutable=True)
    for key, values in (draft.get("fields") or {}).items():
        data.setlist(key, [str(value) for value in values])
    return data


@_draft_kept_across_sign_in
@team_page
def launch(request: HttpRequest) -> HttpResponse:
    acting = request.acting
    catalog, gpu_types, facts, options = _launch_choices(request)
    draft = _kept_draft(request) if request.method == "GET" else None
    if draft is not None:
        form = LaunchForm(draft, **options)
        form.is_valid()  # shows what is wrong with it, as a refused Launch would; nothing is submitted
        messages.info(
            request,
            "You were signed out before Launch went through, so nothing was submitted. "
            "Here is what you typed: check it and press Launch again.",
        )
    elif request.method == "POST":
        form = LaunchForm(request.POST, **options)
        if form.is_valid() and form.copy_count() > 1:
            submitted = _submit_copies(request, form)
            if submitted is not None:
                return submitted
        elif form.is_valid():
            try:
                workload = workload_submit(team=acting.team, owner=request.user, spec=form.spec(), facts=facts)
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
        cuda_needed = ""
        clone_of = request.GET.get("clone")
        if clone_of:
            source = policy.workload_or_404(request.user, clone_of, Workload.objects.select_related("gpu_type"))
            initial = initial_from_workload(source, show_env_values=policy.may_see_env_values(request.user, source))
        elif catalog:
            first = catalog[0]
            cuda_needed = first.cuda_version
            initial = {
                "catalog_image": str(first.id),
                "kind": "service" if first.suits == "service" else "batch",
                "command": join_args(first.default_command),
                "args": join_args(first.default_args),
                "port": first.default_port,
            }
        if gpu_types and "gpu_type" not in initial:
            initial["gpu_type"] = _default_gpu_type(gpu_types, facts, cuda_needed)
        # No time limit filled in: left empty, the submission gets the same default as the API and the CLI.
        initial.setdefault("time_limit_unit", "hours")
        form = LaunchForm(initial=initial, **options)
    outlook = _outlook_for(acting.team, gpu_types, form)
    return render(
        request,
        "jobs/launch.html",
        {
            "form": form,
            "catalog": catalog,
            "gpu_type_rows": _gpu_type_rows(
                acting.team, gpu_types, {slug: f.max_cuda for slug, f in facts.gpu_types.items()}
            ),
            "outlook": outlook,
            # Custom images are offered only where a registry is allowed for them.
            "registries": list(AllowedRegistry.objects.values_list("host", flat=True)),
            "budget": budget_use(acting.team),
            "mounts": workspace_mounts(team=acting.team, owner=request.user),
        },
        status=400 if form.is_bound else 200,
    )


def _submit_copies(request: HttpRequest, form: LaunchForm) -> HttpResponse | None:
    """N copies of the form's job as one sweep, judged and stored as the REST batch stores one (all or
    none, the queue caps counted for all of them); admission follows in a worker. Returns the redirect
    to the list of one's workloads, or None with the errors on the form."""
    team, copies = request.acting.team, form.copy_count()
    try:
        specs = copies_of(form.spec(), copies, base_name=form.copies_base_name())
        with transaction.atomic():
            snapshot = intake_facts.snapshot(team=team, user=request.user)
            stored = workloads_submit_many(team=team, owner=request.user, specs=specs, snapshot=snapshot)
    except SubmissionInvalid as exc:
        form.add_copies_errors(exc.errors)
        return None
    messages.success(
        request,
        f"{copies} copies were submitted, {stored[0].name} to {stored[-1].name}. Each starts when your team's "
        "quota has room.",
    )
    return redirect(f"{reverse('workload_list')}?scope=mine")


def _outlook_for(team, gpu_types: list[GpuType], form: LaunchForm):
    slug = form["gpu_type"].value()
    gpu_type = next((t for t in gpu_types if t.slug == slug), None)
    count, copies = _positive(form["gpu_count"].value()), _positive(form["copies"].value())
    if gpu_type is None or count is None:
        return None
    nodes = _positive(form["nodes"].value()) or 1 if form["kind"].value() != "service" else 1
    # A gang holds all its GPUs at once: the quota outlook is for the whole of it.
    outlook = launch_outlook(
        team, gpu_type, count * nodes, copies if form["kind"].value() != "service" and copies else 1
    )
    if nodes > 1:
        outlook = dataclasses.replace(outlook, gang=gang_outlook(gpu_type, nodes=nodes, per_node=count))
    return outlook


def _positive(value) -> int | None:
    """A count typed into the form (1 when left empty); None when it is not a positive number."""
    try:
        number = int(value or 1)
    except (TypeError, ValueError):
        return None
    return number if number >= 1 else None


@team_page
def launch_outlook_partial(request: HttpRequest) -> HttpResponse:
    """The "will it wait?" notice, refreshed by htmx as the form changes.

    POST: the whole form, as Launch would send it. It is judged by the submission's own rules first
    (`intake.submission_refusals`, the same call Launch makes), so the notice never says "fits" about
    something Launch would refuse (an image whose CUDA the GPU type's drivers cannot run, a name taken
    by the rules, a secret that cannot be used...); the quota outlook follows only when nothing is wrong.
    GET: the quota outlook alone, from gpu_type, gpu_count, copies and kind."""
    if request.method == "POST":
        refusals, outlook = _judged_outlook(request)
        return render(request, "jobs/_launch_outlook.html", {"outlook": outlook, "refusals": refusals})
    gpu_type = GpuType.objects.filter(slug=request.GET.get("gpu_type", ""), enabled=True).first()
    count, copies = _positive(request.GET.get("gpu_count")), _positive(request.GET.get("copies"))
    if request.GET.get("kind") == "service" or copies is None:
        copies = 1  # a service runs once; a bad count is the form's to refuse
    outlook = launch_outlook(request.acting.team, gpu_type, count, copies) if gpu_type and count else None
    return render(request, "jobs/_launch_outlook.html", {"outlook": outlook})


def _judged_outlook(request: HttpRequest) -> tuple[list[str], object]:
    """The launch form as posted, judged as Launch judges it: (what would be refused, each as
    "Field: message"; the quota outlook, None when something would be refused)."""
    _, gpu_types, facts, options = _launch_choices(request)
    form = LaunchForm(request.POST, **options)
    if form.is_valid():
        spec = form.spec()
        if form.copy_count() > 1:  # the copies differ only in name and index: the longest name speaks for all
            spec = copies_of(spec, form.copy_count(), base_name=form.copies_base_name())[-1]
        form.add_submission_errors(submission_refusals(team=request.acting.team, spec=spec, facts=facts))
    refusals = [
        f"{form[name].label if name in form.fields else 'Launch'}: {message}"
        for name, messages in form.errors.items()
        for message in messages
    ] + [f"Environment: {message}" for message in form.env_errors]
    return refusals, None if refusals else _outlook_for(request.acting.team, gpu_types, form)
