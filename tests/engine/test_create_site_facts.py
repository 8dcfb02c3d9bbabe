"""The worker's create keeps the site facts it renders with (registries' pull Secrets, nodes with an unhealthy
GPU) while their version stands, and sees any change to them in the very next batch (migration 0034's
triggers: the ORM, bulk updates and raw SQL alike). Real PostgreSQL; the in-memory Kubernetes client."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.models import AllowedRegistry, GpuHealthMark, Kind, State, Workload
from jobs.services import provisioning
from jobs.services.cluster import object_creation
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admitted(monkeypatch):
    """A function that makes one admitted workload of a team whose namespace this worker knows to be usable."""
    team = TeamFactory(slug="vision")
    owner = MembershipFactory(team=team).user
    gpu = GpuTypeFactory(slug="p100")
    monkeypatch.setattr(provisioning, "_ready", {(team.namespace, "jobs")})
    made = iter(range(100))

    def one() -> Workload:
        return Workload.objects.create(
            team=team,
            owner=owner,
            name=f"train-{next(made)}",
            kind=Kind.BATCH,
            image="docker.io/x:1",
            gpu_type=gpu,
            gpu_count=1,
            time_limit_seconds=3600,
            state=State.SUBMITTING,
        )

    return one


def pod_of(fake_kube, workload: Workload) -> dict:
    workload.refresh_from_db()
    assert workload.state == State.PENDING
    (job,) = [obj for (kind, _, _), obj in fake_kube.objects.items() if kind == "Job" and workload.uid in str(obj)]
    return job["spec"]["template"]["spec"]


def avoided(pod: dict) -> list[str]:
    if "affinity" not in pod:
        return []
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return term["matchExpressions"][0]["values"]


def create(workload: Workload) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert object_creation.workloads_create_objects([workload.id]) == 1
    return len(captured.captured_queries)


def test_an_unhealthy_gpu_marked_between_two_batches_is_avoided_by_the_second(fake_kube, admitted):
    first = admitted()
    create(first)
    assert avoided(pod_of(fake_kube, first)) == []
    warm = create(admitted())  # the facts are known: neither the registries nor the marks are read
    with connection.cursor() as cursor:  # raw SQL, as an operator's psql would: no model signal
        cursor.execute(
            "INSERT INTO jobs_gpuhealthmark (node_name, gpu_uuid, cause, detail, marked_at, last_bad_at, "
            "healthy_reports, cleared_how) VALUES ('gpu-p100-1', '', 'xid', '', now(), now(), 0, '')"
        )
    marked = admitted()
    assert create(marked) == warm + 2  # the registries and the marks read again
    assert avoided(pod_of(fake_kube, marked)) == ["gpu-p100-1"]
    GpuHealthMark.objects.update(cleared_at=timezone.now())  # a bulk update: no model signal either
    cleared = admitted()
    create(cleared)
    assert avoided(pod_of(fake_kube, cleared)) == []


def test_a_registry_given_credentials_by_raw_sql_is_rendered_by_the_next_batch(fake_kube, admitted):
    AllowedRegistry.objects.create(host="docker.io")
    version = _version()
    assert object_creation.site_facts(version).pull_secrets == {}
    assert object_creation.site_facts(version) is object_creation.site_facts(version)  # kept while it stands
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_allowedregistry SET pull_username = 'bot', pull_password_sealed = 'sealed'")
    moved = _version()
    assert moved != version
    assert object_creation.site_facts(moved).pull_secrets == {
        "docker.io": AllowedRegistry.objects.get(host="docker.io").pull_secret_name
    }


def _version() -> str:
    from jobs import sql as jobs_sql

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {jobs_sql.site_facts_version()}")
        return cursor.fetchone()[0]
