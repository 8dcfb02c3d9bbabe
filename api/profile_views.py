"""The profile page where people create, list and revoke their API tokens (server-rendered). The SSH key
pages beside it are identity's (identity/profile_views.py)."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from api.models import ApiToken
from api.tokens import TooManyTokens, token_create, token_revoke

# Each rendering of the create form carries a one-time mark; the marks that made a token are kept in the
# session (the last few), so that the same form sent again makes no second token.
CREATE_FORMS_USED = "api_token_create_forms_used"
CREATE_FORMS_KEPT = 20


@never_cache  # the page may show a new token in clear: no browser or proxy may keep a copy
@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    issued = None
    error = ""
    already = ""
    name = ""
    if request.method == "POST":
        name = (request.POST.get("name") or "").strip()
        once = request.POST.get("once") or ""
        made = request.session.get(CREATE_FORMS_USED, {})
        if once and once in made:
            # The same page's form again: reloaded after creating (the browser sends it once more), Back and
            # Create, a double click. The token it made exists; its secret was shown that once.
            already = made[once]
        elif not name:
            error = "Give the token a name, e.g. the machine or script that will use it."
        elif len(name) > 100:
            error = "At most 100 characters."
        elif "\x00" in name:  # PostgreSQL stores no NUL in text: refused here, not a 500 there
            error = "The name may not contain NUL characters."
        else:
            try:
                issued = token_create(user=request.user, name=name)
            except TooManyTokens as exc:
                error = str(exc)
            else:
                if once:
                    made[once] = name
                    request.session[CREATE_FORMS_USED] = dict(list(made.items())[-CREATE_FORMS_KEPT:])
    return render(
        request,
        "api/tokens.html",
        {
            "tokens": ApiToken.objects.filter(user=request.user, revoked_at=None),
            "default_days": settings.API_TOKEN_DEFAULT_DAYS,
            "issued": issued,
            "error": error,
            "already": already,
            "name": name if error else "",
            "once": secrets.token_urlsafe(16),
            "site_url": request.build_absolute_uri("/").rstrip("/"),
        },
        status=400 if error else 200,
    )


@login_required
@require_POST
def revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, id=token_id, user=request.user)
    if token_revoke(token=token, by=request.user):
        messages.success(request, f"Token “{token.name}” revoked; it no longer works.")
    return redirect("api-tokens")
