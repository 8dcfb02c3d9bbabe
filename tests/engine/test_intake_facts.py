"""The intake reads its facts in one query while nothing changed, and sees any admin change at once.

Each case submits once (the process now holds a copy of the facts), makes one change an admin, the
inventory or a teammate could make, and submits again: the second submission must be judged by the new
facts. The change is made in the same transaction as the submissions, the hardest case for a cache
that trusts the database to say what changed (on PostgreSQL, where the suite runs), through the ORM,
in bulk and by raw SQL (site facts and each team's carry a version that triggers move: migrations 0034
and 0035), and once committed by another session.
"""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.models import AllowedRegistry, CatalogImage, Dataset, GpuNode, GpuType, Quota, TeamSecret
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


def team_version(team) -> str:
    """The team's version as a submission reads it; the function migration 0035 installs says the same."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {intake_facts._team_print_sql('%(team)s')}, {intake_facts.TEAM_PRINT_FUNCTION}(%(team)s)",
            {"team": team.id},
        )
        inline, by_function = cursor.fetchone()
    assert inline == by_function
    return inline


# pg_trigger.tgtype for migration 0035's two triggers on each team-facts table: the writer queues before any
# write (per statement, TRUNCATE included), and each row written moves its team's version (per row, after).
TEAM_WRITING = 2 | 4 | 8 | 16 | 32
TEAM_CHANGED = 1 | 4 | 8 | 16


def test_every_team_facts_table_queues_the_writer_first_and_moves_its_team_at_each_row():
    # Migration 0035 names the tables itself: a table added to TEAM_TABLES without a migration that puts the
    # triggers on it fails here.
    tables = [model._meta.db_table for model in intake_facts.TEAM_TABLES]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, t.tgname, t.tgtype FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE t.tgname IN ('gpuportal_team_facts_writing', 'gpuportal_team_facts_changed')"
        )
        found = {(table, name): tgtype for table, name, tgtype in cursor.fetchall()}
    expected = {}
    for table in tables:
        expected[(table, "gpuportal_team_facts_writing")] = TEAM_WRITING
        expected[(table, "gpuportal_team_facts_changed")] = TEAM_CHANGED
    assert {key: found.get(key) for key in expected} == expected


def test_every_write_of_a_teams_facts_moves_its_version_and_no_other_teams(world):
    team, other = world["team"], TeamFactory(slug="other", name="Other")
    QuotaFactory(team=other, gpu_type=world["p100"], max_gpus=2)
    others = team_version(other)
    seen = [team_version(team)]
    writes = [
        lambda: Quota.objects.filter(team=team).update(max_gpus=3),  # bulk, through the ORM
        lambda: TeamSecret.objects.filter(team=team).update(shared=True),
        lambda: world["dataset"].teams.remove(team),  # the grant's row of the many-to-many table
        lambda: world["dataset"].teams.add(team),
        lambda: TeamSecret.objects.filter(team=team).delete(),
    ]
    raw = [
        "UPDATE jobs_quota SET max_gpus = 4 WHERE team_id = %(team)s",
        "DELETE FROM jobs_dataset_teams WHERE team_id = %(team)s",
    ]
    for write in writes:
        write()
        seen.append(team_version(team))
    with connection.cursor() as cursor:
        for sql in raw:
            cursor.execute(sql, {"team": team.id})
            seen.append(team_version(team))
    assert len(set(seen)) == len(seen)
    assert team_version(other) == others
    # A statement that changes no row of the team leaves its version; the site's moves for none of these.
    site = site_version()
    Quota.objects.filter(team=team, max_gpus=99).update(max_gpus=1)
    assert team_version(team) == seen[-1]
    assert site_version() == site


def test_a_quota_moved_to_another_team_moves_both_and_truncate_moves_every_team(world):
    team, other = world["team"], TeamFactory(slug="other", name="Other")
    before = (team_version(team), team_version(other))
    assert before[1] == "v0"  # no quota, grant or secret written yet
    Quota.objects.filter(team=team).update(team=other)
    moved = (team_version(team), team_version(other))
    assert moved[0] != before[0]
    assert moved[1] != before[1]
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the test's inserts' deferred checks, else no TRUNCATE
        cursor.execute("TRUNCATE jobs_quota")
    assert team_version(team) not in moved
    assert team_version(other) not in moved


# pg_trigger.tgtype: BEFORE (2), INSERT (4), DELETE (8), UPDATE (16), TRUNCATE (32); ROW (1) unset: per statement.
BEFORE_EVERY_WRITE_PER_STATEMENT = 2 | 4 | 8 | 16 | 32


def test_every_site_facts_table_moves_the_version_before_any_write():
    # Migration 0034 names the tables itself: a table added to FACT_TABLES without a migration that puts
    # the trigger on it fails here.
    tables = [model._meta.db_table for model in intake_facts.FACT_TABLES]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, t.tgtype FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE t.tgname = 'gpuportal_site_facts_changed'"
        )
        found = dict(cursor.fetchall())
    assert {table: found.get(table) for table in tables} == dict.fromkeys(tables, BEFORE_EVERY_WRITE_PER_STATEMENT)


def site_version() -> str:
    """The version as a submission reads it; the function migration 0034 installs says the same."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {intake_facts._site_print_sql()}, {intake_facts.SITE_PRINT_FUNCTION}()")
        inline, by_function = cursor.fetchone()
    assert inline == by_function
    return inline


def test_every_statement_that_writes_site_facts_gets_a_version_of_its_own(world):
    # Even in one transaction, and even when it changes no row: a number from a sequence is never reused,
    # so a copy read in a transaction that is then rolled back never matches a later version.
    seen = [site_version()]
    with connection.cursor() as cursor:
        for sql in (
            "UPDATE jobs_gpunode SET ready = ready",
            "UPDATE jobs_gpunode SET ready = ready WHERE false",
            "DELETE FROM jobs_dataset WHERE false",
        ):
            cursor.execute(sql)
            seen.append(site_version())
    assert len(set(seen)) == len(seen)
    # The team's facts move nothing here.
    Quota.objects.filter(team=world["team"]).update(max_gpus=3)
    assert site_version() == seen[-1]


def disable_type(world):
    world["p100"].enabled = False
    world["p100"].save()


def lower_quota(world):
    Quota.objects.filter(team=world["team"]).update(max_gpus=1)


def node_not_ready(world):
    GpuNode.objects.filter(name="gpu-p100-1").update(ready=False)


def withdraw_image(world):
    CatalogImage.objects.filter(id=world["image"].id).update(enabled=False)


def disable_type_in_bulk(world):
    GpuType.objects.all().update(enabled=False)


def node_not_ready_by_raw_sql(world):
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_gpunode SET ready = false WHERE name = %s", ["gpu-p100-1"])


def nodes_gone_by_raw_sql(world):
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_gpunode")


def withdraw_image_by_raw_sql(world):
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_catalogimage SET enabled = false")


def lower_quota_by_raw_sql(world):
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_quota SET max_gpus = 1 WHERE team_id = %s", [world["team"].id])


def quotas_truncated(world):
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the test's inserts' deferred checks, else no TRUNCATE
        cursor.execute("TRUNCATE jobs_quota")


def leave_team(world):
    world["team"].memberships.filter(user=world["owner"]).delete()


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (disable_type, "gpu_type", "currently disabled"),
        (lower_quota, "gpu_count", "quota for Tesla P100 is 1"),
        (lower_quota_by_raw_sql, "gpu_count", "quota for Tesla P100 is 1"),
        (quotas_truncated, "gpu_type", "no quota for Tesla P100"),
        (node_not_ready, "gpu_count", "No ready Tesla P100 node"),
        (withdraw_image, "catalog_image", "no longer offered"),
        (disable_type_in_bulk, "gpu_type", "currently disabled"),
        (node_not_ready_by_raw_sql, "gpu_count", "No ready Tesla P100 node"),
        (nodes_gone_by_raw_sql, "gpu_count", "No ready Tesla P100 node"),
        (withdraw_image_by_raw_sql, "catalog_image", "no longer offered"),
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


@pytest.mark.parametrize(
    "sql",
    [
        "TRUNCATE jobs_allowedregistry",
        "UPDATE jobs_allowedregistry SET host = 'ghcr.io'",
    ],
)
def test_registries_and_datasets_changed_by_raw_sql_are_seen_at_once(world, sql):
    custom = {"catalog_image": None, "image": "docker.io/library/python:3.12"}
    submit(world, **custom, datasets=["imagenet"])
    with connection.cursor() as cursor:
        cursor.execute(sql)
        cursor.execute("UPDATE jobs_dataset SET enabled = false")
    with pytest.raises(SubmissionInvalid) as refused:
        submit(world, **custom, datasets=["imagenet"])
    assert set(refused.value.errors) == {"image", "datasets"}


@pytest.mark.django_db(transaction=True)
def test_a_change_committed_by_another_session_is_seen_by_the_next_submission(world):
    # The other session (a thread has a connection of its own) writes and commits while this process holds
    # a copy of the facts read before.
    import threading

    from django.db import connections

    submit(world)

    def inventory_says_not_ready() -> None:
        try:
            GpuNode.objects.filter(name="gpu-p100-1").update(ready=False)
        finally:
            connections.close_all()

    other = threading.Thread(target=inventory_says_not_ready)
    other.start()
    other.join()
    with pytest.raises(SubmissionInvalid) as refused:
        submit(world, name="after")
    assert "No ready Tesla P100 node" in " ".join(refused.value.errors["gpu_count"])


@pytest.mark.django_db(transaction=True)
def test_two_writers_of_one_teams_facts_queue_instead_of_deadlocking(world):
    # An admin's edit that writes a quota and then a secret of the team, and meanwhile a teammate's (or the
    # worker's) write of that secret alone. Were each row's trigger the first to lock the team's version
    # row, the admin's transaction would hold it and wait for the secret's row, which the other holds while
    # it waits for the version: PostgreSQL would fail one of them. Both queue on the facts' version row
    # before their first row instead, so the second waits for the first and both are stored.
    import threading

    from django.db import connections, transaction

    secret = TeamSecret.objects.get(team=world["team"])
    admin_wrote_quota, teammate_waits = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def admin() -> None:
        try:
            with transaction.atomic():
                Quota.objects.filter(team=world["team"]).update(max_gpus=6)
                admin_wrote_quota.set()
                assert teammate_waits.wait(30)
                TeamSecret.objects.filter(id=secret.id).update(message="admin")
        except BaseException as exc:  # handed to the test's thread
            failures.append(exc)
        finally:
            connections.close_all()

    def teammate() -> None:
        try:
            TeamSecret.objects.filter(id=secret.id).update(message="teammate")
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    first = threading.Thread(target=admin)
    first.start()
    assert admin_wrote_quota.wait(30)
    second = threading.Thread(target=teammate)
    second.start()
    with connection.cursor() as cursor:  # until the teammate's statement waits for a lock
        for _ in range(300):
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                ["UPDATE%jobs_teamsecret%"],
            )
            if cursor.fetchone()[0]:
                break
            time.sleep(0.02)
        else:
            pytest.fail("the teammate's write never waited for the admin's transaction")
    teammate_waits.set()
    first.join(30)
    second.join(30)
    assert failures == []
    secret.refresh_from_db()
    assert secret.message == "teammate"  # it waited for the admin's commit, then wrote
    assert Quota.objects.get(team=world["team"]).max_gpus == 6


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
