"""A team's managers keep its members: invite an existing user by username, change a member's role,
remove a member. The web page (jobs.views.members) and the API call these; who may call them is
jobs.policy's `may_manage_members`.

Every change is written to identity.models.MembershipChange with who made it (identity.signals records
saves and deletes of memberships; `changes_by` names the person). The rules, and why:

- Teams the identity provider keeps (identity.teams.membership_edited_by_hand is false) change only
  through the provider: the next sign-in would silently undo an edit made here.
- A team always keeps at least one manager: demoting or removing the last one would leave nobody who can
  manage its members, its priorities or its shared secrets. The team's memberships are locked while the
  rule is checked, so two managers demoting each other at the same moment cannot both succeed.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, models, transaction

from identity.models import Membership, MembershipChange, Role
from identity.signals import changes_by
from identity.teams import membership_edited_by_hand

# A team is jobs.Team: identity sits below jobs and never imports it (its models name it "jobs.Team").
Team = models.Model

KEPT_BY_PROVIDER = (
    "The identity provider keeps this team's members: they follow the groups people are in when they sign "
    "in, so a change made here would be undone at the next sign-in. Ask whoever runs your groups."
)
NO_SUCH_USER = "No portal user is called {username}. They must sign in to the portal once first."
ALREADY_MEMBER = "{username} is already a member of {team}."
LAST_MANAGER = "{team} needs at least one manager: make someone else a manager first."
NOT_A_ROLE = "Choose member or manager."


class MembersInvalid(Exception):
    """A change refused, with the field it is about (None: the whole request) and a code for the API:
    "invalid" (bad input), "already_member", "last_manager", "kept_by_provider" or "gone"."""

    def __init__(self, field: str | None, message: str, code: str = "invalid") -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.code = code


def _editable(team: Team) -> None:
    if not membership_edited_by_hand(team.id):
        raise MembersInvalid(None, KEPT_BY_PROVIDER, "kept_by_provider")


def _role(role: str) -> str:
    if role not in Role.values:
        raise MembersInvalid("role", NOT_A_ROLE)
    return role


def _locked(membership: Membership) -> tuple[Membership, set[int]]:
    """The membership read again, and the ids of its team's managers, with all of the team's memberships
    locked (in id order, so two changes to one team wait for each other instead of deadlocking)."""
    rows = list(Membership.objects.select_for_update().filter(team_id=membership.team_id).order_by("id"))
    current = next((row for row in rows if row.id == membership.id), None)
    if current is None:
        raise MembersInvalid(None, "That person is no longer a member.", "gone")
    current.team, current.user = membership.team, membership.user
    return current, {row.id for row in rows if row.role == Role.MANAGER}


def _keep_a_manager(membership: Membership, managers: set[int]) -> None:
    if membership.role == Role.MANAGER and managers <= {membership.id}:
        raise MembersInvalid("role", LAST_MANAGER.format(team=membership.team.name), "last_manager")


@transaction.atomic
def member_invite(*, team: Team, username: str, role: str = Role.MEMBER, by: Any) -> Membership:
    """Add an existing, active user to the team."""
    _editable(team)
    role = _role(role)
    username = (username or "").strip()
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise MembersInvalid("username", NO_SUCH_USER.format(username=username or "(nobody)"))
    if Membership.objects.filter(team=team, user=user).exists():
        raise MembersInvalid("username", ALREADY_MEMBER.format(username=username, team=team.name), "already_member")
    try:
        with transaction.atomic(), changes_by(by):
            return Membership.objects.create(team=team, user=user, role=role)
    except IntegrityError as exc:  # another manager added them a moment ago
        message = ALREADY_MEMBER.format(username=username, team=team.name)
        raise MembersInvalid("username", message, "already_member") from exc


@transaction.atomic
def member_role_set(*, membership: Membership, role: str, by: Any) -> Membership:
    """Make a member a manager or a manager a member (never the last manager)."""
    _editable(membership.team)
    role = _role(role)
    membership, managers = _locked(membership)
    if membership.role == role:
        return membership
    _keep_a_manager(membership, managers)
    membership.role = role
    with changes_by(by):
        membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def member_remove(*, membership: Membership, by: Any) -> None:
    """Take someone out of the team (never its last manager). Their workloads stay the team's."""
    _editable(membership.team)
    membership, managers = _locked(membership)
    _keep_a_manager(membership, managers)
    with changes_by(by):
        membership.delete()


def members_history(team: Team, limit: int = 50) -> list[MembershipChange]:
    """The newest changes to the team's members: who, by whom, when, old and new role."""
    return list(MembershipChange.objects.filter(team=team).order_by("-at", "-id")[:limit])
