"""The intake reads its facts in one query while nothing changed, and sees any admin change at once.

Each case submits once (the process now holds a copy of the facts), makes one change an admin, the
inventory or a teammate could make, and submits again: the second submission must be judged by the new
facts. The change is made in the same transaction as the submissions, the hardest case for a cache
that trusts the database to say what changed (on PostgreSQL, where the suite runs).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.models import AllowedRegistry, CatalogImage, Dataset, GpuNode, Quota, TeamSecret
from jobs.services.submission import intake_facts
from jobs.services.submission.intake import workload_submit
from jobs.services.validation import SubmissionInvalid
from tests.engine.factories import GpuTypeFactory, MembershipFactory, QuotaFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    team = TeamFactory(slug="lab", name="Lab")
    owner = MembershipFactory(team=team, user=UserFactory(username="owner")).user
    p100 = GpuTypeFactory(slug="p100", display_name="Tesla P100")
    QuotaFactory(team=team, gpu_type=p100, max_gpus=8)
    GpuNode.objects.create(
        name="gpu-p100-1", gpu_type=p100, gpus_capacity=4, gpus_allocatable=4, ready=True, last_seen_at=timezone.now()
    )
    AllowedRegistry.objects.create(host="docker.io")
    dataset = Dataset.objects.create(name="imagenet", claim_name="imagenet")
    dataset.teams.add(team)
    TeamSecret.objects.create(team=team, owner=owner, name="wandb", k8s_name="gpuportal-secret-wandb")
    image = CatalogImage.objects.create(reference="docker.io/lab/train:1", title="Train")
    return {"team": team, "owner": owner, "p100": p100, "dataset": dataset, "image": image}


def submit(world, **spec):
    spec = {"catalog_image": world["image"].id, "gpu_type": "p100", "gpu_count": 2, **spec}
    return workload_submit(team=world["team"], owner=world["owner"], spec=spec)


def test_nothing_changed_costs_one_query(world):
    submit(world)
    with CaptureQueriesContext(connection) as captured:
        snapshot = intake_facts.snapshot(team=world["team"], user=world["owner"])
    assert len(captured.captured_queries) == 1
    assert snapshot.role == "member"
    assert snapshot.gpu_types()["p100"].quota == 8


def test_the_installed_fingerprint_functions_compute_what_intake_facts_would(world):
    # Migration 0020 holds a copy of the fingerprints' SQL: a table added to SITE_TABLES or TEAM_TABLES
    # without a migration that replaces the functions makes them differ here.
    team_id = world["team"].id
    site, team = intake_facts.SITE_PRINT_FUNCTION, intake_facts.TEAM_PRINT_FUNCTION
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {site}(), {intake_facts._fingerprint_sql(intake_facts.SITE_TABLES)}, {team}(%s), "
            f"{intake_facts._fingerprint_sql(intake_facts.TEAM_TABLES, ' WHERE team_id = %s')}",
            [team_id] * (1 + len(intake_facts.TEAM_TABLES)),
        )
        by_function_site, inline_site, by_function_team, inline_team = cursor.fetchone()
    assert by_function_site == inline_site
    assert by_function_team == inline_team
    assert inline_team.count("/") == len(intake_facts.TEAM_TABLES) - 1


def disable_type(world):
    world["p100"].enabled = False
    world["p100"].save()


def lower_quota(world):
    Quota.objects.filter(team=world["team"]).update(max_gpus=1)


def node_not_ready(world):
    GpuNode.objects.filter(name="gpu-p100-1").update(ready=False)


def withdraw_image(world):
    CatalogImage.objects.filter(id=world["image"].id).update(enabled=False)


def leave_team(world):
    world["team"].memberships.filter(user=world["owner"]).delete()


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (disable_type, "gpu_type", "currently disabled"),
        (lower_quota, "gpu_count", "quota for Tesla P100 is 1"),
        (node_not_ready, "gpu_count", "No ready Tesla P100 node"),
        (withdraw_image, "catalog_image", "no longer offered"),
        (leave_team, "team", "not a member"),
    ],
)
def test_a_change_is_seen_by_the_very_next_submission(world, change, field, words):
    submit(world)
    change(world)
    with pytest.raises(SubmissionInvalid) as refused:
        submit(world)
    assert words in " ".join(refused.value.errors[field])


def test_registries_datasets_and_secrets_taken_away_are_seen_at_once(world):
    custom = {"catalog_image": None, "image": "docker.io/library/python:3.12"}
    submit(world, **custom, datasets=["imagenet"], secrets=["wandb"])
    AllowedRegistry.objects.all().delete()
    world["dataset"].teams.clear()
    TeamSecret.objects.all().delete()
    with pytest.raises(SubmissionInvalid) as refused:
        submit(world, **custom, datasets=["imagenet"], secrets=["wandb"])
    assert set(refused.value.errors) == {"image", "datasets", "secrets"}


def test_a_new_gpu_type_and_its_quota_are_usable_at_once(world):
    submit(world)
    k2 = GpuTypeFactory(slug="k2", display_name="GRID K2")
    QuotaFactory(team=world["team"], gpu_type=k2, max_gpus=4)
    GpuNode.objects.create(
        name="gpu-k2-1", gpu_type=k2, gpus_capacity=8, gpus_allocatable=8, ready=True, last_seen_at=timezone.now()
    )
    assert submit(world, gpu_type="k2").gpu_type_id == k2.id


def test_a_submission_whose_uid_is_taken_is_stored_under_another_with_one_first_entry(world, monkeypatch):
    from jobs.models import Workload, WorkloadEvent
    from jobs.models import workloads as workloads_model

    taken = submit(world)
    draws = iter([taken.uid, taken.uid, "0123456789abcdef"])
    monkeypatch.setattr(workloads_model, "new_uid", lambda: next(draws))
    fresh = submit(world, name="second")
    assert fresh.uid == "0123456789abcdef"
    assert Workload.objects.count() == 2
    # The store that met the taken uid wrote no timeline entry: each workload has its own "Submitted" only.
    assert WorkloadEvent.objects.filter(workload=taken, reason="Submitted").count() == 1
    assert WorkloadEvent.objects.filter(workload=fresh, reason="Submitted").count() == 1
    assert "Tesla P100" in WorkloadEvent.objects.get(workload=fresh, reason="Submitted").message
