"""In the browser (Debian's chromium, Playwright): sign in through the real provider's pages, land in the
team of one's group with the right role; a group removed at the provider removes the team at the next
sign-in; signing out ends the provider's session too."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from identity.models import ClaimRule, Membership, Role
from tests.engine.factories import TeamFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def through_the_provider(page, login: str) -> None:
    """The provider's own pages: its sign-in form (unless it remembers us) and its consent screen."""
    page.get_by_role("link", name="Sign in with Test University").click()
    page.wait_for_url(lambda url: "/sso/callback/" in url or "/interaction/" in url or url.endswith("/"))
    if page.locator('input[name="login"]').count():
        page.locator('input[name="login"]').fill(login)
        page.locator('input[name="password"]').fill("any")
        page.get_by_role("button", name="Sign-in").click()
    if page.get_by_role("button", name="Continue").count():
        page.get_by_role("button", name="Continue").click()


def test_sign_in_through_the_provider_lands_in_the_team_of_ones_group(page, live_server, sso):
    vision = TeamFactory(slug="vision", name="Vision Lab")
    nlp = TeamFactory(slug="nlp", name="NLP Group")
    ClaimRule.objects.create(team=vision, claim="groups", value="vision-pi", role=Role.MANAGER)
    ClaimRule.objects.create(team=nlp, claim="groups", value="nlp", role=Role.MEMBER)
    sso.set_user("dora", email="dora@uni.example", groups=["vision-pi"])

    page.goto("/workloads/")
    expect(page.get_by_role("link", name="Sign in with Test University")).to_be_visible()
    through_the_provider(page, "dora")
    expect(page.get_by_role("heading", name="My workloads")).to_be_visible()
    expect(page.locator(".team-name")).to_have_text("Vision Lab")
    # A manager: the notifications page offers the team's webhook.
    page.goto("/notifications/")
    expect(page.get_by_role("heading", name="Team webhook of Vision Lab")).to_be_visible()

    # The directory moves her from vision-pi to nlp; she signs out (of the provider too) and back in.
    sso.set_user("dora", email="dora@uni.example", groups=["nlp"])
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(lambda url: url.startswith(sso.issuer))
    page.get_by_role("button", name="Yes, sign me out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    through_the_provider(page, "dora")
    expect(page.locator(".team-name")).to_have_text("NLP Group")
    page.goto("/notifications/")
    expect(page.get_by_role("heading", name="Notifications")).to_be_visible()
    expect(page.get_by_text("Team webhook of")).to_have_count(0)  # a member, not a manager
    assert list(Membership.objects.filter(user__username="dora").values_list("team__slug", "role")) == [
        ("nlp", Role.MEMBER)
    ]
