"""Preemption takes a gang whole: a restartable gang on borrowed GPUs goes back to the queue as one
workload, and every rank's Job of the attempt it ran is deleted (none is left holding GPUs)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobs.kube import names
from jobs.models import State, Workload
from jobs.services.queue.preemption import delete_preempted_objects, preempt
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db


def test_a_preempted_gang_is_requeued_whole_and_every_rank_deleted(fake_kube, settings):
    settings.PORTAL_INSTANCE = "unit"
    team = TeamFactory(slug="vision")
    owner = MembershipFactory(team=team).user
    gang = Workload.objects.create(
        team=team, owner=owner, name="train", kind="batch", image="docker.io/x:1", gpu_type=GpuTypeFactory(slug="p100"),
        gpu_count=8, nodes=2, command=["torchrun"], time_limit_seconds=3600, state=State.RUNNING, borrowed=True,
        restartable=True, namespace=team.namespace, started_at=timezone.now(), submitted_at=timezone.now(),
    )  # fmt: skip
    gang.k8s_name = names.attempt_name(gang.name, gang.uid, 0)
    gang.save(update_fields=["k8s_name"])

    assert preempt(gang.id, at=timezone.now(), because="the lender reclaimed its GPUs.")
    gang.refresh_from_db()
    assert (gang.state, gang.attempt, gang.gpu_count) == (State.QUEUED, 1, 8)  # one workload, all 8 GPUs released

    delete_preempted_objects(gang.id, names.attempt_name(gang.name, gang.uid, 0))
    deleted = {call[2] for call in fake_kube.calls if call[0] == "delete_namespaced_job"}
    assert deleted == {names.rank_name("train", gang.uid, 0, 0), names.rank_name("train", gang.uid, 0, 1)}
