"""Work that survives, on the local cluster: everything real (PostgreSQL, Celery worker, tracker, the
Kubernetes API server, scheduler and Job controller; the node simulator plays the kubelet).

- a restartable job its node evicts runs again as the next attempt of the same workload, told so on its
  timeline and in its pod (GPUPORTAL_ATTEMPT); an exit code of its own is final; the retry limit holds;
- every batch pod gets the checkpoint contract and its own token Secret, which goes when the workload ends;
- a GPU reported failing keeps new work off its node (node affinity) until an admin clears the mark, and a
  restartable job on that node is retried elsewhere.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client as k8s

from jobs.kube import objects
from jobs.models import GpuHealthMark, State, Team, WorkloadEvent
from jobs.services.checkpoints.tokens import secret_name
from jobs.services.cluster import node_health
from jobs.services.cluster.gpu_faults import GpuSeen
from notifications.models import Event

pytestmark = [pytest.mark.cluster, pytest.mark.celery]

FOREVER = {"SIM_RUN_SECONDS": "forever"}


def _pod(kube_api, workload) -> k8s.V1Pod:
    core = k8s.CoreV1Api(kube_api)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        workload.refresh_from_db()
        pods = core.list_namespaced_pod(
            workload.team.namespace, label_selector=f"gpuportal.dev/workload={workload.uid}"
        )
        live = [
            p
            for p in pods.items
            if p.metadata.deletion_timestamp is None and p.metadata.name.startswith(workload.k8s_name or "-")
        ]
        if workload.k8s_name and live:
            return live[0]
        time.sleep(0.2)
    pytest.fail(f"{workload.name}: no pod of its current attempt")


def _evict(kube_api, pod: k8s.V1Pod) -> None:
    """What a kubelet under memory or disk pressure does: the pod fails with reason Evicted."""
    body = {"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}}
    k8s.CoreV1Api(kube_api).patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, body)


def _env(pod: k8s.V1Pod) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}


def test_an_evicted_restartable_job_runs_again_and_its_own_exit_is_final(engine, kube_api):
    job = engine.submit(name="evictme", restartable=True, env=FOREVER)
    engine.wait_for(job, State.RUNNING, timeout=90)
    pod = _pod(kube_api, job)
    env = _env(pod)
    assert env["GPUPORTAL_ATTEMPT"] == "0"
    assert env["GPUPORTAL_GRACE_SECONDS"] == "6"  # the engine's preemption grace (devtools.engine)
    if job.mounts:  # where the site has workspaces: a directory in the owner's home
        assert env["GPUPORTAL_CHECKPOINT_DIR"].endswith(f"/.gpuportal/checkpoints/evictme-{job.uid}")
    assert env["GPUPORTAL_TOKEN_FILE"] == "/var/run/gpuportal/token"
    assert any(v.name == objects.TOKEN_VOLUME for v in pod.spec.volumes)
    # Its token Secret is there (the admin may read it; the portal itself never reads it back).
    k8s.CoreV1Api(kube_api).read_namespaced_secret(secret_name(job.uid), job.team.namespace)

    _evict(kube_api, pod)
    engine.wait_until(job, lambda w: w.attempt == 1 and w.state == State.RUNNING, "running its next attempt", 120)
    retried = WorkloadEvent.objects.filter(workload=job, from_state=State.RUNNING, to_state=State.QUEUED).get()
    assert retried.reason == "Evicted"
    assert "Retry 1 of 3" in retried.message
    assert job.retries == 1
    # Its owner is told, with the work lost.
    told = Event.objects.get(kind="workload.retried", workload=job)
    assert "Work lost:" in told.summary
    assert _env(_pod(kube_api, job))["GPUPORTAL_ATTEMPT"] == "1"

    # An exit code of its own: final, even when restartable.
    own = engine.submit(name="exits", restartable=True, env={"SIM_RUN_SECONDS": "1", "SIM_EXIT_CODE": "3"})
    engine.wait_for(own, State.FAILED, timeout=90)
    assert (own.attempt, own.exit_code) == (0, 3)


def test_the_retry_limit_holds(engine, kube_api):
    Team.objects.filter(id=engine.team.id).update(default_retry_limit=1)
    job = engine.submit(name="twice", restartable=True, env=FOREVER)
    engine.wait_for(job, State.RUNNING, timeout=90)
    _evict(kube_api, _pod(kube_api, job))
    engine.wait_until(job, lambda w: w.attempt == 1 and w.state == State.RUNNING, "running its next attempt", 120)
    _evict(kube_api, _pod(kube_api, job))
    engine.wait_for(job, State.FAILED, timeout=90)
    assert job.reason == "Evicted"
    assert "Not retried" in job.message
    assert "limit 1" in job.message
    assert job.attempt == 1


def test_a_failing_gpu_keeps_new_work_off_its_node_until_cleared(engine, kube_api):
    job = engine.submit(name="onbad", restartable=True, env=FOREVER)
    engine.wait_for(job, State.RUNNING, timeout=90)
    bad_node = job.node_name
    # The agent of that node reports GPU 0 fell off the bus.
    (mark,) = node_health.apply_report(bad_node, [GpuSeen(0, "GPU-test-0", lost=True)])
    assert mark.cause == GpuHealthMark.Cause.LOST
    # The restartable job on it is retried (its next attempt avoids the node).
    engine.wait_until(job, lambda w: w.attempt == 1 and w.state == State.RUNNING, "running elsewhere", 120)
    assert job.node_name != bad_node
    assert WorkloadEvent.objects.filter(workload=job, reason="GpuFault").exists()
    pod = _pod(kube_api, job)
    terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert terms[0].match_expressions[0].values == [bad_node]
    # Cleared by an admin: new work may go there again.
    node_health.clear_mark(mark, by=None)
    fresh = engine.submit(name="after", env=FOREVER)
    engine.wait_for(fresh, State.RUNNING, timeout=90)
    assert _pod(kube_api, fresh).spec.affinity is None
