"""A lost node's pod, as Kubernetes reports it: the taint manager (or a drain, or the kubelet shutting down)
puts a DisruptionTarget condition on the pod it takes away, and the Job controller, with the backoffLimit 0
the portal gives every Job, counts that pod as the Job's one failure and fails the Job (BackoffLimitExceeded)
instead of replacing the pod. The workload's end is the pod's condition, not the Job's words, so a
restartable job is retried after it, with the GPU-hours lost since its last checkpoint (pure)."""

from __future__ import annotations

from jobs.models import Kind, State
from jobs.services.cluster.status_mapping import observe
from jobs.services.retry import decide
from tests.engine.test_tracking import job, pod

TAINT_MANAGER = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByTaintManager",
    "message": "Taint manager: deleting due to NoExecute taint",
    "lastTransitionTime": "2026-01-01T00:10:00Z",
}


def _lost_pod(**extra):
    lost = pod("Running", state={"running": {"startedAt": "2026-01-01T00:00:05Z"}}, conditions=[TAINT_MANAGER], **extra)
    lost["metadata"]["deletionTimestamp"] = "2026-01-01T00:10:00Z"
    return lost


def test_a_job_failed_by_its_lost_nodes_pod_ends_with_the_pods_disruption_not_the_backoff_limit():
    obs = observe(kind="batch", job=job("Failed", "BackoffLimitExceeded"), pods=[_lost_pod()])
    assert (obs.state, obs.reason) == (State.FAILED, "DeletionByTaintManager")
    assert obs.message.startswith("Its pod was stopped by Kubernetes (DeletionByTaintManager): Taint manager")
    assert obs.node_name == "p100-0"  # where it was lost: the retry's timeline names it
    assert obs.finished_at.isoformat() == "2026-01-01T00:10:00+00:00"
    # Not its fault: a restartable job is retried after it; the Job's own words would have been final.
    retried = {"kind": Kind.BATCH, "restartable": True, "exit_code": None, "retryable_exit_codes": [], "retries": 0,
               "limit": 3}  # fmt: skip
    assert decide(reason=obs.reason, **retried).retry
    assert not decide(reason="BackoffLimitExceeded", **retried).retry


def test_a_pod_the_kubelet_killed_for_a_disruption_is_not_its_own_exit():
    terminated = {"exitCode": 137, "reason": "Error", "startedAt": "2026-01-01T00:00:05Z",
                  "finishedAt": "2026-01-01T00:09:00Z"}  # fmt: skip
    shutdown = {
        **TAINT_MANAGER,
        "reason": "TerminationByKubelet",
        "message": "Pod was terminated in response to imminent node shutdown.",
    }
    killed = pod("Failed", state={"terminated": terminated}, conditions=[shutdown])
    obs = observe(kind="batch", job=job(), pods=[killed])
    assert (obs.state, obs.reason, obs.exit_code) == (State.FAILED, "TerminationByKubelet", 137)


def test_without_a_disruption_the_jobs_verdict_and_the_exit_code_stand():
    plain = pod("Running", state={"running": {"startedAt": "2026-01-01T00:00:05Z"}})
    plain["metadata"]["deletionTimestamp"] = "2026-01-01T00:10:00Z"
    obs = observe(kind="batch", job=job("Failed", "BackoffLimitExceeded"), pods=[plain])
    assert (obs.state, obs.reason) == (State.FAILED, "BackoffLimitExceeded")
    terminated = {"exitCode": 3, "reason": "Error", "startedAt": "2026-01-01T00:00:05Z",
                  "finishedAt": "2026-01-01T00:09:00Z"}  # fmt: skip
    own = observe(kind="batch", job=job(), pods=[pod("Failed", state={"terminated": terminated})])
    assert (own.reason, own.exit_code) == ("ExitCode", 3)
