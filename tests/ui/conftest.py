"""The people and things every UI test uses (tests/world.py), workloads made to order, and signing in.
Data lives in the real test database."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import CatalogImage, State, Workload, WorkloadEvent
from tests.browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, screenshot  # noqa: F401 - re-exported
from tests.world import PASSWORD, Node, World, make_user, world_build  # noqa: F401 - re-exported

# The UI's world (tests/world.py): Lab (olivia and tom, members; maria, manager), Other (xavier), ada the
# superuser; P100s and K2s on one node each, and two catalog images.
UI_WORLD = {
    "gpu_types": {"p100": {"display_name": "Tesla P100"}, "k2": {"display_name": "Grid K2"}},
    "nodes": [Node("gpu-p100-1", "p100", gpus=4, in_use=1), Node("gpu-k2-1", "k2", gpus=2)],
    "quotas": {"team": {"p100": 2, "k2": 2}, "other_team": {"p100": 2}},
    "images": {
        "trainer": {
            "reference": "docker.io/library/python:3.12",
            "title": "Python 3.12",
            "description": "Plain Python for quick batch scripts.",
            "suits": CatalogImage.Suits.BATCH,
            "default_command": ["python", "-c"],
            "default_args": ["print('hello from a GPU')"],
        },
        "notebook": {
            "reference": "docker.io/jupyter/base-notebook:latest",
            "title": "Jupyter notebook",
            "description": "A notebook server on port 8888.",
            "suits": CatalogImage.Suits.SERVICE,
            "default_port": 8888,
        },
    },
}


@pytest.fixture
def world(db) -> World:
    return world_build(**UI_WORLD)


_counter = iter(range(1, 10**9))


def make_workload(world: World, *, owner=None, state: str = State.RUNNING, team=None, **fields) -> Workload:
    now = timezone.now()
    n = next(_counter)
    team = team or world.team
    defaults = {
        "team": team,
        "owner": owner or world.owner,
        "name": f"job-{n}",
        "kind": "batch",
        "image": "docker.io/library/python:3.12",
        "gpu_type": world.p100,
        "gpu_count": 1,
        "time_limit_seconds": 3600,
        "state": state,
        "namespace": team.namespace,
        "k8s_name": f"wl-job-{n}",
        "created_at": now - timedelta(minutes=n % 50),
    }
    if state in (State.RUNNING, State.SUCCEEDED, State.FAILED):
        defaults["started_at"] = now - timedelta(minutes=30)
        defaults["node_name"] = "gpu-p100-1"
    if state in State.final():
        defaults["finished_at"] = now - timedelta(minutes=5)
    defaults.update(fields)
    workload = Workload.objects.create(**defaults)
    WorkloadEvent.objects.create(workload=workload, to_state=State.QUEUED, reason="Submitted", message="Submitted.")
    return workload


@pytest.fixture
def login(client):
    def sign_in(user):
        client.force_login(user)
        return client

    return sign_in


# --- browser tests: the fixtures live in tests/browser.py (one Playwright for the whole session) ---


def sign_in(page, username: str, password: str = PASSWORD) -> None:
    page.goto("/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/")


@pytest.fixture
def engine_or_skip(request):
    """The engine (Celery worker, tracker, local GPU cluster) from main's `engine` fixture, if present."""
    try:
        return request.getfixturevalue("engine")
    except pytest.FixtureLookupError:
        pytest.skip("needs the `engine` fixture (the workload engine against the local GPU cluster)")
