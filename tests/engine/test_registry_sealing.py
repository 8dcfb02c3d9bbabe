"""Private registries' pull passwords are sealed to the engine's key (portal/sealing.py): admin seals on
save and never shows one back, the database holds only the sealed text, and the migration seals the
passwords stored in the clear before it. The engine opening one to write the pull Secret is in
tests/integration/test_secrets.py."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

from jobs.models import AllowedRegistry
from portal import sealing

pytestmark = pytest.mark.django_db
PASSWORD = "robot-pull-9c1e77-never-shown"
REPO = Path(__file__).resolve().parents[2]


def _add(admin_client, **fields):
    data = {"host": "registry.lab:5000", "note": "", "pull_username": "robot", "pull_password": PASSWORD, **fields}
    return admin_client.post(reverse("admin:jobs_allowedregistry_add"), data)


def test_admin_seals_the_password_and_never_shows_it_back(admin_client):
    response = _add(admin_client)
    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else response
    registry = AllowedRegistry.objects.get(host="registry.lab:5000")
    assert registry.has_credentials
    assert registry.pull_password_sealed.startswith(sealing.PREFIX)
    assert PASSWORD not in repr(AllowedRegistry.objects.filter(id=registry.id).values().get())
    assert sealing.unseal(registry.pull_password_sealed) == PASSWORD  # only the engine's key opens it
    page = admin_client.get(reverse("admin:jobs_allowedregistry_change", args=[registry.id])).content.decode()
    assert 'name="pull_password"' in page
    assert PASSWORD not in page
    assert registry.pull_password_sealed not in page
    listing = admin_client.get(reverse("admin:jobs_allowedregistry_changelist")).content.decode()
    assert PASSWORD not in listing
    assert sealing.PREFIX not in listing


def test_editing_keeps_replaces_or_removes_the_credentials(admin_client):
    _add(admin_client)
    registry = AllowedRegistry.objects.get(host="registry.lab:5000")
    change = reverse("admin:jobs_allowedregistry_change", args=[registry.id])
    first = registry.pull_password_sealed
    form = {"host": registry.host, "note": "lab", "pull_username": "robot", "pull_password": ""}
    assert admin_client.post(change, form).status_code == 302
    registry.refresh_from_db()
    assert registry.pull_password_sealed == first  # left empty: the stored one stays
    assert admin_client.post(change, {**form, "pull_password": "rotated"}).status_code == 302
    registry.refresh_from_db()
    assert sealing.unseal(registry.pull_password_sealed) == "rotated"
    assert admin_client.post(change, {**form, "pull_username": ""}).status_code == 302
    registry.refresh_from_db()
    assert not registry.has_credentials
    assert registry.pull_password_sealed == ""
    assert registry.pull_secret_name == ""


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"pull_username": ""}, "pull_username", "Give the pull username with the password"),
        ({"pull_password": ""}, "pull_password", "Give the pull password with the username"),
    ],
)
def test_half_credentials_name_the_field(admin_client, fields, field, message):
    response = _add(admin_client, **fields)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert any(message in e for e in errors[field]), errors
    assert PASSWORD not in response.content.decode()
    assert not AllowedRegistry.objects.exists()


def test_without_the_engines_public_key_nothing_is_stored(admin_client, settings):
    settings.PORTAL_SEAL_PUBLIC_KEY = ""
    response = _add(admin_client)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["pull_password"]
    assert any("no key to seal it" in e for e in errors), errors
    assert not AllowedRegistry.objects.exists()


def _migrate(database: Path, *target: str, keys: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_SEAL_")}
    env |= {"DEBUG": "1", "DATABASE_URL": f"sqlite:///{database}", **keys}
    return subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", *target],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_the_migration_seals_passwords_stored_in_the_clear(tmp_path):
    public, private = sealing.generate_keypair()
    database = tmp_path / "portal.sqlite3"
    assert _migrate(database, "jobs", "0016_sealed_secrets", keys={}).returncode == 0
    with sqlite3.connect(database) as db:
        db.execute(
            "INSERT INTO jobs_allowedregistry (host, note, pull_username, pull_password) VALUES (?, '', 'robot', ?)",
            ("registry.lab:5000", PASSWORD),
        )
    # Without the public key it stops, naming it, and changes nothing.
    refused = _migrate(database, keys={})
    assert refused.returncode != 0
    assert "set PORTAL_SEAL_PUBLIC_KEY for this migration" in refused.stderr
    with sqlite3.connect(database) as db:
        assert db.execute("SELECT pull_password FROM jobs_allowedregistry").fetchall() == [(PASSWORD,)]
    done = _migrate(database, keys={"PORTAL_SEAL_PUBLIC_KEY": public})
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(database) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(jobs_allowedregistry)")]
        (sealed,) = db.execute("SELECT pull_password_sealed FROM jobs_allowedregistry").fetchone()
    assert "pull_password" not in columns
    assert PASSWORD not in database.read_bytes().decode(errors="replace")
    assert sealing.unseal(sealed, private_key=private) == PASSWORD
