"""Django admin's allowed registries: the host is compared with the registry of every image reference
people type (lowercase host[:port], as docker reads it). A host typed with a scheme, a path or capitals was
stored as typed and matched no reference: the admin saw it saved, and every image from it was refused."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import AllowedRegistry
from tests.api.conftest import batch_spec


@pytest.fixture
def admin_client(client, world):
    client.force_login(world.admin)
    return client


def _add(admin_client, host: str):
    return admin_client.post(reverse("admin:jobs_allowedregistry_add"), {"host": host, "note": "", "pull_username": ""})


@pytest.mark.parametrize("typed", ["https://registry.lab:5000", "registry.lab:5000/", "registry.lab:5000/team", "a b"])
def test_a_host_no_image_reference_can_name_is_a_form_error(admin_client, world, typed):
    response = _add(admin_client, typed)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["host"]
    assert "registry.lab:5000" in errors["host"][0]  # it says what to type
    assert not AllowedRegistry.objects.filter(host__icontains="registry.lab").exists()


def test_a_host_in_capitals_is_stored_as_references_name_it_and_its_images_launch(admin_client, world):
    image = "registry.lab:5000/vision/train:1"
    refused = world.client("owner").post("/api/v1/workloads/", batch_spec(image=image), format="json")
    assert refused.status_code == 400
    response = _add(admin_client, "Registry.LAB:5000")
    assert response.status_code == 302
    assert AllowedRegistry.objects.filter(host="registry.lab:5000").exists()
    launched = world.client("owner").post("/api/v1/workloads/", batch_spec(image=image), format="json")
    assert launched.status_code == 201, launched.content


def _migrate(targets):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    targets = targets or executor.loader.graph.leaf_nodes()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


BEFORE_NORMALISING = [("jobs", "0038_catalog_home_template")]


@pytest.mark.django_db(transaction=True)
def test_hosts_saved_before_the_form_normalised_them_match_their_images_after_migrating(world):
    """Hosts an admin saved before the form read them as image references do (capitals, a scheme, a trailing
    slash) matched nothing, and still did after the form was fixed: the migration stores them as references
    name them, merging duplicates (the one with pull credentials is kept), and leaves what it cannot read."""
    old = _migrate(BEFORE_NORMALISING).get_model("jobs", "AllowedRegistry")
    old.objects.create(host="HTTPS://Registry.Lab:5000/", note="vision team")
    old.objects.create(host="registry.lab:5000", note="", pull_username="robot", pull_password_sealed="sealed")
    old.objects.create(host="https://registry.lab:5000", note="again")
    old.objects.create(host="GHCR.IO/", note="")
    old.objects.create(host="quay.io/team", note="a path: no registry is named so")
    tool = "ghcr.io/org/tool:2"
    assert world.client("owner").post("/api/v1/workloads/", batch_spec(image=tool), format="json").status_code == 400

    _migrate(None)  # every migration, as `manage.py migrate` does

    rows = {r.host: r for r in AllowedRegistry.objects.filter(host__icontains="registry.lab")}
    assert list(rows) == ["registry.lab:5000"]  # one row, not three
    merged = rows["registry.lab:5000"]
    assert (merged.pull_username, merged.pull_password_sealed) == ("robot", "sealed")
    assert merged.note == "vision team; again"
    assert AllowedRegistry.objects.filter(host="ghcr.io").exists()
    assert AllowedRegistry.objects.filter(host="quay.io/team").exists()  # left as it was, for an admin to fix
    for reference in ("registry.lab:5000/vision/train:1", tool):
        response = world.client("owner").post("/api/v1/workloads/", batch_spec(image=reference), format="json")
        assert response.status_code == 201, response.content
