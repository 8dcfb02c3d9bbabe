"""A submit batch (jobs.services.cluster.object_creation.workloads_create_objects) against the in-memory Kubernetes
client (tests/engine/fake_kube.py): its creates go out together, a batch that takes longer than the sweep's
patience is not handed over a second time while it is still creating, and one refused create fails only
its own workload."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from kubernetes.client.exceptions import ApiException

from jobs.models import Kind, State, Workload, WorkloadEvent
from jobs.services import lifecycle, provisioning
from jobs.services.cluster import object_creation
from jobs.services.queue import preemption
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def submitting(monkeypatch) -> list[Workload]:
    """Six admitted workloads of one team, whose namespace this worker already knows to be usable."""
    team = TeamFactory(slug="vision")
    owner = MembershipFactory(team=team).user
    gpu = GpuTypeFactory(slug="p100")
    monkeypatch.setattr(provisioning, "_ready", {(team.namespace, "jobs")})
    return [
        Workload.objects.create(
            team=team,
            owner=owner,
            name=f"train-{i}",
            kind=Kind.BATCH,
            image="docker.io/x:1",
            gpu_type=gpu,
            gpu_count=1,
            time_limit_seconds=3600,
            state=State.SUBMITTING,
        )
        for i in range(6)
    ]


@pytest.mark.django_db(transaction=True)  # the sweep runs beside the batch, on a connection of its own
def test_a_batch_slower_than_the_stuck_time_is_not_handed_over_again_while_it_creates(fake_kube, submitting, settings):
    settings.PORTAL_STUCK_SUBMIT_SECONDS = 0.6
    handed_over: list[int] = []
    started: list[float] = []
    lock = threading.Lock()

    def slow(kind, body) -> None:  # every Job create takes 1 s; the sweep runs 0.8 s into the batch
        if kind == "Secret":
            return  # each batch job's token Secret, created just before its Job: instant here
        with lock:
            first = not started
            started.append(time.monotonic())
        time.sleep(0.8)
        if first:
            try:
                handed_over.append(lifecycle.sweep()["resubmitted"])
            finally:
                connection.close()
        time.sleep(0.2)

    fake_kube.on_create = slow
    began = time.monotonic()
    assert object_creation.workloads_create_objects([w.id for w in submitting]) == len(submitting)
    assert handed_over == [0]
    assert len(fake_kube.names("Job")) == len(submitting)
    assert set(Workload.objects.filter(id__in=[w.id for w in submitting]).values_list("state", flat=True)) == {
        State.PENDING
    }
    # The six creates went out together, not one after another.
    assert max(started) - began < 0.5


@pytest.mark.django_db(transaction=True)
def test_a_batch_handed_over_again_is_marked_before_it_creates(fake_kube, submitting, settings):
    # The sweep gave these back after their first worker died: their mark is old. A fresh batch is not
    # marked again at its start (its admission just marked it); this one must be, or a sweep running
    # while it creates would hand it over a third time.
    settings.PORTAL_STUCK_SUBMIT_SECONDS = 30
    Workload.objects.filter(id__in=[w.id for w in submitting]).update(updated_at=timezone.now() - timedelta(minutes=5))
    handed_over: list[int] = []

    def sweep_at_first_create(kind, body) -> None:
        if not handed_over:
            try:
                handed_over.append(lifecycle.sweep()["resubmitted"])
            finally:
                connection.close()

    fake_kube.on_create = sweep_at_first_create
    assert object_creation.workloads_create_objects([w.id for w in submitting]) == len(submitting)
    assert handed_over
    assert set(handed_over) == {0}  # every create ran a sweep: none handed anything over
    assert len(fake_kube.names("Job")) == len(submitting)


def test_a_create_kubernetes_refuses_fails_its_own_workload_and_the_others_are_created(fake_kube, submitting):
    refused = submitting[2]

    def refuse(kind, body) -> None:
        if body["metadata"]["labels"]["gpuportal.dev/workload"] == refused.uid:
            raise ApiException(status=422, reason="Unprocessable Entity")

    fake_kube.on_create = refuse
    moved_to_pending = object_creation.workloads_create_objects([w.id for w in submitting])
    assert moved_to_pending == len(submitting) - 1
    states = dict(Workload.objects.filter(id__in=[w.id for w in submitting]).values_list("id", "state"))
    assert states.pop(refused.id) == State.FAILED
    assert set(states.values()) == {State.PENDING}
    assert len(fake_kube.names("Job")) == len(submitting) - 1


def test_a_preempted_attempt_and_an_ended_workload_lose_their_objects_with_their_own_grace(
    fake_kube, submitting, settings
):
    settings.PORTAL_PREEMPT_GRACE_SECONDS = 30
    preempted, cancelled = submitting[:2]
    object_creation.workloads_create_objects([preempted.id, cancelled.id])
    preempted.refresh_from_db()
    cancelled.refresh_from_db()
    namespace = preempted.namespace
    preemption.delete_preempted_objects(preempted.id, preempted.k8s_name)
    object_creation.workload_delete_objects(cancelled)
    assert fake_kube.grace_seconds == {
        ("Job", namespace, preempted.k8s_name): 30,
        ("Job", namespace, cancelled.k8s_name): object_creation.DELETE_GRACE_SECONDS,
    }
    assert fake_kube.names("Job") == []
    note = WorkloadEvent.objects.filter(workload=preempted, reason="PreemptionStop").get()
    assert (
        note.message
        == f"Kubernetes asked to stop {preempted.k8s_name}: SIGTERM sent, killed after 30 s if still running."
    )
    object_creation.workload_delete_objects(cancelled)  # again: nothing left is fine


FORBIDDEN = (
    'persistentvolumeclaims is forbidden: User "system:serviceaccount:portal-system:gpuportal" cannot create '
    'resource "persistentvolumeclaims" in API group "" in the namespace "gpuportal-vision"'
)


def test_a_namespace_not_yet_set_up_reads_as_words_never_as_kubernetes_text(fake_kube, submitting, monkeypatch):
    """The first launch in a new team namespace races its set-up: RBAC answers 403 for a moment. The owner
    reads that the portal is preparing the team's space, on the workload's page and through the API."""
    import json

    from rest_framework.test import APIClient

    def forbidden_with_body(kind, body) -> None:
        exc = ApiException(status=403, reason="Forbidden")
        exc.body = json.dumps({"kind": "Status", "message": FORBIDDEN, "reason": "Forbidden", "code": 403})
        raise exc

    monkeypatch.setattr(provisioning, "namespace_ensure", lambda team, **_: team.namespace)
    fake_kube.on_create = forbidden_with_body
    with pytest.raises(ApiException):
        object_creation.workloads_create_objects([submitting[0].id])
    client = APIClient()
    client.force_authenticate(submitting[0].owner)
    shown = client.get(f"/api/v1/workloads/{submitting[0].uid}/").json()
    assert shown["state"] == "SUBMITTING"
    assert "preparing your team's space" in shown["message"]
    for raw in ("forbidden", "serviceaccount", "persistentvolumeclaims", "cannot create"):
        assert raw not in shown["message"].lower()
    client.force_login(submitting[0].owner)
    page = client.get(f"/workloads/{submitting[0].uid}/").content.decode()
    assert "preparing your team&#x27;s space" in page or "preparing your team's space" in page
    assert "forbidden" not in page.lower()


def test_a_batch_named_by_uid_creates_each_known_workload_with_its_catalog_entry_and_reports_the_unknown(
    fake_kube, submitting
):
    """The worker's tasks name workloads by uid; one statement loads them with their team, GPU type, owner and
    catalog entry. What the entry says reaches the Job (here: a read-only root filesystem), a uid this
    database does not hold is reported, and the others are created all the same."""
    from jobs.models import CatalogImage

    entry = CatalogImage.objects.create(reference="docker.io/x:1", title="X", read_only_root=True)
    Workload.objects.filter(id=submitting[1].id).update(catalog_image=entry)
    unknown: list[list[str]] = []
    uids = [submitting[1].uid, "nosuchuid0000000", submitting[0].uid]

    assert object_creation.workloads_create_objects(uids, by="uid", unknown=unknown.append) == 2

    assert unknown == [["nosuchuid0000000"]]
    jobs = {name: body for (kind, _, name), body in fake_kube.objects.items() if kind == "Job"}
    assert len(jobs) == 2
    read_only = {
        name: any(
            (c.get("securityContext") or {}).get("readOnlyRootFilesystem")
            for c in body["spec"]["template"]["spec"]["containers"]
        )
        for name, body in jobs.items()
    }
    mine = Workload.objects.get(id=submitting[1].id)
    assert read_only == {mine.k8s_name: True, Workload.objects.get(id=submitting[0].id).k8s_name: False}
    assert Workload.objects.get(id=submitting[2].id).state == State.SUBMITTING  # not named: untouched
