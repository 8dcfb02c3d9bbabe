"""A queue drained at once: an admin raises a team's quota, one admission pass admits everything that
fits, and the worker creates the objects in batches — each workload's Job exactly once, even when the
worker is killed (-9) again and again while it drains."""

from __future__ import annotations

import random
import time

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from kubernetes import client as k8s

from benchmarks.kwatch import ObjectWatch
from jobs.kube import names
from jobs.models import Quota, QuotaChange, State, Workload, WorkloadEvent
from jobs.services.queue.settings_changes import quota_change_record

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]


def wait_all(ids, states, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Workload.objects.filter(id__in=ids).exclude(state__in=states).exists():
            return
        time.sleep(0.5)
    stuck = list(Workload.objects.filter(id__in=ids).exclude(state__in=states).values_list("name", "state", "message"))
    pytest.fail(f"{len(stuck)} workload(s) did not reach {states}: {stuck[:10]}")


def queue_behind_a_blocker(engine, n: int) -> tuple[Workload, list[Workload]]:
    """The team's k2 quota is 1 and a long job holds it: n one-GPU jobs wait behind it."""
    Quota.objects.filter(team=engine.team, gpu_type__slug="k2").update(max_gpus=1)
    blocker = engine.submit(gpu_type="k2", name="blocker", env={"SIM_RUN_SECONDS": "600"})
    engine.wait_for(blocker, State.PENDING, State.RUNNING)
    queued = [engine.submit(gpu_type="k2", name=f"drain-{i}", env={"SIM_RUN_SECONDS": "1"}) for i in range(n)]
    assert all(w.state == State.QUEUED for w in queued)
    return blocker, queued


def open_quota(engine, gpus: int) -> QuotaChange:
    """What admin does when an admin raises the quota (save the row, record the change)."""
    admin = get_user_model().objects.create_superuser(f"admin-{engine.team.slug}", password="x")
    k2 = engine.gpu_types["k2"]
    with transaction.atomic():
        Quota.objects.filter(team=engine.team, gpu_type=k2).update(max_gpus=gpus)
        return quota_change_record(team=engine.team, gpu_type=k2, old=1, new=gpus, by=admin)


def test_a_quota_change_admits_the_whole_queue_in_one_pass_and_creates_each_once(engine, kube_api):
    blocker, queued = queue_behind_a_blocker(engine, 40)
    change = open_quota(engine, 41)
    assert change.admitted == 40  # one pass, one decision
    ids = [w.id for w in queued]
    wait_all(ids, [State.SUCCEEDED], timeout=240)
    jobs = k8s.BatchV1Api(kube_api).list_namespaced_job(engine.team.namespace).items
    uids = [j.metadata.labels[names.LABEL_WORKLOAD] for j in jobs]
    assert sorted(uids) == sorted({*uids})
    assert {w.uid for w in queued} <= set(uids)
    # Each has its timeline: admitted once, then created once (the tracker may have seen it running
    # before the worker recorded PENDING), in order.
    for w in queued:
        moves = [
            (was, to)
            for was, to in WorkloadEvent.objects.filter(workload=w)
            .order_by("at", "id")
            .values_list("from_state", "to_state")
            if was != to  # notes (a new reason while pending) are not moves
        ]
        assert moves.count((State.QUEUED, State.SUBMITTING)) == 1, moves
        assert moves.count((State.SUBMITTING, State.PENDING)) <= 1, moves
        assert moves[-1][1] == State.SUCCEEDED, moves
    blocker.refresh_from_db()
    assert blocker.state in (State.PENDING, State.RUNNING)


def test_kill_9_of_the_worker_while_it_drains_loses_and_duplicates_nothing(engine, kube_api):
    _blocker, queued = queue_behind_a_blocker(engine, 120)
    ids = [w.id for w in queued]
    # Every Job and pod ever created (a watch from before the drain), per workload.
    namespace = engine.team.namespace
    job_watch = ObjectWatch(kube_api, f"/apis/batch/v1/namespaces/{namespace}/jobs", label=names.LABEL_WORKLOAD)
    pod_watch = ObjectWatch(kube_api, f"/api/v1/namespaces/{namespace}/pods", label=names.LABEL_WORKLOAD)
    try:
        rng = random.Random(13)
        open_quota(engine, 121)
        kills = 0
        for _ in range(6):
            time.sleep(rng.uniform(0.3, 1.5))
            engine.processes.kill("worker")
            kills += 1
            engine.processes.start("worker")
        wait_all(ids, [State.SUCCEEDED], timeout=400)
        jobs_ever = {uid: len(seen) for uid, seen in job_watch.uids_by_label.items()}
        pods_ever = {uid: len(seen) for uid, seen in pod_watch.uids_by_label.items()}
    finally:
        job_watch.stop()
        pod_watch.stop()
    lost = [w.name for w in Workload.objects.filter(id__in=ids).exclude(state=State.SUCCEEDED)]
    duplicated = {w.uid: (jobs_ever.get(w.uid), pods_ever.get(w.uid)) for w in queued}
    duplicated = {uid: counts for uid, counts in duplicated.items() if counts != (1, 1)}
    print(f"drain crash test: {kills} kills, {len(duplicated)} duplicated, {len(lost)} lost")
    assert (lost, duplicated) == ([], {})
