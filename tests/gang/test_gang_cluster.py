"""Gang jobs through the real engine on simulated nodes: PostgreSQL, Redis, a Celery worker and beat, the
tracker, and the local cluster's real API server, scheduler and Job controller.

The p100 pool is two nodes of 4 GPUs; the team's p100 quota is 4: a gang of 2 nodes x 2 GPUs takes it all.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client as k8s

from jobs.kube import names
from jobs.models import GangRank, RunSegment, State
from jobs.services.cancel import workload_cancel
from jobs.services.queue.gangs import RELEASE_REASON

pytestmark = [pytest.mark.cluster, pytest.mark.celery]

FOREVER = {"SIM_RUN_SECONDS": "3600"}


def rank_pods(kube_api, workload, attempt=None) -> list:
    gang = names.gang_label(workload.uid, workload.attempt if attempt is None else attempt)
    pods = k8s.CoreV1Api(kube_api).list_namespaced_pod(workload.namespace, label_selector=f"{names.LABEL_GANG}={gang}")
    return sorted(pods.items, key=lambda p: p.metadata.labels[names.LABEL_RANK])


def rank_jobs(kube_api, workload) -> list[str]:
    jobs = k8s.BatchV1Api(kube_api).list_namespaced_job(
        workload.namespace, label_selector=f"{names.LABEL_WORKLOAD}={workload.uid}"
    )
    return sorted(j.metadata.name for j in jobs.items if not j.metadata.deletion_timestamp)


def wait(what: str, check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not {what} within {timeout:.0f} s")
        time.sleep(0.2)


def test_a_gang_runs_one_rank_per_node_as_one_workload_and_cancel_stops_all(engine, kube_api):
    workload = engine.submit(gpu_count=2, nodes=2, command=["python", "train.py"], env=FOREVER)
    assert (workload.gpu_count, workload.nodes, workload.gpus_per_node) == (4, 2, 2)  # the quota counts 4
    engine.wait_for(workload, State.RUNNING, timeout=90)
    assert workload.message.startswith("All 2 ranks running on gpu-p100-")
    pods = rank_pods(kube_api, workload)
    assert len(pods) == 2
    assert len({p.spec.node_name for p in pods}) == 2  # one rank per node
    env = {e.name: e.value for e in pods[1].spec.containers[0].env}
    assert (env["WORLD_SIZE"], env["NODE_RANK"], env["NPROC_PER_NODE"]) == ("2", "1", "2")
    # Rank 0's pod IP is handed to rank 1 (no cluster DNS here).
    rank0_ip = pods[0].status.pod_ip
    assert rank0_ip
    wait(
        "rank 0's address handed to rank 1",
        lambda: (
            (rank_pods(kube_api, workload)[1].metadata.annotations or {}).get(names.ANNOTATION_MASTER_ADDR) == rank0_ip
        ),
    )
    ranks = wait("both ranks recorded running", lambda: [
        r for r in GangRank.objects.filter(workload=workload).order_by("rank") if r.phase == State.RUNNING
    ] if GangRank.objects.filter(workload=workload, phase=State.RUNNING).count() == 2 else None)  # fmt: skip
    assert {r.node_name for r in ranks} == {p.spec.node_name for p in pods}
    # A second gang of the team waits: the first holds the whole quota (4 GPUs), counted whole.
    second = engine.submit(gpu_count=1, nodes=2, command=["python", "train.py"], env=FOREVER)
    assert second.state == State.QUEUED

    workload_cancel(workload=workload, by=engine.owner)
    workload.refresh_from_db()
    assert workload.state == State.CANCELLED
    wait("every rank's Job deleted", lambda: not rank_jobs(kube_api, workload))
    engine.wait_for(second, State.RUNNING, timeout=90)
    workload_cancel(workload=second, by=engine.owner)


def test_a_gang_that_cannot_be_placed_whole_is_released_after_the_window_and_runs_once_room_appears(engine, kube_api):
    core = k8s.CoreV1Api(kube_api)
    # All GPUs of one p100 node taken outside the portal: only one rank of the gang can be placed.
    blocker = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=f"outside-{engine.team.slug}", namespace="default"),
        spec=k8s.V1PodSpec(
            node_name="gpu-p100-1",
            restart_policy="Always",
            containers=[
                k8s.V1Container(
                    name="hog", image="hog:1", resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "4"})
                )
            ],
        ),
    )
    core.create_namespaced_pod("default", blocker)
    try:
        workload = engine.submit(gpu_count=2, nodes=2, command=["python", "train.py"], env=FOREVER)
        engine.wait_for(workload, State.PENDING, timeout=60)
        first_attempt = workload.attempt
        released = engine.wait_until(workload, lambda w: w.attempt > first_attempt, "released and requeued", timeout=90)
        event = released.events.filter(reason=RELEASE_REASON).last()
        assert event.to_state == State.QUEUED
        assert "Not all 2 ranks were running within the start window (15 s)" in event.message
        assert "back at the front of the queue" in event.message
        assert released.requeued_at is not None
        # The released attempt holds nothing in the cluster any more: none of its ranks' pods is left.
        wait("the released attempt's pods gone", lambda: not [
            p for p in rank_pods(kube_api, workload, attempt=first_attempt) if not p.metadata.deletion_timestamp
        ])  # fmt: skip
        # Rank 0 ran on the free node meanwhile: that GPU time is kept in usage, per rank.
        assert RunSegment.objects.filter(workload=workload, reason=RELEASE_REASON, gpu_count=2).exists()
    finally:
        core.delete_namespaced_pod(blocker.metadata.name, "default", grace_period_seconds=0)
    engine.wait_for(workload, State.RUNNING, timeout=120)
    assert len({p.spec.node_name for p in rank_pods(kube_api, workload)}) == 2
    workload_cancel(workload=workload, by=engine.owner)
