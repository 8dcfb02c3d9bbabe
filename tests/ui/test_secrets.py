"""The secrets page without a cluster: who sees which names, who may delete, form errors naming the field,
and the value never in a response. Storing and deleting for real (the engine writes a Kubernetes Secret)
is in tests/integration/test_secrets.py; here no engine answers, so a valid store is shown as being
written, and the database holds its name only."""

from __future__ import annotations

import pytest
from django.urls import reverse
from kubernetes.client import ApiClient
from rest_framework.test import APIClient

from jobs.kube import objects
from jobs.models import SecretState, TeamSecret, Workload
from jobs.services.cluster.object_creation import spec_for
from tests.ui.test_launch import post

pytestmark = pytest.mark.django_db
VALUE = "sk-page-3e9b1d-never-shown"


@pytest.fixture
def stored(world):
    """olivia's personal secret, a shared one by maria (manager), tom's personal one, one in another team."""
    lab, other = world.team, world.other_team
    return {
        "mine": TeamSecret.objects.create(team=lab, owner=world.owner, name="olivia-key", k8s_name="s-olivia-key"),
        "shared": TeamSecret.objects.create(
            team=lab, owner=world.manager, name="hf-token", k8s_name="s-hf", shared=True
        ),
        "toms": TeamSecret.objects.create(team=lab, owner=world.teammate, name="tom-key", k8s_name="s-tom-key"),
        "outside": TeamSecret.objects.create(team=other, owner=world.outsider, name="x-key", k8s_name="s-x-key"),
    }


def names_on(page: str) -> set[str]:
    return {n for n in ("olivia-key", "hf-token", "tom-key", "x-key") if f'data-name="{n}"' in page}


def test_each_person_sees_their_own_and_the_teams_shared_names(login, world, stored):
    page = login(world.owner).get(reverse("secrets")).content.decode()
    assert names_on(page) == {"olivia-key", "hf-token"}
    # A plain member may delete their own, not the shared one.
    assert reverse("secret_delete", args=["olivia-key"]) in page
    assert reverse("secret_delete", args=["hf-token"]) not in page
    assert names_on(login(world.teammate).get(reverse("secrets")).content.decode()) == {"tom-key", "hf-token"}
    assert names_on(login(world.outsider).get(reverse("secrets")).content.decode()) == {"x-key"}
    # The top bar links the page.
    assert f'href="{reverse("secrets")}" aria-current="page"' in page


def test_the_value_field_is_never_filled_and_the_value_never_comes_back(login, world, stored):
    client = login(world.owner)
    # A bad name with a value: the form comes back with the error, without the value.
    response = client.post(reverse("secrets"), {"name": "Bad_Name!", "value": VALUE})
    assert response.status_code == 400
    page = response.content.decode()
    assert VALUE not in page
    assert 'name="value"' in page
    assert "value=" not in page.split('name="value"')[1].split(">")[0]
    assert not TeamSecret.objects.filter(name="Bad_Name!").exists()


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"name": "Bad_Name!", "value": VALUE}, "name", "lowercase letters, digits and"),
        ({"name": "", "value": VALUE}, "name", "This field is required."),
        ({"name": "ok-name", "value": ""}, "value", "This field is required."),
        ({"name": "ok-name", "value": VALUE, "shared": "on"}, "shared", "Only team managers can store secrets"),
        ({"name": "hf-token", "value": VALUE}, "name", "The team already shares a secret named hf-token"),
    ],
    ids=["bad-name", "no-name", "no-value", "member-shares", "clash-with-shared"],
)
def test_bad_input_names_the_field_and_stores_nothing(login, world, stored, data, field, message):
    before = set(TeamSecret.objects.values_list("id", flat=True))
    response = login(world.owner).post(reverse("secrets"), data)
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert field in errors
    assert any(message in e for e in errors[field]), errors
    page = response.content.decode()
    assert message.replace("'", "&#x27;") in page
    assert VALUE not in page
    assert set(TeamSecret.objects.values_list("id", flat=True)) == before


def test_without_the_engine_a_valid_store_shows_as_being_written(login, world, settings):
    settings.PORTAL_SECRET_CONFIRM_SECONDS = 0
    response = login(world.owner).post(reverse("secrets"), {"name": "new-key", "value": VALUE}, follow=True)
    assert response.status_code == 200
    page = response.content.decode()
    assert "Secret new-key is being written; a launch that uses it waits until it is." in page
    assert 'data-state="pending"' in page
    assert 'hx-trigger="every 2s"' in page  # the list refreshes itself until the engine has answered
    assert VALUE not in page
    secret = TeamSecret.objects.get(name="new-key")
    assert secret.state == SecretState.PENDING
    assert VALUE not in repr(TeamSecret.objects.filter(id=secret.id).values().get())


def test_a_secret_the_engine_could_not_write_says_why_and_a_launch_refuses_it(login, world, stored):
    TeamSecret.objects.filter(id=stored["mine"].id).update(state=SecretState.FAILED, message="Kubernetes refused it")
    client = login(world.owner)
    page = client.get(reverse("secrets")).content.decode()
    assert "Not written: Kubernetes refused it Store it again." in page
    refused = post(client, image="docker.io/library/python:3", name="with-failed", secrets=["olivia-key"])
    assert refused.status_code == 400
    assert any("olivia-key could not be stored" in e for e in refused.context["form"].errors["secrets"])
    assert not Workload.objects.filter(name="with-failed").exists()


def test_only_the_owner_or_a_manager_may_delete(login, world, stored):
    # A teammate does not even learn that tom's personal secret exists.
    assert login(world.owner).post(reverse("secret_delete", args=["tom-key"])).status_code == 404
    assert login(world.outsider).post(reverse("secret_delete", args=["hf-token"])).status_code == 404
    # A member sees the shared one but may not delete it.
    response = login(world.teammate).post(reverse("secret_delete", args=["hf-token"]), follow=True)
    assert "Only its owner or a team manager can delete this secret." in response.content.decode()
    assert TeamSecret.objects.filter(name="hf-token").exists()
    # GET does not delete.
    assert login(world.owner).get(reverse("secret_delete", args=["olivia-key"])).status_code == 405
    assert TeamSecret.objects.filter(name="olivia-key").exists()


def test_the_launch_form_offers_ones_own_and_shared_secrets_and_attaches_them(login, world, stored):
    client = login(world.owner)
    page = client.get(reverse("launch")).content.decode()
    offered = {n for n in ("olivia-key", "hf-token", "tom-key", "x-key") if f'name="secrets" value="{n}"' in page}
    assert offered == {"olivia-key", "hf-token"}
    assert f'href="{reverse("secrets")}"' in page
    # A name the user may not use (a teammate's personal one) is refused, naming the field; nothing stored.
    refused = post(client, image="docker.io/library/python:3", name="with-toms", secrets=["tom-key"])
    assert refused.status_code == 400
    assert "secrets" in refused.context["form"].errors
    assert not Workload.objects.filter(name="with-toms").exists()
    response = post(client, image="docker.io/library/python:3", name="with-secrets", secrets=["olivia-key", "hf-token"])
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    workload = Workload.objects.get(name="with-secrets")
    assert sorted(s["name"] for s in workload.secrets) == ["hf-token", "olivia-key"]


def test_the_api_asks_the_same_rule(world, stored):
    # Refused before the cluster is asked: a member may not delete the team's shared secret through the API either.
    api = APIClient()
    api.force_authenticate(world.teammate)
    refused = api.delete("/api/v1/secrets/hf-token/")
    assert refused.status_code == 400
    assert "name" in refused.json()["error"]["fields"]
    assert api.delete("/api/v1/secrets/olivia-key/").status_code == 404  # another member's: not even seen
    assert TeamSecret.objects.filter(name__in=["hf-token", "olivia-key"]).count() == 2


def test_the_launch_form_attaches_a_secret_as_an_environment_variable_too(login, world, stored):
    client = login(world.owner)
    page = client.get(reverse("launch")).content.decode()
    assert 'name="secret_env_olivia-key"' in page
    assert "Environment variable for olivia-key (optional)" in page
    response = post(
        client,
        image="docker.io/library/python:3",
        name="with-variable",
        secrets=["olivia-key", "hf-token"],
        **{"secret_env_olivia-key": " WANDB_API_KEY ", "secret_env_hf-token": ""},
    )
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    workload = Workload.objects.get(name="with-variable")
    assert sorted((s["name"], s["env"]) for s in workload.secrets) == [
        ("hf-token", ""),
        ("olivia-key", "WANDB_API_KEY"),
    ]
    # The pod gets it through secretKeyRef (the value is never in the spec), and both as files.
    pod = ApiClient().sanitize_for_serialization(objects.make_pod_template(spec_for(workload)))["spec"]
    env = [e for e in pod["containers"][0]["env"] if "valueFrom" in e]
    assert env == [{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "s-olivia-key", "key": "value"}}}]
    # Clone offers the same secrets with the same variable names.
    clone = client.get(reverse("launch") + f"?clone={workload.uid}").content.decode()
    assert 'name="secret_env_olivia-key" id="id_secret_env_olivia-key" value="WANDB_API_KEY"' in clone
    assert 'name="secrets" value="olivia-key" id="id_secrets_1" checked' in clone


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"secrets": ["olivia-key"], "secret_env_olivia-key": "1BAD-NAME"}, "'1BAD-NAME' is not a valid variable name"),
        ({"secrets": ["olivia-key"], "secret_env_olivia-key": "GPUPORTAL_X"}, "GPUPORTAL_X is set by the portal"),
        ({"secret_env_olivia-key": "TOKEN"}, "Tick olivia-key to attach it as $TOKEN"),
        (
            {"secrets": ["olivia-key", "hf-token"], "secret_env_olivia-key": "TOKEN", "secret_env_hf-token": "TOKEN"},
            "TOKEN is already the variable of",
        ),
        (
            {"secrets": ["olivia-key"], "secret_env_olivia-key": "TOKEN", "env_name": ["TOKEN"], "env_value": ["x"]},
            "TOKEN clashes with another variable",
        ),
    ],
    ids=["malformed", "reserved", "not-ticked", "twice", "clashes-with-plain-env"],
)
def test_a_bad_variable_name_for_a_secret_is_a_field_error(login, world, stored, fields, message):
    response = post(login(world.owner), image="docker.io/library/python:3", name="bad-variable", **fields)
    assert response.status_code == 400
    errors = response.context["form"].errors["secrets"]
    assert any(message in e for e in errors), errors
    page = response.content.decode()
    assert 'href="#id_secrets">Secrets</a>' in page  # the summary links to the field
    assert 'aria-invalid="true"' in page or "clashes" in message  # the row's own input is marked
    assert not Workload.objects.filter(name="bad-variable").exists()
