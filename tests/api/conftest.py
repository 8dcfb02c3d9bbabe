"""People and things every API test uses: a team with an owner, a teammate and a manager; an outsider in
another team; a superuser in none. Each has a personal token."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.utils import timezone
from rest_framework.test import APIClient

from api.tokens import token_create
from jobs.models import AllowedRegistry, CatalogImage, GpuNode, GpuType, Membership, Quota, Role, Team


@dataclass
class World:
    team: Team
    other_team: Team
    p100: GpuType
    k80: GpuType
    catalog: CatalogImage
    owner: object
    teammate: object
    manager: object
    outsider: object
    admin: object
    tokens: dict

    def client(self, who: str | None) -> APIClient:
        client = APIClient()
        if who is not None:
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.tokens[who]}")
        return client


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    # The real hasher takes a good part of a second per user on CI machines; these users are test props.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _static_without_manifest(settings):
    # Production settings (DEBUG=0) want collectstatic's manifest; pages under test need only the names.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture(autouse=True)
def _fresh_throttle_counters():
    # Without Redis the throttle lets everything through anyway.
    with contextlib.suppress(Exception):
        caches["api"].clear()


@pytest.fixture
def world(db) -> World:
    users = get_user_model().objects
    team = Team.objects.create(name="Vision", slug="vision")
    other = Team.objects.create(name="Language", slug="language")
    p100 = GpuType.objects.create(slug="p100", display_name="Tesla P100", node_label_value="p100")
    k80 = GpuType.objects.create(
        slug="k80", display_name="Tesla K80", node_label_value="k80", billing_weight="0.5", enabled=True
    )
    now = timezone.now()
    GpuNode.objects.create(
        name="gpu-p100-1", gpu_type=p100, gpus_capacity=4, gpus_allocatable=4, ready=True, last_seen_at=now
    )
    GpuNode.objects.create(
        name="gpu-p100-2",
        gpu_type=p100,
        gpus_capacity=4,
        gpus_allocatable=4,
        gpus_in_use=1,
        ready=True,
        last_seen_at=now,
    )
    GpuNode.objects.create(
        name="gpu-k80-1", gpu_type=k80, gpus_capacity=8, gpus_allocatable=8, ready=True, last_seen_at=now
    )
    Quota.objects.create(team=team, gpu_type=p100, max_gpus=4)
    Quota.objects.create(team=team, gpu_type=k80, max_gpus=2)
    Quota.objects.create(team=other, gpu_type=p100, max_gpus=2)
    AllowedRegistry.objects.create(host="docker.io")
    catalog = CatalogImage.objects.create(
        reference="nvcr.io/nvidia/pytorch:24.01-py3", title="PyTorch", default_command=["python"]
    )
    owner = users.create_user("olivia", password="pw-olivia-1")
    teammate = users.create_user("tom", password="pw-tom-1")
    manager = users.create_user("maria", password="pw-maria-1")
    outsider = users.create_user("oscar", password="pw-oscar-1")
    admin = users.create_superuser("ada", password="pw-ada-1", email="ada@example.org")
    Membership.objects.create(user=owner, team=team)
    Membership.objects.create(user=teammate, team=team)
    Membership.objects.create(user=manager, team=team, role=Role.MANAGER)
    Membership.objects.create(user=outsider, team=other)
    people = {"owner": owner, "teammate": teammate, "manager": manager, "outsider": outsider, "admin": admin}
    tokens = {who: token_create(user=user, name=f"{who} laptop").raw for who, user in people.items()}
    return World(team=team, other_team=other, p100=p100, k80=k80, catalog=catalog, tokens=tokens, **people)


def batch_spec(**overrides) -> dict:
    spec = {
        "name": "train",
        "image": "docker.io/library/python:3.12",
        "gpu_type": "p100",
        "gpu_count": 1,
        "command": ["python", "-c", "print(1)"],
    }
    spec.update(overrides)
    return spec


@pytest.fixture
def submit(world):
    """Submit through the API as someone; returns the response body (asserting 201)."""

    def _submit(who: str = "owner", **overrides) -> dict:
        response = world.client(who).post("/api/v1/workloads/", batch_spec(**overrides), format="json")
        assert response.status_code == 201, response.content
        return response.json()

    return _submit
