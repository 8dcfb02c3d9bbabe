"""Django admin's GPU types: sizes every workload of the type is rendered with must be ones the cluster
accepts. A scratch-disk size above the team namespaces' LimitRange maximum (TEAM_EPHEMERAL_STORAGE_DEFAULT)
is refused by Kubernetes for every pod of the type, so it is a form error naming the field, not a stored
type on which every launch then waits forever."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.urls import reverse


@pytest.fixture
def admin_client(client, world):
    client.force_login(world.admin)
    return client


def _form_data(admin_client, gpu_type, **changes) -> dict:
    page = admin_client.get(reverse("admin:jobs_gputype_change", args=[gpu_type.pk]))
    form = page.context["adminform"].form
    data = {}
    for name in form.fields:
        value = form[name].value()
        if isinstance(value, bool):
            if value:
                data[name] = "on"
            continue
        data[name] = "" if value is None else value
    return data | changes


@override_settings(TEAM_EPHEMERAL_STORAGE_DEFAULT="20Gi")
@pytest.mark.parametrize("field", ["ephemeral_storage_limit_mib", "ephemeral_storage_request_mib"])
def test_scratch_disk_above_the_namespaces_limit_range_is_a_form_error(admin_client, world, field):
    gpu_type = world.p100
    before = getattr(gpu_type, field)
    url = reverse("admin:jobs_gputype_change", args=[gpu_type.pk])
    response = admin_client.post(url, _form_data(admin_client, gpu_type, **{field: "40960"}))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field]
    assert "20480" in " ".join(errors[field])
    gpu_type.refresh_from_db()
    assert getattr(gpu_type, field) == before


@override_settings(TEAM_EPHEMERAL_STORAGE_DEFAULT="20Gi")
def test_scratch_disk_at_the_limit_range_maximum_is_saved(admin_client, world):
    gpu_type = world.p100
    url = reverse("admin:jobs_gputype_change", args=[gpu_type.pk])
    response = admin_client.post(url, _form_data(admin_client, gpu_type, ephemeral_storage_limit_mib="20480"))
    assert response.status_code == 302, response.context["adminform"].form.errors
    gpu_type.refresh_from_db()
    assert gpu_type.ephemeral_storage_limit_mib == 20480
