"""Record membership changes made anywhere in the portal (admin, seed, shell), beside those made by the
provider's claims at sign-in (identity.teams records those itself, with their reason)."""

from __future__ import annotations

import threading
from typing import Any

from django.db.models.signals import post_delete, post_save, pre_save
from django.dispatch import receiver

from identity.models import MembershipChange
from jobs.models import Membership

_syncing = threading.local()


class provider_sync:
    """While claims are applied, the sync writes its own records."""

    def __enter__(self) -> None:
        _syncing.active = True

    def __exit__(self, *exc: Any) -> None:
        _syncing.active = False


def _from_sync() -> bool:
    return getattr(_syncing, "active", False)


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
        source=MembershipChange.Source.PORTAL,
    )  # fmt: skip


@receiver(post_delete, sender=Membership)
def _record_delete(sender, instance: Membership, **kwargs) -> None:
    if _from_sync():
        return
    MembershipChange.objects.create(
        user_id=instance.user_id, team_id=instance.team_id, old_role=instance.role, new_role="",
        source=MembershipChange.Source.PORTAL,
    )  # fmt: skip
