"""The team's queue explained: per GPU type its own quota, what it borrows and lends, what waits and why;
managers set the team's sharing rules inside the team here (per-member caps, fair share)."""

from __future__ import annotations

from django.contrib import messages
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from jobs import policy
from jobs.forms import TeamSharingForm
from jobs.models import Quota
from jobs.selectors_sharing import team_queue_explained
from jobs.services.queue import borrow_share, estimate_history, reservations, share_explained
from jobs.services.queue.cohort_facts import team_fair_share
from jobs.services.queue.settings_changes import team_sharing_update
from jobs.views.common import team_page

ACCURACY_CACHE_SECONDS = 300  # a month's accuracy moves slowly; reading it costs what a month started


def _accuracy(gpu_type_ids: list[int]) -> list[estimate_history.TypeAccuracy]:
    """The estimates' accuracy per GPU type over the window, kept a few minutes per process: its cost follows
    how many workloads started in the window, which a page view should not pay each time."""
    key = f"queue:accuracy:{','.join(map(str, gpu_type_ids))}"
    rows = cache.get(key)
    if rows is None:
        rows = estimate_history.accuracy_by_gpu_type(gpu_type_ids=gpu_type_ids)
        cache.set(key, rows, ACCURACY_CACHE_SECONDS)
    return rows


@team_page
def queue(request: HttpRequest) -> HttpResponse:
    team = request.acting.team
    is_manager = policy.may_set_priority(request.user, team)
    quotas = list(Quota.objects.filter(team=team).select_related("gpu_type").order_by("gpu_type__slug"))
    form = None
    status = 200
    if is_manager:
        if request.method == "POST":
            form = TeamSharingForm(request.POST, team=team, quotas=quotas)
            if form.is_valid():
                team_sharing_update(team=team, by=request.user, **form.settings())
                messages.success(request, "The team's sharing rules are saved; admission ran again.")
                return redirect("queue")
            status = 400
        else:
            form = TeamSharingForm(team=team, quotas=quotas)
    elif request.method == "POST":
        return render(request, "403.html", status=403)
    usage = team_fair_share(team, timezone.now())  # read once: the queue's order and "my share"
    types = team_queue_explained(team, usage_hours=usage)
    promises = reservations.standing_for(w.workload.id for t in types for w in t.first_waiting)
    for t in types:
        for w in t.first_waiting:
            w.workload.promised_start = promises[w.workload.id].starts_by if w.workload.id in promises else None
    context = {
        "types": types,
        "team": team,
        "form": form,
        "is_manager": is_manager,
        "accuracy": _accuracy(sorted(q.gpu_type_id for q in quotas)),
        "accuracy_days": estimate_history.WINDOW_DAYS,
        "share": share_explained.my_share(team, user=request.user, show_names=is_manager, usage=usage),
        "borrow_turns": borrow_share.borrow_turns(team),
        "borrow_half_life": borrow_share.BORROWED_HALF_LIFE_HOURS,
    }
    return render(request, "jobs/queue.html", context, status=status)
