"""Sign-in through a real OpenID Connect provider (npm oidc-provider, as a process) against the live
portal: users created on first sign-in, teams and roles from the groups claim at every sign-in, tokens,
disabled accounts, sign-out at the provider, and each failure a clear page with nothing half-created."""

from __future__ import annotations

import pytest
import requests
from django.contrib.auth import get_user_model

from api.tokens import token_create
from identity.models import ClaimRule, Membership, MembershipChange, ProviderAccount, Role, TeamSource
from tests.engine.factories import TeamFactory, UserFactory
from tests.identity.oidc import sign_in_without_browser

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def teams(db):
    vision = TeamFactory(slug="vision", name="Vision Lab")
    nlp = TeamFactory(slug="nlp", name="NLP Group")
    hpc = TeamFactory(slug="hpc", name="HPC Friends")
    ClaimRule.objects.create(team=vision, claim="groups", value="vision", role=Role.MEMBER)
    ClaimRule.objects.create(team=vision, claim="groups", value="vision-pi", role=Role.MANAGER)
    ClaimRule.objects.create(team=nlp, claim="groups", value="nlp", role=Role.MEMBER)
    ClaimRule.objects.create(team=hpc, claim="groups", value="hpc", role=Role.MEMBER)
    TeamSource.objects.create(team=hpc, managed_by=TeamSource.ManagedBy.PORTAL)
    return {"vision": vision, "nlp": nlp, "hpc": hpc}


def roles_of(user) -> dict[str, str]:
    return dict(Membership.objects.filter(user=user).values_list("team__slug", "role"))


def sign_in(live_server, login: str) -> tuple[requests.Session, requests.Response]:
    session = requests.Session()
    response = sign_in_without_browser(session, f"{live_server.url}/sso/login/", login)
    return session, response


def test_first_sign_in_creates_the_user_in_the_teams_of_their_groups(live_server, sso, teams):
    sso.set_user("alice", email="alice@uni.example", groups=["vision-pi", "nlp", "hpc", "unrelated"])
    login_page = requests.get(f"{live_server.url}/login/", timeout=10).text
    assert "Sign in with Test University" in login_page
    assert 'name="password"' in login_page

    _session, landed = sign_in(live_server, "alice")
    assert (landed.status_code, landed.url) == (200, f"{live_server.url}/"), landed.text[:500]
    alice = get_user_model().objects.get(username="alice")
    assert (alice.email, alice.has_usable_password()) == ("alice@uni.example", False)
    assert ProviderAccount.objects.get(user=alice).subject == "alice"
    assert roles_of(alice) == {"vision": Role.MANAGER, "nlp": Role.MEMBER, "hpc": Role.MEMBER}
    assert MembershipChange.objects.filter(user=alice, source="provider").count() == 3

    # A group removed at the provider: the provider-managed team goes at the next sign-in; the team
    # managed in the portal keeps what the portal decided.
    sso.set_user("alice", email="alice@uni.example", groups=["vision", "hpc"])
    sign_in(live_server, "alice")
    assert roles_of(alice) == {"vision": Role.MEMBER, "hpc": Role.MEMBER}
    sso.set_user("alice", email="alice@uni.example", groups=[])
    sign_in(live_server, "alice")
    assert roles_of(alice) == {"hpc": Role.MEMBER}
    removed = MembershipChange.objects.filter(user=alice, new_role="").values_list("team__slug", flat=True)
    assert sorted(removed) == ["nlp", "vision"]
    assert get_user_model().objects.filter(username__startswith="alice").count() == 1


def test_a_local_account_with_the_same_name_is_never_taken_over(live_server, sso, teams):
    UserFactory(username="admin", is_staff=True, is_superuser=True)
    sso.set_user("admin", email="someone@uni.example", groups=["nlp"])
    sign_in(live_server, "admin")
    sso_user = ProviderAccount.objects.get(subject="admin").user
    assert sso_user.username.startswith("admin-")
    assert not sso_user.is_superuser


def test_tokens_work_for_sso_users_until_the_account_is_disabled(live_server, sso, teams):
    sso.set_user("bob", email="bob@uni.example", groups=["nlp"])
    session, _ = sign_in(live_server, "bob")
    bob = get_user_model().objects.get(username="bob")
    issued = token_create(user=bob, name="laptop")
    api = f"{live_server.url}/api/v1/teams/"
    auth = {"Authorization": f"Bearer {issued.raw}"}
    assert [t["slug"] for t in requests.get(api, headers=auth, timeout=10).json()] == ["nlp"]
    assert session.get(f"{live_server.url}/", timeout=10, allow_redirects=False).status_code == 200

    bob.is_active = False
    bob.save()
    assert requests.get(api, headers=auth, timeout=10).status_code == 401
    assert session.get(f"{live_server.url}/", timeout=10, allow_redirects=False).status_code == 302
    _, refused = sign_in(live_server, "bob")
    assert refused.status_code == 403
    assert "disabled" in refused.text


def test_sign_out_ends_the_portal_session_and_the_providers(live_server, sso, teams):
    sso.set_user("carol", email="carol@uni.example", groups=["nlp"])
    session, _ = sign_in(live_server, "carol")
    page = session.get(f"{live_server.url}/", timeout=10)
    csrf = session.cookies.get("csrftoken")
    out = session.post(
        f"{live_server.url}/logout/",
        headers={"X-CSRFToken": csrf, "Referer": page.url},
        allow_redirects=False,
        timeout=10,
    )
    assert out.status_code == 302
    assert out.headers["Location"].startswith(f"{sso.issuer}/session/end?id_token_hint=")
    assert session.get(f"{live_server.url}/", timeout=10, allow_redirects=False).status_code == 302


def test_a_forged_or_replayed_callback_is_refused_and_creates_nothing(live_server, sso, teams):
    session = requests.Session()
    session.get(f"{live_server.url}/sso/login/", allow_redirects=False, timeout=10)  # a real state in the session
    answer = session.get(f"{live_server.url}/sso/callback/?code=stolen&state=not-the-one", timeout=10)
    assert answer.status_code == 400
    assert "expired or was opened in another browser" in answer.text
    assert not ProviderAccount.objects.exists()
    denied = session.get(f"{live_server.url}/sso/callback/?error=access_denied", timeout=10)
    assert denied.status_code == 400
    assert "did not sign you in (access_denied)" in denied.text


def test_provider_down_is_a_clear_page_and_passwords_still_work(live_server, settings, sso, teams, client):
    settings.OIDC_ISSUER = "http://127.0.0.1:9"  # nothing listens there
    from identity.services import provider

    provider.cache_clear()
    down = requests.get(f"{live_server.url}/sso/login/", timeout=30)
    assert down.status_code == 503
    assert "Test University cannot be reached right now" in down.text
    UserFactory(username="root", password="break-glass-password-1")
    session = requests.Session()
    session.get(f"{live_server.url}/login/", timeout=10)
    signed = session.post(
        f"{live_server.url}/login/",
        data={
            "username": "root",
            "password": "break-glass-password-1",
            "csrfmiddlewaretoken": session.cookies["csrftoken"],
        },
        headers={"Referer": f"{live_server.url}/login/"},
        timeout=10,
    )
    assert signed.url == f"{live_server.url}/"
