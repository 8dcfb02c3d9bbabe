"""The admin who keeps forty people in teams finds a person's team from the Teams list by their username
(or e-mail), as a question about a person ("which team is Olivia in?") is asked there first."""

from __future__ import annotations

from django.urls import reverse


def test_teams_are_found_by_a_members_username_or_email(client, world):
    client.force_login(world.admin)
    url = reverse("admin:jobs_team_changelist")
    by_name = client.get(url, {"q": world.outsider.username})
    assert [team.slug for team in by_name.context["cl"].result_list] == [world.other_team.slug]
    world.owner.email = "olivia.w@example.org"
    world.owner.save(update_fields=["email"])
    by_email = client.get(url, {"q": "olivia.w@"})
    assert [team.slug for team in by_email.context["cl"].result_list] == [world.team.slug]
