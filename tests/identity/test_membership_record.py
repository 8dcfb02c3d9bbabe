"""Every change to who is in a team is recorded once: by the provider's claims at sign-in, or by hand."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import RequestFactory

from identity.models import ClaimRule, Membership, MembershipChange, Role, TeamSource
from identity.teams import memberships_sync
from jobs.admin.teams import MembershipInline
from jobs.models import Team
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


def test_admin_shows_a_provider_kept_team_read_only_and_a_portal_kept_one_editable(admin_client):
    kept, by_hand = TeamFactory(slug="kept"), TeamFactory(slug="byhand")
    ClaimRule.objects.create(team=kept, claim="groups", value="kept")
    ClaimRule.objects.create(team=by_hand, claim="groups", value="byhand")
    TeamSource.objects.create(team=by_hand, managed_by=TeamSource.ManagedBy.PORTAL)
    for team in (kept, by_hand):
        Membership.objects.create(user=UserFactory(), team=team)

    kept_page = admin_client.get(f"/admin/jobs/team/{kept.pk}/change/").content.decode()
    by_hand_page = admin_client.get(f"/admin/jobs/team/{by_hand.pk}/change/").content.decode()
    assert 'name="memberships-0-role"' not in kept_page  # listed, not editable
    assert 'name="memberships-0-role"' in by_hand_page

    # Django admin ignores posted rows of an inline the user may not change, add to or delete from.
    inline = MembershipInline(Team, admin.site)
    request = RequestFactory().get("/")
    request.user = UserFactory(is_staff=True, is_superuser=True)
    assert not inline.has_change_permission(request, kept)
    assert not inline.has_add_permission(request, kept)
    assert not inline.has_delete_permission(request, kept)
    assert inline.has_change_permission(request, by_hand)


def test_a_team_that_had_members_can_be_deleted_and_its_history_stays_readable(admin_client):
    team, user = TeamFactory(slug="old-lab", name="Old Lab"), UserFactory(username="kim")
    Membership.objects.create(user=user, team=team, role=Role.MANAGER)
    Membership.objects.filter(user=user, team=team).update(role=Role.MEMBER)  # history: one row so far
    other = TeamFactory(slug="stays")
    Membership.objects.create(user=user, team=other)

    page = admin_client.post(f"/admin/jobs/team/{team.pk}/delete/", {"post": "yes"})
    assert page.status_code == 302  # back to the list: deleted
    assert not Team.objects.filter(pk=team.pk).exists()
    rows = list(
        MembershipChange.objects.filter(username="kim")
        .order_by("id")
        .values_list("team_id", "team_name", "old_role", "new_role", "note")
    )
    assert rows == [
        (None, "Old Lab", "", "manager", ""),  # the link is cleared, the name is kept
        (other.pk, "Team stays", "", "member", ""),
        (None, "Old Lab", "member", "", "the team was deleted"),
    ]


def test_a_person_who_was_in_teams_can_be_deleted_and_the_teams_history_keeps_their_name(admin_client):
    team, user = TeamFactory(slug="lab2", name="Lab Two"), UserFactory(username="lee")
    Membership.objects.create(user=user, team=team)
    page = admin_client.post(f"/admin/auth/user/{user.pk}/delete/", {"post": "yes"})
    assert page.status_code == 302
    rows = list(
        MembershipChange.objects.filter(team=team).order_by("id").values_list("user_id", "username", "new_role")
    )
    assert rows == [(None, "lee", "member"), (None, "lee", "")]


def test_deleting_several_teams_at_once_keeps_every_record(admin_client):
    first, second = TeamFactory(slug="t-one", name="T One"), TeamFactory(slug="t-two", name="T Two")
    user = UserFactory(username="mo")
    for team in (first, second):
        Membership.objects.create(user=user, team=team)
    Team.objects.filter(pk__in=[first.pk, second.pk]).delete()
    removed = MembershipChange.objects.filter(username="mo", new_role="").values_list("team_id", "team_name", "note")
    assert sorted(removed) == [(None, "T One", "the team was deleted"), (None, "T Two", "the team was deleted")]
