"""Stored secrets: a user's (or, shared with the team, a manager's) named values for their workloads.

The web never writes into the cluster (its identity may not): `secret_save` seals the value to the
engine's public key (portal/sealing.py) and hands only the sealed text to the engine's worker through
Celery; `secret_write` runs there, opens it and writes the Kubernetes Secret in the team namespace. The
plaintext is never in the database, the broker, a workload's stored spec, the Job or Deployment (pods
reference it with secretKeyRef and a projected volume) or a log line (errors are logged by status only).

Each store is a new `version` of the row, PENDING until the engine has written exactly that version
(then READY, or FAILED with the reason). The engine writes under the row's lock, so of two quick
replaces the later value always wins. A launch that needs a secret still PENDING waits for it
(jobs/services/cluster/object_creation.py); one whose secret FAILED is refused, naming it.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from kubernetes.client.exceptions import ApiException

from identity.models import Membership, Role
from jobs.kube import client as kube
from jobs.kube import names, objects
from jobs.models import SecretState, Team, TeamSecret
from jobs.services import dispatch
from jobs.services.provisioning import namespace_wait_ready
from jobs.services.validation import NAME_RE, SubmissionInvalid
from portal import sealing

log = logging.getLogger(__name__)
MAX_SECRET_NAME = 40
MAX_SECRET_BYTES = 64 * 1024
WAIT_POLL_SECONDS = 0.1


class SecretInvalid(SubmissionInvalid):
    """A secret could not be stored; `errors` names each field."""


class SecretNotWritable(Exception):
    """The portal cannot seal a value for the engine (it has no public key): a configuration fault."""


def _visible(team: Team):
    return TeamSecret.objects.filter(team=team).exclude(state=SecretState.DELETING)


def secrets_available(*, team: Team, user) -> dict[str, str]:
    """Secret names a user may use in this team -> their Kubernetes Secret: theirs and the team's."""
    rows = _visible(team).filter(shared=True) | _visible(team).filter(owner=user)
    return dict(rows.values_list("name", "k8s_name"))


def secrets_listed(*, team: Team, user):
    """The secrets a user sees: their own and the team's shared ones (names only, of course)."""
    return (
        (_visible(team).filter(shared=True) | _visible(team).filter(owner=user))
        .select_related("owner")
        .order_by("name")
    )


def _name_problem(name) -> str | None:
    if not isinstance(name, str) or not name:
        return "Give the secret a name."
    if len(name) > MAX_SECRET_NAME or not NAME_RE.match(name):
        return (
            f"At most {MAX_SECRET_NAME} lowercase letters, digits and '-', starting with a letter, not ending with '-'."
        )
    return None


def _value_problem(value) -> str | None:
    if not isinstance(value, str) or not value:
        return "Give the secret's value."
    try:
        size = len(value.encode())
    except UnicodeEncodeError:  # a lone surrogate ("\ud800" in JSON): no UTF-8 text, nothing to seal
        return "Text only: this value holds a lone surrogate (\\ud800-\\udfff), which is no character."
    if size > MAX_SECRET_BYTES or "\x00" in value:
        return f"At most {MAX_SECRET_BYTES // 1024} KiB of text without NUL characters."
    return None


def _shared_problem(*, team: Team, user, shared) -> str | None:
    if not isinstance(shared, bool):
        return "true or false."
    if shared and not (
        user.is_superuser or Membership.objects.filter(user=user, team=team, role=Role.MANAGER).exists()
    ):
        return "Only team managers can store secrets shared with the team."
    return None


def _name_clash(*, team: Team, name: str, shared: bool) -> str | None:
    """A personal secret and a shared one of the same name would make `name` in a submission ambiguous."""
    other = _visible(team).filter(name=name)
    if shared:
        if other.exclude(shared=True).exists():
            return f"A member already has a personal secret named {name}; choose another name."
    elif other.filter(shared=True).exists():
        return f"The team already shares a secret named {name}; choose another name."
    return None


def _check(*, team: Team, user, name, value, shared) -> dict[str, list[str]]:
    problems = {
        "name": _name_problem(name),
        "value": _value_problem(value),
        "shared": _shared_problem(team=team, user=user, shared=shared),
    }
    errors = {field: [problem] for field, problem in problems.items() if problem is not None}
    if "name" not in errors and (clash := _name_clash(team=team, name=name, shared=shared)) is not None:
        errors["name"] = [clash]
    return errors


def secret_save(*, team: Team, user, name, value, shared=False) -> TeamSecret:
    """Store (or replace) a secret: a new version, PENDING until the engine has written it.

    Raises SecretInvalid naming the field (nothing is stored then), SecretNotWritable when this process
    cannot seal. Returns at once; `secret_wait_written` waits for the engine's answer."""
    if not user.is_superuser and not Membership.objects.filter(user=user, team=team).exists():
        raise SecretInvalid({"team": ["You are not a member of this team."]})
    errors = _check(team=team, user=user, name=name, value=value, shared=shared)
    if errors:
        raise SecretInvalid(errors)
    try:
        sealed = sealing.seal(value)
    except sealing.SealError as exc:
        raise SecretNotWritable(str(exc)) from exc
    now = timezone.now()
    with transaction.atomic():
        secret = _stored(team=team, user=user, name=name, shared=shared)
        if secret is None:
            # New: its Kubernetes name comes from the owner's id (or the team, shared), never a hash two
            # usernames could share. get_or_create: the same store racing itself makes one row.
            k8s_name = names.secret_object_name(name, user_id=user.pk, shared=shared)
            secret, created = TeamSecret.objects.select_for_update().get_or_create(
                team=team,
                k8s_name=k8s_name,
                defaults={"owner": user, "name": name, "shared": shared, "updated_at": now},
            )
            if not created and not _is_theirs(secret, user=user, name=name, shared=shared):
                # Only a name function gone wrong gets here: never write into another person's Secret.
                log.error("secret %s in %s: its Kubernetes name %s is another's", name, team.slug, k8s_name)
                raise SecretInvalid({"name": [f"The name {name} cannot be used; choose another name."]})
        else:
            created = False
        if not created:
            revived = secret.state == SecretState.DELETING
            secret.version += 1
            secret.state, secret.message, secret.updated_at = SecretState.PENDING, "", now
            if revived:  # deleted a moment ago and stored again: it is the new storer's now
                secret.owner, secret.created_at = user, now
            secret.save(update_fields=["version", "state", "message", "updated_at", "owner", "created_at"])
        secret_id, version, k8s_name = secret.id, secret.version, secret.k8s_name
        transaction.on_commit(lambda: _hand_to_engine(secret_id, version, sealed, k8s_name))
    log.info("secret %s (version %s) sealed for %s in %s", name, version, user.get_username(), team.slug)
    return secret


def _stored(*, team: Team, user, name: str, shared: bool) -> TeamSecret | None:
    """The row this store replaces, locked: the team's shared secret of that name, or this person's own
    (whatever its Kubernetes name: secrets stored under an older naming keep theirs)."""
    rows = TeamSecret.objects.select_for_update().filter(team=team, name=name, shared=shared)
    return (rows if shared else rows.filter(owner=user)).order_by("id").first()


def _is_theirs(secret: TeamSecret, *, user, name: str, shared: bool) -> bool:
    if secret.name != name or secret.shared != shared:
        return False
    return shared or secret.owner_id == user.pk


def _hand_to_engine(secret_id: int, version: int, sealed: str, k8s_name: str) -> None:
    dispatch.write_secret(secret_id, version, sealed, k8s_name)


def secret_wait_written(secret: TeamSecret, *, timeout: float | None = None) -> TeamSecret:
    """The secret once the engine has answered for this version (READY or FAILED), or still PENDING
    after `timeout` seconds (PORTAL_SECRET_CONFIRM_SECONDS by default)."""
    limit = settings.PORTAL_SECRET_CONFIRM_SECONDS if timeout is None else timeout
    deadline = time.monotonic() + limit
    version = secret.version
    while True:
        row = TeamSecret.objects.filter(id=secret.id).values("state", "version", "message").first()
        if row is None or row["version"] != version or row["state"] != SecretState.PENDING:
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(WAIT_POLL_SECONDS)
    if row is not None and row["version"] == version:
        secret.state, secret.message = row["state"], row["message"]
    return secret


def secret_delete(*, secret: TeamSecret) -> None:
    """Forget a secret now (no launch may use it from here on); the engine deletes its Kubernetes Secret."""
    with transaction.atomic():
        updated = TeamSecret.objects.filter(id=secret.id).exclude(state=SecretState.DELETING)
        if not updated.update(state=SecretState.DELETING, version=F("version") + 1, updated_at=timezone.now()):
            return
        version = TeamSecret.objects.values_list("version", flat=True).get(id=secret.id)
        secret_id, k8s_name = secret.id, secret.k8s_name
        transaction.on_commit(lambda: _remove_in_engine(secret_id, version, k8s_name))


def _remove_in_engine(secret_id: int, version: int, k8s_name: str) -> None:
    dispatch.remove_secret(secret_id, version, k8s_name)


def secrets_unusable(*, team: Team, k8s_names) -> dict[str, str]:
    """Of the secrets a submission names, those the engine could not write: name -> why."""
    k8s_names = list(k8s_names)
    if not k8s_names:  # most submissions name none: no query to build
        return {}
    rows = _visible(team).filter(k8s_name__in=k8s_names, state=SecretState.FAILED)
    return {row.name: row.message for row in rows}


# --- the engine's side (Celery tasks in the worker; the only place a value is opened) -------------------


def _still_to_write(secret: TeamSecret | None, version: int) -> bool:
    """Is `version` still the secret's version waiting to be written?"""
    return secret is not None and secret.version == version and secret.state == SecretState.PENDING


def secret_write(*, secret_id: int, version: int, sealed: str, k8s_name: str | None = None) -> str:
    """Open a sealed value and write its Kubernetes Secret, if `version` is still the one to write.

    Returns what happened ("written", "superseded", "failed"). Transient API failures propagate (the task
    retries); a value this engine cannot open, or a Secret Kubernetes refuses, marks the version FAILED."""
    secret = TeamSecret.objects.select_related("team").filter(id=secret_id).first()
    if secret is not None and k8s_name is not None and secret.k8s_name != k8s_name:
        log.warning("secret row %s is not %s: a write meant for another portal, ignored", secret_id, k8s_name)
        return "superseded"
    if not _still_to_write(secret, version):
        return "superseded"
    try:
        value = sealing.unseal(sealed)
    except sealing.SealError as exc:
        log.error("secret %s in %s: cannot open the sealed value: %s", secret.name, secret.team.slug, exc)
        return _fail(secret_id, version, f"The portal's engine could not open it: {exc}. Ask an admin.")
    team = secret.team
    namespace_wait_ready(team, group="", resource="secrets")
    body = objects.make_secret(namespace=team.namespace, name=secret.k8s_name, value=value, team_slug=team.slug,
                               instance=settings.PORTAL_INSTANCE)  # fmt: skip
    with transaction.atomic():
        # Under the row's lock: a newer store waits for this write to finish, then its own write follows,
        # so Kubernetes never ends up holding an older value than the row's latest version.
        locked = TeamSecret.objects.select_for_update().filter(id=secret_id).first()
        if not _still_to_write(locked, version):
            return "superseded"
        try:
            _create_or_replace(body)
        except ApiException as exc:
            # Status only: the request body (the value) must never reach a log line.
            log.warning("secret %s in %s: Kubernetes answered %s", secret.k8s_name, team.namespace, exc.status)
            failure = kube.classify(exc)
            if failure.transient or exc.status in (403, 404):  # also: the namespace is not bound for us yet
                raise
            log.warning("secret %s in %s: Kubernetes refused it: %s", secret.k8s_name, team.namespace, failure.message)
            locked.state, locked.message = (
                SecretState.FAILED,
                f"The cluster refused it: {kube.user_words(exc).lower()}.",
            )
            locked.save(update_fields=["state", "message"])
            return "failed"
        locked.state, locked.message = SecretState.READY, ""
        locked.save(update_fields=["state", "message"])
    log.info("secret %s (version %s) written in %s", secret.name, version, team.namespace)
    return "written"


def _create_or_replace(body) -> None:
    core = kube.core()
    namespace, name = body.metadata.namespace, body.metadata.name
    try:
        core.create_namespaced_secret(namespace, body, _request_timeout=kube.timeout())
    except ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_secret(name, namespace, body, _request_timeout=kube.timeout())


def _fail(secret_id: int, version: int, message: str) -> str:
    TeamSecret.objects.filter(id=secret_id, version=version, state=SecretState.PENDING).update(
        state=SecretState.FAILED, message=message[:500]
    )
    return "failed"


def secret_remove(*, secret_id: int, version: int, k8s_name: str | None = None) -> str:
    """Delete a forgotten secret's Kubernetes Secret and then its row, unless it was stored again since."""
    with transaction.atomic():
        locked = TeamSecret.objects.select_for_update().select_related("team").filter(id=secret_id).first()
        if locked is None or locked.version != version or locked.state != SecretState.DELETING:
            return "superseded"
        if k8s_name is not None and locked.k8s_name != k8s_name:
            log.warning("secret row %s is not %s: a removal meant for another portal, ignored", secret_id, k8s_name)
            return "superseded"
        try:
            kube.core().delete_namespaced_secret(
                locked.k8s_name, locked.team.namespace, _request_timeout=kube.timeout()
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
        locked.delete()
    return "deleted"
