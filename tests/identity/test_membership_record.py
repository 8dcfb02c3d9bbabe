"""Every change to who is in a team is recorded once: by the provider's claims at sign-in, or by hand."""

from __future__ import annotations

import pytest

from identity.models import ClaimRule, MembershipChange, TeamSource
from identity.teams import memberships_sync
from jobs.models import Membership, Role
from tests.engine.factories import TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def history(user) -> list[tuple[str, str, str, str]]:
    return list(
        MembershipChange.objects.filter(user=user)
        .order_by("id")
        .values_list("team__slug", "old_role", "new_role", "source")
    )


def test_hand_edits_are_recorded_as_the_portals():
    team, user = TeamFactory(slug="lab"), UserFactory(username="hank")
    membership = Membership.objects.create(user=user, team=team)
    membership.role = Role.MANAGER
    membership.save()
    membership.save()  # no change, no record
    membership.delete()
    assert history(user) == [
        ("lab", "", "member", "portal"),
        ("lab", "member", "manager", "portal"),
        ("lab", "manager", "", "portal"),
    ]


def test_claims_are_recorded_once_as_the_providers_and_portal_managed_teams_keep_people():
    vision, hpc = TeamFactory(slug="vision"), TeamFactory(slug="hpc")
    ClaimRule.objects.create(team=vision, claim="groups", value="vision")
    ClaimRule.objects.create(team=hpc, claim="groups", value="hpc", role=Role.MANAGER)
    TeamSource.objects.create(team=hpc, managed_by=TeamSource.ManagedBy.PORTAL)
    user = UserFactory(username="ivy")
    memberships_sync(user=user, claims={"groups": ["vision", "hpc"]})
    memberships_sync(user=user, claims={"groups": ["vision", "hpc"]})  # nothing new
    memberships_sync(user=user, claims={"groups": []})
    assert dict(Membership.objects.filter(user=user).values_list("team__slug", "role")) == {"hpc": "manager"}
    assert history(user) == [
        ("hpc", "", "manager", "provider"),
        ("vision", "", "member", "provider"),
        ("vision", "member", "", "provider"),
    ]
