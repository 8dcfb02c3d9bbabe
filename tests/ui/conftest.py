"""Three people for every UI test: an owner and a teammate in the Lab team, and an outsider in another
team who must see nothing of Lab's work. Data lives in the real test database."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from django.utils import timezone

from jobs.models import (
    AllowedRegistry,
    CatalogImage,
    GpuNode,
    GpuType,
    Membership,
    Quota,
    Role,
    State,
    Team,
    Workload,
    WorkloadEvent,
)
from tests.browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, screenshot  # noqa: F401 - re-exported

PASSWORD = "correct-horse-battery-staple"


@pytest.fixture(autouse=True, scope="session")
def _ui_settings():
    # The suite runs with DEBUG off, where the manifest storage wants `collectstatic` first; and hashing
    # four passwords per test with the production hasher would dominate the suite's time. Session-wide,
    # and never through the function-scoped `settings` fixture: the engine's session fixtures change
    # settings too, and must not be undone when the first test that started them ends.
    override = override_settings(
        STORAGES={
            "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
            "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        },
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
    )
    override.enable()
    yield
    override.disable()


@dataclass
class World:
    lab: Team
    other: Team
    owner: object
    teammate: object
    manager: object
    outsider: object
    p100: GpuType
    k2: GpuType
    notebook: CatalogImage
    trainer: CatalogImage


def make_user(username: str):
    return get_user_model().objects.create_user(username, f"{username}@example.org", PASSWORD)


@pytest.fixture
def world(db) -> World:
    now = timezone.now()
    p100 = GpuType.objects.create(slug="p100", display_name="Tesla P100", node_label_value="p100")
    k2 = GpuType.objects.create(slug="k2", display_name="Grid K2", node_label_value="k2")
    # update_or_create: in browser tests these rows are committed, and the suite's running engine (its
    # inventory sync) may already have stored the local cluster's node of the same name.
    GpuNode.objects.update_or_create(
        name="gpu-p100-1",
        defaults={
            "gpu_type": p100, "gpus_allocatable": 4, "gpus_capacity": 4, "gpus_in_use": 1, "ready": True,
            "last_seen_at": now,
        },
    )  # fmt: skip
    GpuNode.objects.update_or_create(
        name="gpu-k2-1",
        defaults={"gpu_type": k2, "gpus_allocatable": 2, "gpus_capacity": 2, "ready": True, "last_seen_at": now},
    )
    lab = Team.objects.create(name="Lab", slug="lab")
    other = Team.objects.create(name="Other", slug="other")
    Quota.objects.create(team=lab, gpu_type=p100, max_gpus=2)
    Quota.objects.create(team=lab, gpu_type=k2, max_gpus=2)
    Quota.objects.create(team=other, gpu_type=p100, max_gpus=2)
    AllowedRegistry.objects.create(host="docker.io")
    trainer = CatalogImage.objects.create(
        reference="docker.io/library/python:3.12",
        title="Python 3.12",
        description="Plain Python for quick batch scripts.",
        suits=CatalogImage.Suits.BATCH,
        default_command=["python", "-c"],
        default_args=["print('hello from a GPU')"],
    )
    notebook = CatalogImage.objects.create(
        reference="docker.io/jupyter/base-notebook:latest",
        title="Jupyter notebook",
        description="A notebook server on port 8888.",
        suits=CatalogImage.Suits.SERVICE,
        default_port=8888,
    )
    owner, teammate, manager, outsider = (make_user(n) for n in ("olivia", "tom", "maria", "xavier"))
    Membership.objects.create(user=owner, team=lab, role=Role.MEMBER)
    Membership.objects.create(user=teammate, team=lab, role=Role.MEMBER)
    Membership.objects.create(user=manager, team=lab, role=Role.MANAGER)
    Membership.objects.create(user=outsider, team=other, role=Role.MEMBER)
    return World(lab, other, owner, teammate, manager, outsider, p100, k2, notebook, trainer)


_counter = iter(range(1, 10**9))


def make_workload(world: World, *, owner=None, state: str = State.RUNNING, team=None, **fields) -> Workload:
    now = timezone.now()
    n = next(_counter)
    team = team or world.lab
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
