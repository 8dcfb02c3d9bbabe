"""Faults, each reporting what was lost: a worker killed mid-flight, the API server gone for 30 s,
Redis down, the tracker restarted."""

from __future__ import annotations

import random
import time

import pytest
from kubernetes import client as k8s

from jobs.kube import names
from jobs.models import Quota, State, Workload

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]


def wait_all(engine, workloads, states, timeout):
    deadline = time.monotonic() + timeout
    ids = [w.id for w in workloads]
    while time.monotonic() < deadline:
        pending = Workload.objects.filter(id__in=ids).exclude(state__in=states).count()
        if pending == 0:
            return
        time.sleep(0.5)
    stuck = list(
        Workload.objects.filter(id__in=ids).exclude(state__in=states).values_list("name", "state", "reason")[:10]
    )
    pytest.fail(f"{len(stuck)}+ workloads did not reach {states}: {stuck}")


def test_kill_9_of_the_worker_during_200_submissions(engine, kube_api):
    for slug, limit in {"p100": 8, "k2": 16, "v100": 8}.items():
        Quota.objects.filter(team=engine.team, gpu_type__slug=slug).update(max_gpus=limit)
    rng = random.Random(20261122)
    workloads = []
    kills = 0
    next_kill = time.monotonic() + rng.uniform(0.5, 2.0)
    for i in range(200):
        workloads.append(
            engine.submit(gpu_type=("p100", "k2", "v100")[i % 3], name=f"crash-{i}", env={"SIM_RUN_SECONDS": "1"})
        )
        if time.monotonic() >= next_kill:
            engine.processes.kill("worker")
            kills += 1
            engine.processes.start("worker")
            next_kill = time.monotonic() + rng.uniform(0.5, 2.0)
    # Keep killing for a while after the last submission, while objects are being created.
    for _ in range(4):
        time.sleep(rng.uniform(0.5, 2.0))
        engine.processes.kill("worker")
        kills += 1
        engine.processes.start("worker")
    wait_all(engine, workloads, [State.SUCCEEDED], timeout=300)
    jobs = k8s.BatchV1Api(kube_api).list_namespaced_job(engine.team.namespace).items
    uids = [j.metadata.labels[names.LABEL_WORKLOAD] for j in jobs]
    duplicates = len(uids) - len(set(uids))
    lost = 200 - Workload.objects.filter(team=engine.team, state=State.SUCCEEDED).count()
    print(f"crash test: {kills} kills, {duplicates} duplicate Jobs, {lost} lost workloads")
    assert kills >= 5
    assert (duplicates, lost) == (0, 0)
    assert set(uids) >= {w.uid for w in workloads}


def test_api_server_gone_for_30_seconds(engine, kube_cluster):
    running = engine.submit(gpu_count=1, env={"SIM_RUN_SECONDS": "3"})
    engine.wait_for(running, State.RUNNING)
    kube_cluster.stop_component("kube-apiserver")
    try:
        during = [engine.submit(gpu_type="k2", env={"SIM_RUN_SECONDS": "2"}) for _ in range(3)]
        time.sleep(30)
        # Nothing is marked failed because the cluster was unreachable.
        assert not Workload.objects.filter(team=engine.team, state=State.FAILED).exists()
    finally:
        kube_cluster.start_component("kube-apiserver")
    for workload in [running, *during]:
        engine.wait_for(workload, State.SUCCEEDED, timeout=120)


def test_redis_down_submissions_are_kept_and_processed_later(engine, engine_broker):
    engine_broker.stop(keep=True)
    try:
        started = time.monotonic()
        stored = [engine.submit(gpu_type="p100", env={"SIM_RUN_SECONDS": "1"}) for _ in range(3)]
        assert time.monotonic() - started < 15  # submitting does not hang on the broker
        assert all(w.state == State.QUEUED for w in stored)
        time.sleep(3)
        assert Workload.objects.filter(id__in=[w.id for w in stored], state=State.QUEUED).count() == 3
    finally:
        engine_broker.start()
    for workload in stored:
        engine.wait_for(workload, State.SUCCEEDED, timeout=120)


def test_tracker_restart_catches_up(engine):
    engine.processes.stop("tracker")
    try:
        workloads = [engine.submit(gpu_type="k2", env={"SIM_RUN_SECONDS": "2"}) for _ in range(3)]
        time.sleep(8)  # they are created, run and finish while no tracker watches
        assert Workload.objects.filter(id__in=[w.id for w in workloads], state=State.SUCCEEDED).count() == 0
    finally:
        engine.processes.start("tracker")
    for workload in workloads:
        engine.wait_for(workload, State.SUCCEEDED, timeout=60)
        # Kubernetes' own timestamps were recovered, not the moment the tracker came back.
        assert workload.gpu_seconds() == pytest.approx(2.0, abs=0.3)
