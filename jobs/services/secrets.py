"""Stored secrets: a user's (or, shared with the team, a manager's) named values for their workloads.

The value goes straight into a Kubernetes Secret in the team namespace and nowhere else: not the
database, not a workload's stored spec, not the Job or Deployment (pods reference it with secretKeyRef
and a projected volume), not a log line (errors are logged by status code only).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from kubernetes.client.exceptions import ApiException

from jobs.kube import client as kube
from jobs.kube import names, objects
from jobs.models import Membership, Role, Team, TeamSecret
from jobs.services.object_creation import namespace_wait_ready
from jobs.services.validation import NAME_RE, SubmissionInvalid

log = logging.getLogger(__name__)
MAX_SECRET_NAME = 40
MAX_SECRET_BYTES = 64 * 1024


class SecretInvalid(SubmissionInvalid):
    """A secret could not be stored; `errors` names each field."""


def secrets_available(*, team: Team, user) -> dict[str, str]:
    """Secret names a user may use in this team -> their Kubernetes Secret: theirs and the team's."""
    rows = TeamSecret.objects.filter(team=team).filter(shared=True) | TeamSecret.objects.filter(team=team, owner=user)
    return dict(rows.values_list("name", "k8s_name"))


def secrets_listed(*, team: Team, user):
    """The secrets a user sees: their own and the team's shared ones (names only, of course)."""
    return (
        (TeamSecret.objects.filter(team=team, shared=True) | TeamSecret.objects.filter(team=team, owner=user))
        .select_related("owner")
        .order_by("name")
    )


def _check(*, team: Team, user, name, value, shared) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if not isinstance(name, str) or not name:
        errors["name"] = ["Give the secret a name."]
    elif len(name) > MAX_SECRET_NAME or not NAME_RE.match(name):
        errors["name"] = [
            f"At most {MAX_SECRET_NAME} lowercase letters, digits and '-', starting with a letter, not ending with '-'."
        ]
    if not isinstance(value, str) or not value:
        errors["value"] = ["Give the secret's value."]
    elif len(value.encode()) > MAX_SECRET_BYTES or "\x00" in value:
        errors["value"] = [f"At most {MAX_SECRET_BYTES // 1024} KiB of text without NUL characters."]
    if not isinstance(shared, bool):
        errors["shared"] = ["true or false."]
    elif shared and not (
        user.is_superuser or Membership.objects.filter(user=user, team=team, role=Role.MANAGER).exists()
    ):
        errors["shared"] = ["Only team managers can store secrets shared with the team."]
    if "name" not in errors:
        # A personal secret and a shared one of the same name would make `name` in a submission ambiguous.
        other = TeamSecret.objects.filter(team=team, name=name)
        other = other.exclude(shared=True) if shared else other.filter(shared=True)
        if shared:
            if other.exists():
                errors["name"] = [f"A member already has a personal secret named {name}; choose another name."]
        elif other.exists():
            errors["name"] = [f"The team already shares a secret named {name}; choose another name."]
    return errors


def secret_save(*, team: Team, user, name, value, shared=False) -> TeamSecret:
    """Store (or replace) a secret. Raises SecretInvalid naming the field; nothing is written then."""
    if not user.is_superuser and not Membership.objects.filter(user=user, team=team).exists():
        raise SecretInvalid({"team": ["You are not a member of this team."]})
    errors = _check(team=team, user=user, name=name, value=value, shared=shared)
    if errors:
        raise SecretInvalid(errors)
    k8s_name = names.secret_object_name(name, username=user.get_username(), shared=shared)
    # The namespace is the provisioner's to make: ask for it and wait until this identity may write there.
    namespace = team.namespace
    namespace_wait_ready(team, group="", resource="secrets")
    body = objects.make_secret(namespace=namespace, name=k8s_name, value=value, team_slug=team.slug,
                               instance=_instance())  # fmt: skip
    core = kube.core()
    try:
        try:
            core.create_namespaced_secret(namespace, body, _request_timeout=kube.timeout())
        except ApiException as exc:
            if exc.status != 409:
                raise
            core.replace_namespaced_secret(k8s_name, namespace, body, _request_timeout=kube.timeout())
    except ApiException as exc:
        # Status only: the request body (the value) must never reach a log line.
        log.warning("secret %s in %s: Kubernetes answered %s", k8s_name, namespace, exc.status)
        raise
    with transaction.atomic():
        secret, created = TeamSecret.objects.get_or_create(
            team=team, k8s_name=k8s_name, defaults={"owner": user, "name": name, "shared": shared}
        )
        if not created:
            TeamSecret.objects.filter(id=secret.id).update(updated_at=timezone.now())
    log.info("secret %s stored for %s in %s", name, user.get_username(), team.slug)
    return secret


def secret_delete(*, secret: TeamSecret) -> None:
    try:
        kube.core().delete_namespaced_secret(secret.k8s_name, secret.team.namespace, _request_timeout=kube.timeout())
    except ApiException as exc:
        if exc.status != 404:
            raise
    secret.delete()


def _instance() -> str:
    return settings.PORTAL_INSTANCE
