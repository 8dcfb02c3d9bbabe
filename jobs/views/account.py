"""Choosing the team a user acts for (users in several teams)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from jobs.selectors import current_membership
from jobs.views.common import SESSION_TEAM


@login_required
@require_POST
def team_switch(request: HttpRequest) -> HttpResponse:
    membership = current_membership(request.user, request.POST.get("team"))
    if membership is None:
        messages.error(request, "You are not in any team yet.")
    elif str(membership.team_id) != request.POST.get("team"):
        messages.error(request, "You are not a member of that team.")
    else:
        request.session[SESSION_TEAM] = membership.team_id
        messages.success(request, f"You are now acting for {membership.team.name}.")
    target = request.POST.get("next") or ""
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=False):
        target = "dashboard"
    # Pages of one workload belong to its team; after switching, the list is the safe place to land.
    if "/workloads/" in target:
        target = "workload_list"
    return redirect(target)
