"""jobs.services.lifecycle against the in-memory Kubernetes client (tests/engine/fake_kube.py): the
stuck-submission sweep, time limits, image-pull timeouts and cleanup, each rule at its edge. Fast, and
a failure names the line; the engine tests run the same duties against the real local cluster."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.kube import names
from jobs.models import Kind, State, Workload
from jobs.services import lifecycle
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db

RETENTION = 3600


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.PORTAL_INSTANCE = "unit"
    settings.KUBE_NAMESPACE_PREFIX = "gp-"
    settings.PORTAL_RETENTION_SECONDS = RETENTION
    settings.PORTAL_STUCK_SUBMIT_SECONDS = 30
    settings.PORTAL_IMAGE_PULL_TIMEOUT = 300


@pytest.fixture
def enqueued(monkeypatch) -> dict[str, list[int]]:
    """What the duties hand to the workers (ids), instead of sending it to the broker; the broker's queue
    is taken to be empty (whatever earlier tests left in the suite's Redis), unless a test says otherwise."""
    sent: dict[str, list] = {"submit": [], "delete": []}  # submissions by uid, deletes as workloads
    monkeypatch.setattr(lifecycle, "enqueue_submits", sent["submit"].extend)
    monkeypatch.setattr(lifecycle, "enqueue_delete", lambda workload: sent["delete"].append(workload.id))
    monkeypatch.setattr(lifecycle, "broker_backlog", lambda: False)
    return sent


@pytest.fixture
def team():
    team = TeamFactory(slug="vision")
    MembershipFactory(team=team)
    return team


def workload(team, *, state=State.RUNNING, kind=Kind.BATCH, ago: int = 0, **fields) -> Workload:
    now = timezone.now()
    membership = team.memberships.first()
    values = {
        "team": team, "owner": membership.user, "name": "train", "kind": kind, "image": "docker.io/x:1",
        "gpu_type": GpuTypeFactory(slug="p100"), "gpu_count": 1, "time_limit_seconds": 3600, "state": state,
        "namespace": team.namespace, "state_changed_at": now - timedelta(seconds=ago),
    }  # fmt: skip
    values.update(fields)
    made = Workload.objects.create(**values)
    made.k8s_name = f"train-{made.uid}"
    made.save(update_fields=["k8s_name"])
    # Last touched (by admission or a worker) as long ago as its state changed: auto_now is set aside.
    Workload.objects.filter(id=made.id).update(updated_at=now - timedelta(seconds=ago))
    made.refresh_from_db()
    return made


def labelled(name: str, namespace: str, uid: str = "", *, instance: str = "unit", age: int = 0) -> dict:
    labels = {names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_INSTANCE: instance}
    if uid:
        labels[names.LABEL_WORKLOAD] = uid
    created = (timezone.now() - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels, "creationTimestamp": created}}


# --- sweep -----------------------------------------------------------------------------------------
def test_sweep_hands_over_again_only_submissions_stuck_past_the_limit(team, enqueued):
    stuck = workload(team, state=State.SUBMITTING, ago=31)
    workload(team, state=State.SUBMITTING, ago=29)  # a worker may still be on it
    workload(team, state=State.RUNNING, ago=3600)
    assert lifecycle.sweep()["resubmitted"] == 1
    assert enqueued["submit"] == [stuck.uid]


def test_sweep_leaves_stuck_submissions_alone_while_tasks_wait_in_the_brokers_queue(team, enqueued, monkeypatch):
    workload(team, state=State.SUBMITTING, ago=31)
    monkeypatch.setattr(lifecycle, "broker_backlog", lambda: True)  # a long drain's batches still queued
    assert lifecycle.sweep()["resubmitted"] == 0
    assert enqueued["submit"] == []


# --- time limits -----------------------------------------------------------------------------------
def test_a_service_past_its_time_limit_is_stopped_and_its_objects_deleted(team, enqueued):
    now = timezone.now()
    over = workload(team, kind=Kind.SERVICE, port=8888, submitted_at=now - timedelta(hours=2),
                    started_at=now - timedelta(seconds=3601))  # fmt: skip
    within = workload(team, kind=Kind.SERVICE, port=8888, submitted_at=now - timedelta(hours=2),
                      started_at=now - timedelta(seconds=3500))  # fmt: skip
    assert lifecycle.enforce_limits() == {"stopped": 1, "image_pull_failed": 0}
    over.refresh_from_db()
    within.refresh_from_db()
    assert (over.state, over.reason) == (State.FAILED, "DeadlineExceeded")
    assert over.message == "Stopped at its time limit (60 min)."
    assert over.finished_at is not None
    assert within.state == State.RUNNING
    assert enqueued["delete"] == [over.id]


def test_a_pending_service_counts_its_limit_from_submission_and_bills_nothing(team, enqueued):
    pending = workload(team, kind=Kind.SERVICE, port=8888, state=State.PENDING,
                       submitted_at=timezone.now() - timedelta(seconds=3601))  # fmt: skip
    lifecycle.enforce_limits()
    pending.refresh_from_db()
    assert pending.state == State.FAILED
    assert pending.finished_at is None


def test_batch_jobs_are_left_to_their_kubernetes_deadline(team, enqueued):
    batch = workload(
        team, submitted_at=timezone.now() - timedelta(days=1), started_at=timezone.now() - timedelta(days=1)
    )
    assert lifecycle.enforce_limits()["stopped"] == 0
    batch.refresh_from_db()
    assert batch.state == State.RUNNING
    assert enqueued["delete"] == []


def test_an_image_that_cannot_be_pulled_fails_after_the_timeout(team, enqueued):
    stuck = workload(team, state=State.PENDING, ago=301, reason="ImagePullBackOff", message="Back-off pulling.")
    young = workload(team, state=State.PENDING, ago=299, reason="ImagePullBackOff", message="Back-off pulling.")
    scheduling = workload(team, state=State.PENDING, ago=3000, reason="Unschedulable", message="No node.")
    assert lifecycle.enforce_limits() == {"stopped": 0, "image_pull_failed": 1}
    stuck.refresh_from_db()
    assert (stuck.state, stuck.reason) == (State.FAILED, "ImagePullBackOff")
    assert stuck.message == "Back-off pulling. Gave up after 300 s."
    assert Workload.objects.get(id=young.id).state == State.PENDING
    assert Workload.objects.get(id=scheduling.id).state == State.PENDING
    assert enqueued["delete"] == [stuck.id]


# --- cleanup ---------------------------------------------------------------------------------------
def test_cleanup_deletes_finished_objects_after_retention_in_three_list_calls(team, fake_kube):
    old = workload(team, state=State.SUCCEEDED, ago=RETENTION + 1)
    recent = workload(team, state=State.SUCCEEDED, ago=RETENTION - 60)
    active = workload(team, state=State.RUNNING, ago=RETENTION * 5)
    service = workload(team, state=State.CANCELLED, kind=Kind.SERVICE, port=8888, ago=RETENTION + 1)
    for made in (old, recent, active):
        fake_kube.add("Job", labelled(made.k8s_name, "gp-vision", made.uid))
    fake_kube.add("Deployment", labelled(service.k8s_name, "gp-vision", service.uid))
    fake_kube.add("Service", labelled(service.k8s_name, "gp-vision", service.uid))
    assert lifecycle.cleanup() == {"deleted": 3}
    assert fake_kube.names("Job") == sorted([("gp-vision", recent.k8s_name), ("gp-vision", active.k8s_name)])
    assert fake_kube.names("Deployment") == fake_kube.names("Service") == []
    lists = [call[0] for call in fake_kube.calls if call[0].startswith("list_")]
    assert lists == [
        "list_job_for_all_namespaces", "list_deployment_for_all_namespaces", "list_service_for_all_namespaces",
    ]  # fmt: skip


def test_cleanup_deletes_old_orphans_and_gives_young_ones_time(team, fake_kube):
    fake_kube.add("Job", labelled("orphan-old", "gp-vision", "nosuchuid1", age=RETENTION + 60))
    fake_kube.add("Job", labelled("orphan-young", "gp-vision", "nosuchuid2", age=60))
    assert lifecycle.cleanup() == {"deleted": 1}
    assert fake_kube.names("Job") == [("gp-vision", "orphan-young")]


def test_cleanup_touches_nothing_outside_team_namespaces_or_another_instance(team, fake_kube):
    old = workload(team, state=State.FAILED, ago=RETENTION + 1)
    fake_kube.add("Job", labelled("lookalike", "kube-system", old.uid, age=RETENTION * 2))
    fake_kube.add("Job", labelled("other-team-copy", "gp-language", old.uid, age=RETENTION * 2))
    fake_kube.add("Job", labelled("theirs", "gp-vision", "nosuchuid3", instance="staging", age=RETENTION * 2))
    assert lifecycle.cleanup() == {"deleted": 0}
    assert len(fake_kube.names("Job")) == 3


def test_an_object_already_gone_is_not_an_error(team, fake_kube, monkeypatch):
    old = workload(team, state=State.SUCCEEDED, ago=RETENTION + 1)
    fake_kube.add("Job", labelled(old.k8s_name, "gp-vision", old.uid))
    real_delete = fake_kube.delete

    def deleted_meanwhile(kind, name, namespace):
        fake_kube.objects.pop((kind, namespace, name))  # someone else deleted it between list and delete
        real_delete(kind, name, namespace)

    monkeypatch.setattr(fake_kube, "delete", deleted_meanwhile)
    assert lifecycle.cleanup() == {"deleted": 0}
