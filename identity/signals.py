"""Record membership changes made anywhere in the portal (admin, seed, shell), beside those made by the
provider's claims at sign-in (identity.teams records those itself, with their reason)."""

from __future__ import annotations

import threading
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Model, QuerySet
from django.db.models.signals import post_delete, post_save, pre_save
from django.dispatch import receiver

from identity.models import Membership, MembershipChange

_syncing = threading.local()


class provider_sync:
    """While claims are applied, the sync writes its own records."""

    def __enter__(self) -> None:
        _syncing.active = True

    def __exit__(self, *exc: Any) -> None:
        _syncing.active = False


def _from_sync() -> bool:
    return getattr(_syncing, "active", False)


class changes_by:
    """Changes made inside this block are recorded as made by `user` (the manager on the members page, the
    admin saving a team): the record says who, not only what."""

    def __init__(self, user: Any) -> None:
        self.user = user

    def __enter__(self) -> None:
        self.outer = getattr(_syncing, "actor", None)
        _syncing.actor = self.user

    def __exit__(self, *exc: Any) -> None:
        _syncing.actor = self.outer


def _actor_id() -> int | None:
    actor = getattr(_syncing, "actor", None)
    return actor.pk if actor is not None and actor.is_authenticated else None


@receiver(pre_save, sender=Membership)
def _remember_role(sender, instance: Membership, **kwargs) -> None:
    instance._old_role = (
        Membership.objects.filter(id=instance.id).values_list("role", flat=True).first() if instance.id else ""
    ) or ""


@receiver(post_save, sender=Membership)
def _record_save(sender, instance: Membership, created: bool, **kwargs) -> None:
    old = "" if created else getattr(instance, "_old_role", "")
    if _from_sync() or old == instance.role:
        return
    MembershipChange.objects.create(
        user_id=instance.user_id, team_id=instance.team_id, old_role=old, new_role=instance.role,
        source=MembershipChange.Source.PORTAL, changed_by_id=_actor_id(),
    )  # fmt: skip


def _being_deleted(origin: Any, model: type[Model], pk: int) -> bool:
    """Whether the deletion that removed a membership is the deletion of its team or its person (a
    cascade). At this point that row still exists: Django deletes the memberships before it."""
    if isinstance(origin, model):
        return origin.pk == pk
    if isinstance(origin, QuerySet) and origin.model is model:
        return origin.filter(pk=pk).exists()
    return False


@receiver(post_delete, sender=Membership)
def _record_delete(sender, instance: Membership, origin: Any = None, **kwargs) -> None:
    if _from_sync():
        return
    team_gone = _being_deleted(origin, Membership._meta.get_field("team").related_model, instance.team_id)
    user_gone = _being_deleted(origin, get_user_model(), instance.user_id)
    # A row written now must not point at a team or person deleted in this same transaction: keep the
    # names and leave the link empty.
    MembershipChange.objects.create(
        user_id=None if user_gone else instance.user_id,
        team_id=None if team_gone else instance.team_id,
        username=instance.user.get_username(),
        team_name=instance.team.name,
        old_role=instance.role,
        new_role="",
        source=MembershipChange.Source.PORTAL,
        changed_by_id=None if user_gone and _actor_id() == instance.user_id else _actor_id(),
        note="the team was deleted" if team_gone else "the account was deleted" if user_gone else "",
    )
