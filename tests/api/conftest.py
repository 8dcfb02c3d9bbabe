"""People and things every API test uses (tests/world.py): a team with an owner, a teammate and a manager;
an outsider in another team; a superuser in none. Each has a personal token."""

from __future__ import annotations

import contextlib

import pytest
from django.core.cache import caches

from tests.world import PEOPLE, Node, World, world_build

# The API's world (tests/world.py): Vision (olivia and tom, members; maria, manager), Language (oscar),
# ada the superuser, each with a token; P100s on two nodes, K80s (billed at half) on one, one catalog image.
API_WORLD = {
    "teams": ("Vision", "Language"),
    "people": {**PEOPLE, "outsider": "oscar"},
    "gpu_types": {
        "p100": {"display_name": "Tesla P100"},
        "k80": {"display_name": "Tesla K80", "billing_weight": "0.5", "enabled": True},
    },
    "nodes": [
        Node("gpu-p100-1", "p100", gpus=4),
        Node("gpu-p100-2", "p100", gpus=4, in_use=1),
        Node("gpu-k80-1", "k80", gpus=8),
    ],
    "quotas": {"team": {"p100": 4, "k80": 2}, "other_team": {"p100": 2}},
    "images": {
        "catalog": {"reference": "nvcr.io/nvidia/pytorch:24.01-py3", "title": "PyTorch", "default_command": ["python"]}
    },
    "tokens": True,
}


@pytest.fixture(autouse=True)
def _fresh_throttle_counters():
    # Without Redis the throttle lets everything through anyway.
    with contextlib.suppress(Exception):
        caches["api"].clear()


@pytest.fixture
def world(db) -> World:
    return world_build(**API_WORLD)


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
