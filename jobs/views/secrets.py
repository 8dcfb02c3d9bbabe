"""The secrets page: a user's own and the team's shared secrets by name; store or replace one, delete one.

Values go in through the form and never come back out: the form's value field is never pre-filled, and
neither the page nor a message repeats it. The rules are the API's (jobs.services.secrets, jobs.policy).
"""

from __future__ import annotations

import logging

import urllib3
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from kubernetes.client.exceptions import ApiException

from jobs import policy
from jobs.forms import SecretForm
from jobs.kube.client import KubeConfigError
from jobs.services.secrets import SecretInvalid, secret_delete, secret_save, secrets_listed
from jobs.views.common import team_page

log = logging.getLogger(__name__)
# What a cluster that cannot answer raises (as api.views.cluster_call catches).
CLUSTER_ERRORS = (ApiException, KubeConfigError, urllib3.exceptions.HTTPError, OSError)
CLUSTER_DOWN = "The Kubernetes cluster could not answer; nothing was changed. Try again in a minute."


def _page(request: HttpRequest, form: SecretForm, status: int = 200) -> HttpResponse:
    team = request.acting.team
    rows = [
        {"secret": s, "may_delete": policy.may_delete_secret(request.user, s)}
        for s in secrets_listed(team=team, user=request.user)
    ]
    context = {"team": team, "rows": rows, "form": form, "is_manager": policy.may_set_priority(request.user, team)}
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
    except CLUSTER_ERRORS as exc:
        log.warning("storing a secret: the cluster could not answer (%s)", type(exc).__name__)
        form.add_error(None, CLUSTER_DOWN)
        return _page(request, form, status=503)
    messages.success(request, f"Secret {secret.name} is stored. Attach it at launch by its name.")
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
    try:
        secret_delete(secret=secret)
    except CLUSTER_ERRORS as exc:
        log.warning("deleting a secret: the cluster could not answer (%s)", type(exc).__name__)
        messages.error(request, CLUSTER_DOWN)
        return redirect("secrets")
    messages.success(request, f"Secret {name} is deleted.")
    return redirect("secrets")
