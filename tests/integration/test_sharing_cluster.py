"""Borrowing and reclaim on the local cluster: everything real (PostgreSQL, Celery worker, tracker, the
Kubernetes API server, scheduler and Job controller); the node simulator plays the kubelet and honours
SIGTERM with the deletion's grace period."""

from __future__ import annotations

import time

import pytest
from kubernetes import client as k8s

from jobs.kube import objects
from jobs.models import Cohort, Quota, State, Team, Workload, WorkloadEvent
from jobs.services.submission.intake import workload_submit
from tests.engine.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.cluster, pytest.mark.celery]

GRACE = 6  # PORTAL_PREEMPT_GRACE_SECONDS of the engine processes (devtools.engine.FAST_INTERVALS)


def test_lender_reclaims_borrowed_gpus_within_the_grace_period(engine, kube_api, settings):
    assert settings.PORTAL_PREEMPT_GRACE_SECONDS == GRACE
    # The v100 pool is one node of 8 GPUs: A (the engine's team) and B have 4 each, in one cohort.
    lab = Cohort.objects.create(name=f"cohort-{engine.team.slug}")
    a = engine.team
    Team.objects.filter(id=a.id).update(cohort=lab)
    v100 = engine.gpu_types["v100"]
    Quota.objects.filter(team=a, gpu_type=v100).update(max_gpus=4)
    b = TeamFactory(slug=f"b-{a.slug}", cohort=lab)
    bob = MembershipFactory(team=b, user=UserFactory(username=f"bob-{a.slug}")).user
    Quota.objects.create(team=b, gpu_type=v100, max_gpus=4, borrowing_limit=4)

    def submit_b(**spec):
        spec = {"image": "nvidia/cuda:12.2.0-base-ubuntu22.04", "gpu_type": "v100", **spec}
        return workload_submit(team=b, owner=bob, spec=spec)

    # The process ignores SIGTERM: only the kill at the end of the grace period stops it.
    forever = {"SIM_RUN_SECONDS": "forever", "SIM_TERM_SECONDS": "forever"}
    own = [submit_b(gpu_count=2, env=forever) for _ in range(2)]
    restartable = submit_b(gpu_count=2, restartable=True, env=forever)
    plain = submit_b(gpu_count=2, env=forever)
    assert [w.borrowed for w in (*own, restartable, plain)] == [False, False, True, True]
    for w in (*own, restartable, plain):
        engine.wait_for(w, State.RUNNING, timeout=90)
    # B holds all 8 GPUs of the node; the namespace's ResourceQuota let it (quota 4 + borrowing 4).
    quota = k8s.CoreV1Api(kube_api).read_namespaced_resource_quota(objects.QUOTA_NAME, b.namespace)
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "8"

    started = time.monotonic()
    lender = engine.submit(gpu_type="v100", gpu_count=4, env={"SIM_RUN_SECONDS": "forever"})
    assert lender.state == State.SUBMITTING  # admitted at once, in the decision that preempted
    engine.wait_for(lender, State.RUNNING, timeout=GRACE + 40)
    reclaim = time.monotonic() - started
    # Its pod could only be scheduled once the borrowers' pods were gone: killed at the grace period.
    assert GRACE - 1 <= reclaim <= GRACE + 30, reclaim
    for w in (*own, restartable, plain):
        w.refresh_from_db()
    assert [w.state for w in own] == [State.RUNNING] * 2  # within B's own quota: untouched
    assert (restartable.state, restartable.reason, restartable.attempt) == (State.QUEUED, "Preempted", 1)
    assert (plain.state, plain.reason) == (State.FAILED, "Preempted")
    steps = list(WorkloadEvent.objects.filter(workload=plain).values_list("reason", flat=True))
    assert "Preempted" in steps
    assert "PreemptionStop" in steps
    # When the lender is done, the requeued job runs again under a new name, and nothing else moved.
    from jobs.services.cancel import workload_cancel

    workload_cancel(workload=lender, by=engine.owner)
    engine.wait_for(restartable, State.RUNNING, timeout=GRACE + 60)
    restartable.refresh_from_db()
    assert restartable.k8s_name.endswith(f"{restartable.uid}-1")
    assert restartable.borrowed
    for w in (*own, restartable):
        workload_cancel(workload=Workload.objects.get(id=w.id), by=bob)
    k8s.CoreV1Api(kube_api).delete_namespace(b.namespace, propagation_policy="Background")
