"""SSH public keys through the API (/api/v1/me/ssh-keys/) and the profile page: a bad key gets a 400 (or
the form again) naming the field and stores nothing; one person never sees or removes another's keys."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from rest_framework.test import APIClient

from identity.models import SshKey


def _key(kind: str = "ed25519") -> str:
    private = (
        ed25519.Ed25519PrivateKey.generate()
        if kind == "ed25519"
        else rsa.generate_private_key(public_exponent=65537, key_size=1024)  # noqa: S505 - the weak key the portal must refuse
    )
    public = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return public.decode() + " someone@somewhere"


def _api(user) -> APIClient:
    api = APIClient()
    api.force_authenticate(user)
    return api


def test_add_list_and_remove_a_key(world):
    api = _api(world.owner)
    added = api.post("/api/v1/me/ssh-keys/", {"name": "laptop", "public_key": _key()}, format="json")
    assert added.status_code == 201, added.content
    body = added.json()
    assert body["key_type"] == "ssh-ed25519"
    assert body["fingerprint"].startswith("SHA256:")
    assert "someone@somewhere" not in body["public_key"]
    assert [k["name"] for k in api.get("/api/v1/me/ssh-keys/").json()] == ["laptop"]
    # Another person sees none of them and cannot remove them.
    assert _api(world.outsider).get("/api/v1/me/ssh-keys/").json() == []
    assert _api(world.outsider).delete(f"/api/v1/me/ssh-keys/{body['id']}/").status_code == 404
    assert api.delete(f"/api/v1/me/ssh-keys/{body['id']}/").status_code == 204
    assert not SshKey.objects.exists()


@pytest.mark.parametrize(("payload", "field"), [
    ({"name": "laptop", "public_key": "not a key"}, "public_key"),
    ({"name": "", "public_key": "ssh-ed25519 AAAA"}, "name"),
    ({"name": "laptop"}, "public_key"),
    ({"name": "laptop", "public_key": ["ssh-ed25519"]}, "public_key"),
    ({"name": "laptop", "public_key": "x", "options": "command=sh"}, "options"),
])  # fmt: skip
def test_bad_input_names_the_field_and_stores_nothing(world, payload, field):
    answer = _api(world.owner).post("/api/v1/me/ssh-keys/", payload, format="json")
    assert answer.status_code == 400
    assert field in answer.json()["error"]["fields"]
    assert not SshKey.objects.exists()


def test_a_good_key_under_a_name_with_a_nul_character_is_refused_naming_the_name(world, client):
    answer = _api(world.owner).post("/api/v1/me/ssh-keys/", {"name": "lap\x00top", "public_key": _key()}, format="json")
    assert answer.status_code == 400, answer.content
    assert list(answer.json()["error"]["fields"]) == ["name"]
    client.force_login(world.owner)
    page = client.post("/profile/ssh-keys/", {"name": "lap\x00top", "public_key": _key()})
    assert page.status_code == 400
    assert not SshKey.objects.exists()


def test_a_weak_rsa_key_and_a_duplicate_are_refused(world):
    api = _api(world.owner)
    weak = api.post("/api/v1/me/ssh-keys/", {"name": "old", "public_key": _key("rsa")}, format="json")
    assert weak.status_code == 400
    assert "2048" in weak.json()["error"]["fields"]["public_key"][0]
    key = _key()
    assert api.post("/api/v1/me/ssh-keys/", {"name": "a", "public_key": key}, format="json").status_code == 201
    again = api.post("/api/v1/me/ssh-keys/", {"name": "b", "public_key": key}, format="json")
    assert again.status_code == 400
    assert "already" in again.json()["error"]["fields"]["public_key"][0]
    assert SshKey.objects.count() == 1


def test_the_profile_page_adds_and_removes_keys(client, world):
    client.force_login(world.owner)
    refused = client.post("/profile/ssh-keys/", {"name": "laptop", "public_key": "ssh-rsa nope"})
    assert refused.status_code == 400
    assert 'aria-invalid="true" aria-describedby="key-public-error"' in refused.content.decode()
    assert not SshKey.objects.exists()
    assert client.post("/profile/ssh-keys/", {"name": "laptop", "public_key": _key()}).status_code == 302
    key = SshKey.objects.get()
    page = client.get("/profile/ssh-keys/").content.decode()
    assert key.fingerprint in page
    client.force_login(world.outsider)
    assert client.post(f"/profile/ssh-keys/{key.id}/remove/").status_code == 404
    client.force_login(world.owner)
    assert client.post(f"/profile/ssh-keys/{key.id}/remove/").status_code == 302
    assert not SshKey.objects.exists()
