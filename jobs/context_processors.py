"""Template context every page shares: the team the signed-in user acts for, for the top bar.

Team pages set `request.acting` (jobs.views.common.team_page); other signed-in pages (API tokens, nodes,
the password form) compute it here so the top bar names the team on every page.
"""

from __future__ import annotations

from django.http import HttpRequest

from jobs.views.common import Acting, acting_for


def acting(request: HttpRequest) -> dict[str, Acting | None]:
    known = getattr(request, "acting", None)
    if known is None and getattr(request, "user", None) is not None and request.user.is_authenticated:
        known = acting_for(request)
    return {"acting": known}
