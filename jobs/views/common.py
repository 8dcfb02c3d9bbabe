"""What every signed-in page shares: the team the user acts for, kept in the session."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from identity.models import Membership, Role
from jobs.models import Team
from jobs.selectors import memberships_of

SESSION_TEAM = "gpuportal.team_id"


@dataclass(frozen=True)
class Acting:
    """The membership a request acts through, and every team the user could switch to."""

    membership: Membership
    memberships: list[Membership]

    @property
    def team(self) -> Team:
        return self.membership.team

    @property
    def is_manager(self) -> bool:
        return self.membership.role == Role.MANAGER


def acting_for(request: HttpRequest) -> Acting | None:
    memberships = memberships_of(request.user)
    if not memberships:
        return None
    wanted = request.session.get(SESSION_TEAM)
    chosen = next((m for m in memberships if m.team_id == wanted), memberships[0])
    return Acting(membership=chosen, memberships=memberships)


def team_page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Sign-in required, and a team: `request.acting` is set; someone in no team sees how to get one."""

    @login_required
    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        acting = acting_for(request)
        if acting is None:
            return render(request, "jobs/no_team.html", status=403)
        request.acting = acting
        return view(request, *args, **kwargs)

    return wrapper
