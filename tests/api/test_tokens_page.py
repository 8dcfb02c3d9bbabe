"""The profile page: create a named token (shown once), list, revoke."""

from __future__ import annotations

import re

from api.models import ApiToken


def test_create_list_and_revoke(client, world):
    client.force_login(world.teammate)
    page = client.post("/profile/tokens/", {"name": "cluster scripts"})
    assert page.status_code == 200
    html = page.content.decode()
    raw = re.search(r'<pre id="new-token">(gpp_[^<]+)</pre>', html).group(1)
    token = ApiToken.objects.get(user=world.teammate, name="cluster scripts")
    assert token.digest != raw
    # It works for the API, and is never shown again.
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.get("/api/v1/teams/").status_code == 200
    listing = client.get("/profile/tokens/").content.decode()
    assert "cluster scripts" in listing
    assert raw not in listing
    # Revoking someone else's token is not possible; one's own is.
    others = ApiToken.objects.get(user=world.owner)
    assert client.post(f"/profile/tokens/{others.id}/revoke/").status_code == 404
    assert client.post(f"/profile/tokens/{token.id}/revoke/").status_code == 302
    assert api.get("/api/v1/teams/").status_code == 401
    assert "revoked" in client.get("/profile/tokens/").content.decode()  # the message, once
    assert "cluster scripts" not in client.get("/profile/tokens/").content.decode()


def test_name_is_required(client, world):
    client.force_login(world.owner)
    response = client.post("/profile/tokens/", {"name": "  "})
    assert response.status_code == 400
    assert "Give the token a name" in response.content.decode()


def test_a_name_with_a_nul_character_is_refused_not_a_500(client, world):
    client.force_login(world.owner)
    before = ApiToken.objects.count()
    response = client.post("/profile/tokens/", {"name": "laptop\x00"})
    assert response.status_code == 400
    assert "NUL" in response.content.decode()
    assert ApiToken.objects.count() == before


def test_needs_login(client, world):
    assert client.get("/profile/tokens/").status_code == 302


def test_the_create_form_sent_twice_makes_one_token(client, world):
    """Reload after creating a token (the browser sends the form again), Back and Create, or a double click:
    the same page's form makes one token, and says so instead of making a second."""
    client.force_login(world.teammate)
    page = client.get("/profile/tokens/").content.decode()
    once = re.search(r'name="once" value="([^"]+)"', page).group(1)
    first = client.post("/profile/tokens/", {"name": "laptop", "once": once})
    assert '<pre id="new-token">' in first.content.decode()
    again = client.post("/profile/tokens/", {"name": "laptop", "once": once})
    assert again.status_code == 200
    html = again.content.decode()
    assert '<pre id="new-token">' not in html
    assert "This form already created “laptop”" in html
    assert ApiToken.objects.filter(user=world.teammate, name="laptop").count() == 1
    # A fresh page's form makes another, as asked.
    fresh = re.search(r'name="once" value="([^"]+)"', html).group(1)
    assert fresh != once
    client.post("/profile/tokens/", {"name": "laptop", "once": fresh})
    assert ApiToken.objects.filter(user=world.teammate, name="laptop").count() == 2


def test_a_refused_name_stays_in_the_box(client, world):
    client.force_login(world.owner)
    response = client.post("/profile/tokens/", {"name": "x" * 101})
    assert response.status_code == 400
    assert f'value="{"x" * 101}"' in response.content.decode()


def test_revoke_and_remove_ask_first_naming_what_goes(client, world):
    """newcomer14: Revoke (a token) and Remove (an SSH key) took it away at one tap; they ask first, as Remove a
    member and Delete a secret do (portal.js asks for every form[data-confirm])."""
    from identity.models import SshKey

    client.force_login(world.teammate)
    client.post("/profile/tokens/", {"name": "cluster scripts"})
    token = ApiToken.objects.get(user=world.teammate, name="cluster scripts")
    page = client.get("/profile/tokens/").content.decode()
    form = re.search(rf'<form method="post" action="/profile/tokens/{token.id}/revoke/"[^>]*>', page).group(0)
    assert 'data-confirm="Revoke cluster scripts? Every script and client using it is refused from now on' in form

    key = SshKey.objects.create(
        user=world.teammate,
        name="laptop",
        key_type="ssh-ed25519",
        public_key="ssh-ed25519 AAAA",
        fingerprint="SHA256:x",
    )
    page = client.get("/profile/ssh-keys/").content.decode()
    form = re.search(rf'<form method="post" action="/profile/ssh-keys/{key.id}/remove/"[^>]*>', page).group(0)
    assert 'data-confirm="Remove laptop? It no longer opens your services over SSH' in form
