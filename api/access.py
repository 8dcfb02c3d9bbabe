"""Who may see and do what through the API, on top of the engine's selectors.

The rules themselves (who sees, cancels, sets priority, sees whose usage) are `jobs.policy`'s; this module
turns them into DRF answers and resolves teams named in requests. Superusers see all teams.
"""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework.exceptions import NotFound, PermissionDenied

from api.errors import Invalid
from jobs import policy
from jobs.models import Team, Workload
from jobs.selectors import teams_for
from jobs.services.submission import intake_facts
from jobs.services.submission.intake_facts import Snapshot


def visible_teams(user) -> QuerySet[Team]:
    if user.is_superuser:
        return Team.objects.all()
    return teams_for(user)


def visible_workloads(user) -> QuerySet[Workload]:
    return policy.visible_workloads(user)


def team_by_slug(user, slug: str) -> Team:
    """A team named in the URL: 404 unless the caller belongs to it."""
    team = visible_teams(user).filter(slug=slug).first()
    if team is None:
        raise NotFound("No such team among yours.")
    return team


def storable(text: str) -> bool:
    """Text PostgreSQL can hold or compare: no NUL, and valid UTF-8 (no lone surrogate)."""
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def resolve_team(user, slug: str | None) -> Team:
    """The team a request is about: the one named, else the caller's only team (400 naming `team`)."""
    if slug:
        if not isinstance(slug, str):
            raise Invalid({"team": ["Give the team's slug as text."]})
        # No slug holds a NUL or a lone surrogate, and PostgreSQL cannot even compare them: the same answer.
        team = None if not storable(slug) else visible_teams(user).filter(slug=slug).first()
        if team is None:
            raise Invalid({"team": [f"You are not a member of a team {slug!r}."]})
        return team
    mine = list(teams_for(user)[:2])
    if len(mine) == 1:
        return mine[0]
    if not mine:
        raise Invalid({"team": ["You are not a member of any team; ask an admin to add you to one."]})
    raise Invalid({"team": ["You belong to several teams: say which one (its slug)."]})


def resolve_team_to_submit(user, slug: str | None) -> tuple[Team, Snapshot]:
    """`resolve_team` (same rules, same answers) with the facts a submission to the team is judged
    against (`intake_facts`), found together in one statement."""
    if slug:
        if not isinstance(slug, str):
            raise Invalid({"team": ["Give the team's slug as text."]})
        found = intake_facts.submission_teams(user=user, slug=slug, every_team=user.is_superuser, limit=1)
        if not found:
            raise Invalid({"team": [f"You are not a member of a team {slug!r}."]})
        return found[0]
    mine = intake_facts.submission_teams(user=user, slug=None) if user.is_authenticated else []
    if len(mine) == 1:
        return mine[0]
    if not mine:
        raise Invalid({"team": ["You are not a member of any team; ask an admin to add you to one."]})
    raise Invalid({"team": ["You belong to several teams: say which one (its slug)."]})


def check_may_cancel(user, workload: Workload) -> None:
    if policy.may_cancel(user, workload):
        return
    raise PermissionDenied("Only the workload's owner or a manager of its team can cancel it.")
