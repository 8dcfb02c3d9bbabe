"""The secrets page: a user's own and the team's shared secrets by name; store or replace one, delete one.

Values go in through the form and never come back out: the form's value field is never pre-filled, and
neither the page nor a message repeats it. The rules are the API's (jobs.services.storage.secrets, jobs.policy).
A store is written by the engine; the page waits briefly for it and otherwise shows it "being written"
(refreshing itself until the engine has answered).
"""

from __future__ import annotations

import logging

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from jobs import policy
from jobs.forms import SecretForm
from jobs.models import SecretState
from jobs.services.storage.secrets import (
    SecretInvalid,
    SecretNotWritable,
    secret_delete,
    secret_save,
    secret_wait_written,
    secrets_listed,
)
from jobs.views.common import team_page

log = logging.getLogger(__name__)
NOT_CONFIGURED = (
    "The portal cannot store secrets right now (it has no key to seal them); nothing was stored. Tell an admin."
)


def _page(request: HttpRequest, form: SecretForm, status: int = 200) -> HttpResponse:
    team = request.acting.team
    rows = [
        {"secret": s, "may_delete": policy.may_delete_secret(request.user, s)}
        for s in secrets_listed(team=team, user=request.user)
    ]
    context = {
        "team": team,
        "rows": rows,
        "form": form,
        "is_manager": policy.may_set_priority(request.user, team),
        "writing": any(row["secret"].state == SecretState.PENDING for row in rows),
    }
    return render(request, "jobs/secrets.html", context, status=status)


@team_page
def secrets_page(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _page(request, SecretForm())
    form = SecretForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    data = form.cleaned_data
    try:
        secret = secret_save(team=request.acting.team, user=request.user, name=data["name"], value=data["value"],
                             shared=data["shared"])  # fmt: skip
    except SecretInvalid as exc:
        for field, errors in exc.errors.items():
            for error in errors:
                form.add_error(field if field in form.fields else None, error)
        return _page(request, form, status=400)
    except SecretNotWritable as exc:
        log.error("storing a secret: %s", exc)
        form.add_error(None, NOT_CONFIGURED)
        return _page(request, form, status=503)
    secret = secret_wait_written(secret)
    if secret.state == SecretState.READY:
        messages.success(request, f"Secret {secret.name} is stored. Attach it at launch by its name.")
    elif secret.state == SecretState.PENDING:
        messages.info(
            request,
            f"Secret {secret.name} is being written; a launch that uses it waits until it is. "
            "This page shows when it is ready.",
        )
    else:
        messages.error(request, f"Secret {secret.name} could not be stored: {secret.message}")
    return redirect("secrets")


@team_page
@require_POST
def secret_delete_view(request: HttpRequest, name: str) -> HttpResponse:
    team = request.acting.team
    secret = secrets_listed(team=team, user=request.user).filter(name=name).first()
    if secret is None:
        raise Http404("No such secret among yours.")  # a teammate's personal secret is not theirs to know of
    if not policy.may_delete_secret(request.user, secret):
        messages.error(request, "Only its owner or a team manager can delete this secret.")
        return redirect("secrets")
    secret_delete(secret=secret)
    messages.success(request, f"Secret {name} is deleted.")
    return redirect("secrets")
