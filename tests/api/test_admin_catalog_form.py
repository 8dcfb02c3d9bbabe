"""Django admin's catalog entries: the command, arguments and base-URL settings are JSON typed by the admin.
What the launch and the engine could not use (a number, a string, an object where a list is meant,
Infinity) or an emptied box is a form error naming the field, never a 500 and never a stored entry that
fails every launch from it later."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import CatalogImage


@pytest.fixture
def admin_client(client, world):
    client.force_login(world.admin)
    return client


def _form(image: CatalogImage, **changes: str) -> dict:
    data = {
        "reference": image.reference,
        "title": image.title,
        "description": "",
        "suits": "any",
        "default_command": '["python"]',
        "default_args": "[]",
        "default_port": "",
        "cuda_version": "",
        "enabled": "on",
        "base_url_args": "[]",
        "base_url_env": "{}",
    }
    return data | changes


@pytest.mark.parametrize(
    ("field", "typed", "says"),
    [
        ("default_command", "-1", "A list of strings"),
        ("default_command", '"python train.py"', "A list of strings"),
        ("default_command", "1e400", "A list of strings"),
        ("default_command", '["python", 3]', "A list of strings"),
        ("default_args", '{"a": 1}', "A list of strings"),
        ("base_url_args", "[null]", "A list of strings"),
        ("base_url_env", '["DIGITS_URL_PREFIX"]', "An object of variable names"),
        ("base_url_env", "1e400", "An object of variable names"),
        ("base_url_env", '{"DIGITS_URL_PREFIX": 5}', "An object of variable names"),
        ("base_url_env", '{"NOT A NAME": "{base_path}"}', "not a valid variable name"),
    ],
)
def test_json_a_launch_could_not_use_is_a_form_error_naming_the_field(admin_client, world, field, typed, says):
    image = world.catalog
    url = reverse("admin:jobs_catalogimage_change", args=[image.pk])
    response = admin_client.post(url, _form(image, **{field: typed}))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field]
    assert says in " ".join(errors[field])
    image.refresh_from_db()
    assert image.default_command == ["python"]


@pytest.mark.parametrize(("field", "empty"), [("default_command", []), ("default_args", []),
                                              ("base_url_args", []), ("base_url_env", {})])  # fmt: skip
def test_an_emptied_box_is_stored_as_empty(admin_client, world, field, empty):
    image = world.catalog
    url = reverse("admin:jobs_catalogimage_change", args=[image.pk])
    response = admin_client.post(url, _form(image, **{field: ""}))
    assert response.status_code == 302, response.context and response.context["adminform"].form.errors
    image.refresh_from_db()
    assert getattr(image, field) == empty


def test_a_new_entry_with_empty_boxes_is_added(admin_client, world):
    response = admin_client.post(
        reverse("admin:jobs_catalogimage_add"),
        _form(world.catalog, reference="nvcr.io/nvidia/tensorflow:24.01-tf2-py3", title="TensorFlow",
              default_command="", default_args="", base_url_args="", base_url_env=""),
    )  # fmt: skip
    assert response.status_code == 302, response.context and response.context["adminform"].form.errors
    added = CatalogImage.objects.get(title="TensorFlow")
    assert (added.default_command, added.base_url_env) == ([], {})
