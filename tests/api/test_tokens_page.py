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
