"""Teams from claims: applied at every sign-in through the provider."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from identity.models import ClaimRule, Membership, MembershipChange, Role, TeamSource
from identity.signals import provider_sync

_RANK = {Role.MEMBER: 1, Role.MANAGER: 2}


def claim_values(claims: dict[str, Any], name: str) -> set[str]:
    """A claim as a set of strings: a list (groups), a single value, or a dotted path into objects."""
    value: Any = claims
    for part in name.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return set()
    if isinstance(value, list | tuple | set):
        return {str(v) for v in value}
    return {str(value)}


def wanted_roles(claims: dict[str, Any]) -> dict[int, str]:
    """team id -> the strongest role the rules give this person."""
    wanted: dict[int, str] = {}
    for rule in ClaimRule.objects.all():
        stronger = _RANK[rule.role] > _RANK.get(wanted.get(rule.team_id, ""), 0)
        if stronger and rule.value in claim_values(claims, rule.claim):
            wanted[rule.team_id] = rule.role
    return wanted


def provider_managed_team_ids() -> set[int]:
    """Teams whose membership the provider keeps: those with claim rules or an explicit choice, less the
    ones an admin marked "managed in the portal"."""
    ruled = set(ClaimRule.objects.values_list("team_id", flat=True).distinct())
    chosen = TeamSource.objects.values_list("team_id", "managed_by")
    portal_managed = {team_id for team_id, managed_by in chosen if managed_by == TeamSource.ManagedBy.PORTAL}
    return (ruled | {team_id for team_id, _ in chosen}) - portal_managed


def membership_edited_by_hand(team_id: int) -> bool:
    """May people be added, re-roled or removed by hand (in admin)? Not where the provider keeps the team:
    the next sign-in would silently undo the edit."""
    return team_id not in provider_managed_team_ids()


@transaction.atomic
def memberships_sync(*, user: Any, claims: dict[str, Any]) -> list[MembershipChange]:
    """Make the user's memberships agree with the claims. Provider-managed teams (and teams with rules but
    no explicit choice) follow the claims exactly; portal-managed teams only gain people."""
    with provider_sync():
        return _sync(user, claims)


def _sync(user: Any, claims: dict[str, Any]) -> list[MembershipChange]:
    wanted = wanted_roles(claims)
    provider_managed = provider_managed_team_ids()
    current = {m.team_id: m for m in Membership.objects.select_for_update().filter(user=user)}
    changes: list[MembershipChange] = []

    def record(team_id: int, old: str, new: str, note: str) -> None:
        changes.append(
            MembershipChange.objects.create(
                user=user,
                team_id=team_id,
                old_role=old,
                new_role=new,
                source=MembershipChange.Source.PROVIDER,
                note=note,
            )
        )

    for team_id, role in wanted.items():
        membership = current.get(team_id)
        if membership is None:
            Membership.objects.create(user=user, team_id=team_id, role=role)
            record(team_id, "", role, "listed by the provider")
        elif membership.role != role and (team_id in provider_managed or _RANK[role] > _RANK[membership.role]):
            Membership.objects.filter(id=membership.id).update(role=role)
            record(team_id, membership.role, role, "role from the provider")
    for team_id, membership in current.items():
        if team_id in provider_managed and team_id not in wanted:
            membership.delete()
            record(team_id, membership.role, "", "no longer listed by the provider")
    return changes
