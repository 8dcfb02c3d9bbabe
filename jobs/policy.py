"""Who may see and do what: the one place the web pages, the REST API, Django admin and the service proxy ask.

Roles, relative to a workload's team: its **owner**, a **teammate** (member), a **manager**, an
**outsider** (member of other teams only), a **superuser** (the operators; usually in no team) and an
**anonymous** visitor. The rules, and why each is what it is:

- **See a workload** — members of its team, and superusers. Teammates see each other's work (that is what
  a team shares: the queue, the quota). Superusers see everything because they already do in Django admin
  and are the people a researcher sends a link to when something is wrong; the web pages used to refuse
  them what the API and admin showed. Everyone else gets a 404, never a 403, so nobody can probe which
  workloads exist.
- **Cancel** — the owner, a manager of its team, and superusers. Managers free their team's GPUs;
  operators already cancel from admin (the web pages used to refuse superusers what the API allowed).
  Plain teammates may not: it is someone else's run.
- **Set priority** — managers of the team, and superusers: priority orders the team's own queue, which
  the team's managers own (the web form used to ignore superusers while the API let them).
- **See whose usage** — everyone sees their own GPU-hours and their team's total; a manager (and a
  superuser) also sees each member's. Per-person figures are a manager's concern (the API used to show
  every member's figures to every teammate; the pages did not).
- **Open a service** (the `/w/<uid>/` proxy) — the owner; teammates only when the owner marked it
  "shared with my team". Not managers, not superusers: an open notebook is a shell running as its owner
  with the owner's files, so nobody else walks in unless the owner says so. Outsiders get a 404.
- **See a team's members** — its members (read-only for plain members: they already see each other's
  work and usage totals) and superusers. Outsiders get a 404, as for a workload.
- **Manage a team's members** (invite, change a role, remove) — the team's managers, and superusers.
  Managers answer for who spends the team's quota; plain members may not add people to it. Where the
  identity provider keeps the team, nobody changes it in the portal (identity.members says why).
- **See plain environment values** — the owner (and superusers). Teammates see the variables' names only:
  people paste tokens into environment variables; stored secrets (names only, everywhere) are the right
  place for them, but a value typed into the environment is still the owner's.
"""

from __future__ import annotations

import re

from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404

from identity.models import Membership, Role
from jobs.models import Kind, Team, Workload

NOT_FOUND = "No such workload."


def _signed_in(user) -> bool:
    return user is not None and user.is_authenticated and user.is_active


UNREAD = object()  # a role argument left out: the rule reads it


def _role(user, team_id: int) -> str | None:
    """The user's role in the team, or None for a non-member (one query)."""
    if not _signed_in(user):
        return None
    return Membership.objects.filter(user=user, team_id=team_id).values_list("role", flat=True).first()


# --- seeing ----------------------------------------------------------------------------------------
def visible_workloads(user) -> QuerySet[Workload]:
    """Every workload the user may see: their teams' (or all, for a superuser)."""
    if not _signed_in(user):
        return Workload.objects.none()
    if user.is_superuser:
        return Workload.objects.all()
    # The explicit team ids say the same as an EXISTS over memberships, in a form PostgreSQL answers from
    # the (team, -created_at) index: the newest 50 of 100,000 without sorting them all.
    # order_by(): memberships sort by team name and username, which would join both tables for nothing.
    team_ids = list(Membership.objects.filter(user=user).order_by().values_list("team_id", flat=True))
    return Workload.objects.filter(team_id__in=team_ids)


def visible_workloads_correlated(user) -> QuerySet[Workload]:
    """The same set as `visible_workloads`, as one correlated EXISTS (for use inside other subqueries)."""
    if not _signed_in(user):
        return Workload.objects.none()
    if user.is_superuser:
        return Workload.objects.all()
    return Workload.objects.filter(Exists(Membership.objects.filter(user=user, team=OuterRef("team_id"))))


def may_see(user, workload: Workload) -> bool:
    if not _signed_in(user):
        return False
    return user.is_superuser or _role(user, workload.team_id) is not None


UID_SHAPE = re.compile(r"^[0-9a-z]{1,16}$")


def workload_or_404(user, uid: str, queryset: QuerySet[Workload] | None = None) -> Workload:
    """The workload `uid` if the user may see it, else Http404 (the same answer as for one that does not exist).

    `queryset` narrows or extends the query (select_related, annotations); visibility is applied on top.
    """
    if not UID_SHAPE.match(str(uid)):
        raise Http404(NOT_FOUND)  # not a workload id at all (a NUL byte would not even reach the query)
    base = queryset if queryset is not None else Workload.objects.all()
    workload = base.filter(id__in=visible_workloads(user).values("id")).filter(uid=str(uid)[:16]).first()
    if workload is None:
        raise Http404(NOT_FOUND)
    return workload


# --- acting ----------------------------------------------------------------------------------------
def may_cancel(user, workload: Workload) -> bool:
    if not _signed_in(user):
        return False
    if user.is_superuser:
        return True
    role = _role(user, workload.team_id)
    if role is None:
        return False  # an owner who left the team: its managers and the operators stop it
    return workload.owner_id == user.id or role == Role.MANAGER


def may_delete_secret(user, secret) -> bool:
    """A stored secret (jobs.models.TeamSecret): its owner, a manager of its team, and superusers. Managers
    clean up what a member who left stored; plain teammates may not remove what others rely on."""
    if not _signed_in(user):
        return False
    if user.is_superuser or secret.owner_id == user.id:
        return True
    return _role(user, secret.team_id) == Role.MANAGER


def may_set_priority(user, team: Team | int, *, role: str | object | None = UNREAD) -> bool:
    """`role`: the user's role in the team when the caller has read it already (None: not a member)."""
    if not _signed_in(user):
        return False
    if user.is_superuser:
        return True
    team_id = team.id if isinstance(team, Team) else team
    return (_role(user, team_id) if role is UNREAD else role) == Role.MANAGER


def usage_user_ids(user, team: Team | int) -> list[int] | None:
    """Whose per-person usage in the team the user may see: None for everyone's, else a list of user ids
    (their own). Raises Http404 for a team the user cannot see at all."""
    team_id = team.id if isinstance(team, Team) else team
    if not _signed_in(user):
        raise Http404("No such team.")
    if user.is_superuser:
        return None
    role = _role(user, team_id)
    if role is None:
        raise Http404("No such team.")
    return None if role == Role.MANAGER else [user.id]


def usage_teams(user) -> QuerySet[Team]:
    """The teams whose whole usage (every member's) the user may see: all for a superuser, else those they
    manage (as `usage_user_ids` says it team by team)."""
    if not _signed_in(user):
        return Team.objects.none()
    if user.is_superuser:
        return Team.objects.all()
    return Team.objects.filter(id__in=Membership.objects.filter(user=user, role=Role.MANAGER).values("team_id"))


def may_see_usage_of(user, team: Team | int, subject_id: int) -> bool:
    try:
        allowed = usage_user_ids(user, team)
    except Http404:
        return False
    return allowed is None or subject_id in allowed


def may_open(user, workload: Workload) -> bool:
    """May pass the service proxy into this workload (see the module docstring: owner, or shared teammates)."""
    if workload.kind != Kind.SERVICE or not _signed_in(user):
        return False
    if _role(user, workload.team_id) is None:
        return False  # a former member keeps nothing, not even their own notebook's door
    return may_open_as_member(user, workload)


def may_open_as_member(user, workload: Workload) -> bool:
    """`may_open` for a user already known to be in the workload's team (list pages of the acting team):
    no query."""
    return (
        workload.kind == Kind.SERVICE
        and _signed_in(user)
        and (workload.owner_id == user.id or workload.shared_with_team)
    )


def may_share(user, workload: Workload) -> bool:
    """Only the owner decides who else walks into their service."""
    return workload.kind == Kind.SERVICE and _signed_in(user) and workload.owner_id == user.id


# --- members -------------------------------------------------------------------------------------
def may_see_members(user, team: Team | int) -> bool:
    if not _signed_in(user):
        return False
    team_id = team.id if isinstance(team, Team) else team
    return user.is_superuser or _role(user, team_id) is not None


def may_manage_members(user, team: Team | int, *, role: str | object | None = UNREAD) -> bool:
    """`role`: the user's role in the team when the caller has read it already (None: not a member)."""
    if not _signed_in(user):
        return False
    if user.is_superuser:
        return True
    team_id = team.id if isinstance(team, Team) else team
    return (_role(user, team_id) if role is UNREAD else role) == Role.MANAGER


def membership_or_404(user, membership_id: int) -> Membership:
    """A membership row in a team whose members the user may see, else Http404 (the same as none)."""
    membership = Membership.objects.select_related("team", "user").filter(id=membership_id).first()
    if membership is None or not may_see_members(user, membership.team_id):
        raise Http404("No such member.")
    return membership


# --- environment -----------------------------------------------------------------------------------
def may_see_env_values(user, workload: Workload) -> bool:
    return _signed_in(user) and (user.is_superuser or workload.owner_id == user.id)


def visible_env(user, workload: Workload) -> list[dict[str, str | None]]:
    """The workload's plain environment as `user` may see it: values, or None in place of each value."""
    show = may_see_env_values(user, workload)
    return [{"name": e["name"], "value": e["value"] if show else None} for e in workload.env or []]
