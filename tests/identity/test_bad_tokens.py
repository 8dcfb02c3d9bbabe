"""Every check on the provider's answer: a token with the wrong signature, issuer, audience, nonce or
expiry is refused with a clear page, and nothing (no user, no account, no membership) is created."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model

from identity.models import ClaimRule, Membership, ProviderAccount
from identity.services import provider
from tests.engine.factories import TeamFactory
from tests.identity.rogue import RogueProvider

pytestmark = pytest.mark.django_db

CLIENT_ID = "gpuportal"


@pytest.fixture
def rogue(settings) -> Iterator[RogueProvider]:
    server = RogueProvider()
    settings.OIDC_ISSUER = server.issuer
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = "secret"
    settings.OIDC_PROVIDER_NAME = "Test University"
    provider.cache_clear()
    yield server
    provider.cache_clear()
    server.stop()


def start(client) -> tuple[str, str]:
    """The portal's redirect to the provider: the state and nonce it will expect back."""
    redirect = client.get("/sso/login/")
    assert redirect.status_code == 302
    query = parse_qs(urlsplit(redirect["Location"]).query)
    assert query["code_challenge_method"] == ["S256"]
    assert query["code_challenge"]
    return query["state"][0], query["nonce"][0]


def test_a_correct_token_signs_in(client, rogue):
    TeamFactory(slug="sec")
    ClaimRule.objects.create(team_id=TeamFactory(slug="eve-lab").id, claim="email", value="eve@uni.example")
    state, nonce = start(client)
    rogue.claims = rogue.good_claims(client_id=CLIENT_ID, nonce=nonce)
    answer = client.get(f"/sso/callback/?code=c&state={state}")
    assert answer.status_code == 302, answer.content.decode()[:300]
    assert ProviderAccount.objects.get().user.username == "eve"
    assert list(Membership.objects.values_list("team__slug", flat=True)) == ["eve-lab"]  # any claim can map


@pytest.mark.parametrize("verified", [False, "false", None])
def test_an_unverified_email_is_ignored_for_the_address_and_for_team_rules(client, rogue, verified):
    """Issue 33.7: an address the provider did not verify is not the person's: no e-mail, no team by it."""
    ClaimRule.objects.create(team_id=TeamFactory(slug="eve-lab").id, claim="email", value="eve@uni.example")
    state, nonce = start(client)
    rogue.claims = {**rogue.good_claims(client_id=CLIENT_ID, nonce=nonce), "email_verified": verified}
    if verified is None:
        del rogue.claims["email_verified"]
    answer = client.get(f"/sso/callback/?code=c&state={state}")
    assert answer.status_code == 302, answer.content.decode()[:300]
    eve = ProviderAccount.objects.get().user
    assert (eve.username, eve.email) == ("eve", "")
    assert not Membership.objects.filter(user=eve).exists()


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        ("signature", "wrong signature"),
        ("issuer", "wrong issuer"),
        ("audience", "wrong audience"),
        ("nonce", "wrong nonce"),
        ("expiry", "expired"),
    ],
)
def test_a_bad_token_is_refused_and_nothing_is_created(client, rogue, spoil, reason):
    state, nonce = start(client)
    claims = rogue.good_claims(client_id=CLIENT_ID, nonce=nonce)
    if spoil == "signature":
        rogue.sign_with_other_key = True
    elif spoil == "issuer":
        claims["iss"] = "https://evil.example"
    elif spoil == "audience":
        claims["aud"] = "some-other-app"
    elif spoil == "nonce":
        claims["nonce"] = "replayed-from-another-sign-in"
    else:
        claims["exp"] = int(time.time()) - 3600
        claims["iat"] = int(time.time()) - 7200
    rogue.claims = claims
    answer = client.get(f"/sso/callback/?code=c&state={state}")
    assert answer.status_code == 400
    page = answer.content.decode()
    assert "did not pass the portal&#x27;s checks" in page
    assert f"({reason})" in page
    assert "Traceback" not in page
    assert not get_user_model().objects.exists()
    assert not ProviderAccount.objects.exists()
