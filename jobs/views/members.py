"""The members page: who is in the acting team, and, for its managers, invite by username, change a
role, remove. Every change shows in the page's history. The rules are identity.members' and
jobs.policy's (the API's too)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from identity.members import (
    KEPT_BY_PROVIDER,
    MembersInvalid,
    member_invite,
    member_remove,
    member_role_set,
    members_history,
)
from identity.models import Membership, Role
from identity.teams import membership_edited_by_hand
from jobs import policy
from jobs.forms import MemberInviteForm, MemberRoleForm
from jobs.views.common import team_page


def _page(request: HttpRequest, form: MemberInviteForm | None = None, status: int = 200) -> HttpResponse:
    team = request.acting.team
    manages = policy.may_manage_members(request.user, team, role=request.acting.membership.role)
    editable = membership_edited_by_hand(team.id)
    members = Membership.objects.filter(team=team).select_related("user").order_by("user__username")
    context = {
        "team": team,
        "members": members,
        "manages": manages and editable,
        "kept_by_provider": not editable,
        "form": form or MemberInviteForm(),
        "roles": Role.choices,
        "history": members_history(team),
    }
    return render(request, "jobs/members.html", context, status=status)


@team_page
def members_page(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _page(request)
    if not policy.may_manage_members(request.user, request.acting.team, role=request.acting.membership.role):
        raise Http404("No such page.")  # nothing for a plain member to post here
    if not membership_edited_by_hand(request.acting.team.id):
        messages.error(request, KEPT_BY_PROVIDER)  # the page says why, beside the read-only list
        return _page(request, status=400)
    form = MemberInviteForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    try:
        added = member_invite(team=request.acting.team, username=form.cleaned_data["username"],
                              role=form.cleaned_data["role"], by=request.user)  # fmt: skip
    except MembersInvalid as exc:
        form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        return _page(request, form, status=400)
    messages.success(request, f"{added.user.get_username()} is now a {added.role} of {added.team.name}.")
    return redirect("members")


def _managed(request: HttpRequest, membership_id: int) -> Membership:
    """The membership, if the user may manage its team (404 for outsiders, as for the team itself)."""
    membership = policy.membership_or_404(request.user, membership_id)
    if not policy.may_manage_members(request.user, membership.team_id):
        raise Http404("No such member.")
    return membership


def _refused(request: HttpRequest, exc: MembersInvalid) -> HttpResponse:
    messages.error(request, exc.message)
    return redirect("members")


@team_page
@require_POST
def member_role_view(request: HttpRequest, membership_id: int) -> HttpResponse:
    membership = _managed(request, membership_id)
    form = MemberRoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose member or manager.")
        return redirect("members")
    try:
        changed = member_role_set(membership=membership, role=form.cleaned_data["role"], by=request.user)
    except MembersInvalid as exc:
        return _refused(request, exc)
    messages.success(request, f"{changed.user.get_username()} is now a {changed.role} of {changed.team.name}.")
    return redirect("members")


@team_page
@require_POST
def member_remove_view(request: HttpRequest, membership_id: int) -> HttpResponse:
    membership = _managed(request, membership_id)
    try:
        member_remove(membership=membership, by=request.user)
    except MembersInvalid as exc:
        return _refused(request, exc)
    name, team = membership.user.get_username(), membership.team.name
    messages.success(request, f"{name} is no longer a member of {team}.")
    if membership.user_id == request.user.id:
        return redirect("dashboard")  # they left the team; its members page is no longer theirs
    return redirect("members")
