from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from jobs.models import GpuNode, Kind, State, Workload
from telemetry.services.tokens import agent_token_issue
from tests.engine.factories import GpuTypeFactory, MembershipFactory, QuotaFactory, TeamFactory, UserFactory


@pytest.fixture(autouse=True)
def _plain_static_files(settings):
    # The suite runs with DEBUG off, whose manifest storage needs `collectstatic` first.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@dataclass
class People:
    team: Any
    owner: Any
    teammate: Any
    outsider: Any
    p100: Any


@pytest.fixture
def people(db) -> People:
    team = TeamFactory(slug="lab", name="Lab")
    owner = MembershipFactory(team=team, user=UserFactory(username="owner")).user
    teammate = MembershipFactory(team=team, user=UserFactory(username="mate")).user
    outsider = MembershipFactory(team=TeamFactory(slug="other"), user=UserFactory(username="stranger")).user
    p100 = GpuTypeFactory(slug="p100", display_name="Tesla P100")
    QuotaFactory(team=team, gpu_type=p100, max_gpus=8)
    GpuNode.objects.create(
        name="gpu-p100-1", gpu_type=p100, gpus_capacity=4, gpus_allocatable=4, ready=True, last_seen_at=timezone.now()
    )
    return People(team=team, owner=owner, teammate=teammate, outsider=outsider, p100=p100)


@pytest.fixture
def agent_token(db) -> str:
    _row, token = agent_token_issue(name="gpu-p100-1's agent", node="gpu-p100-1")
    return token


def running_workload(
    people: People, *, name: str = "train", kind: str = Kind.BATCH, gpus: int = 2, **fields
) -> Workload:
    started = fields.pop("started_at", timezone.now() - timedelta(minutes=10))
    if fields.get("state") in State.final():
        fields.setdefault("finished_at", timezone.now())  # a finished workload that started has an end
    return Workload.objects.create(
        team=people.team,
        owner=people.owner,
        name=name,
        kind=kind,
        image="nvidia/cuda:12.2.0-base-ubuntu22.04",
        gpu_type=people.p100,
        gpu_count=gpus,
        time_limit_seconds=24 * 3600,
        state=fields.pop("state", State.RUNNING),
        node_name="gpu-p100-1",
        pod_name=f"{name}-pod",
        pod_uid=fields.pop("pod_uid", str(uuid.uuid4())),
        started_at=started,
        **fields,
    )
