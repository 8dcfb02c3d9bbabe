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
