"""From Kubernetes' own status objects to workload states (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobs.models import State
from jobs.services.cluster.status_mapping import observe


def pod(
    phase="Pending",
    *,
    state=None,
    conditions=None,
    node="p100-0",
    name="train-abc-xyz",
    status_extra=None,
    created="2026-01-01T00:00:00Z",
):
    return {
        "metadata": {"name": name, "uid": "pod-uid-1", "creationTimestamp": created},
        "spec": {"nodeName": node},
        "status": {
            "phase": phase,
            "conditions": conditions or [],
            "containerStatuses": [{"name": "main", "state": state or {}}] if state is not None else [],
            **(status_extra or {}),
        },
    }


def job(condition_type=None, reason=None, at="2026-01-01T01:00:00Z", deadline=600):
    conditions = (
        [{"type": condition_type, "status": "True", "reason": reason, "lastTransitionTime": at}]
        if condition_type
        else []
    )
    return {"spec": {"activeDeadlineSeconds": deadline}, "status": {"conditions": conditions}}


def test_running_carries_the_container_start_time_and_node():
    obs = observe(
        kind="batch", job=job(), pods=[pod("Running", state={"running": {"startedAt": "2026-01-01T00:00:05Z"}})]
    )
    assert obs.state == State.RUNNING
    assert obs.started_at == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    assert (obs.node_name, obs.pod_name, obs.pod_uid) == ("p100-0", "train-abc-xyz", "pod-uid-1")


def test_success_uses_kubernetes_timestamps():
    terminated = {
        "exitCode": 0,
        "reason": "Completed",
        "startedAt": "2026-01-01T00:00:05Z",
        "finishedAt": "2026-01-01T00:10:05Z",
    }
    obs = observe(kind="batch", job=job(), pods=[pod("Succeeded", state={"terminated": terminated})])
    assert obs.state == State.SUCCEEDED
    assert (obs.finished_at - obs.started_at).total_seconds() == 600
    assert obs.exit_code == 0


def test_exit_code_3_fails_with_the_code():
    terminated = {
        "exitCode": 3,
        "reason": "Error",
        "startedAt": "2026-01-01T00:00:05Z",
        "finishedAt": "2026-01-01T00:00:09Z",
    }
    obs = observe(kind="batch", job=job(), pods=[pod("Failed", state={"terminated": terminated})])
    assert (obs.state, obs.reason, obs.exit_code) == (State.FAILED, "ExitCode", 3)
    assert obs.message == "Exited with code 3."


def test_oom_killed_is_named():
    terminated = {
        "exitCode": 137,
        "reason": "OOMKilled",
        "startedAt": "2026-01-01T00:00:05Z",
        "finishedAt": "2026-01-01T00:00:09Z",
    }
    obs = observe(kind="batch", job=job(), pods=[pod("Failed", state={"terminated": terminated})])
    assert (obs.state, obs.reason) == (State.FAILED, "OOMKilled")
    assert "out of memory" in obs.message


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("0/5 nodes are available: 5 Insufficient nvidia.com/gpu.", "enough free GPUs of its type"),
        ("0/7 nodes are available: 7 pod has unbound immediate PersistentVolumeClaims.", "storage"),
        ("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.", "No node of its GPU type"),
        ("0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.", "a node of its own"),
        ("0/2 nodes are available: 2 node(s) had untolerated taint {x: y}.", "take no new work"),
        ("something new from a later scheduler", "Waiting for a node with free GPUs."),
    ],
)
def test_unschedulable_says_why_in_the_portals_words(message, said):
    """The workload's page and API say why it waits in plain words, never the scheduler's raw text (that
    stays in the page's Kubernetes events card)."""
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]
    obs = observe(kind="batch", job=job(), pods=[pod(conditions=conditions, node="")])
    assert (obs.state, obs.reason) == (State.PENDING, "Unschedulable")
    assert said in obs.message
    assert "nodes are available" not in obs.message


def test_image_pull_failure_is_pending_with_the_reason():
    waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "registry.invalid/x"'}
    failing = pod(state={"waiting": waiting})
    failing["spec"]["containers"] = [{"name": "main", "image": "registry.invalid/x"}]
    obs = observe(kind="batch", job=job(), pods=[failing])
    assert (obs.state, obs.reason) == (State.PENDING, "ImagePullBackOff")
    assert obs.message == (
        "Cannot pull the image: registry.invalid/x: the node could not pull it and tries again shortly."
    )


def test_deadline_exceeded_wins_over_pod_state():
    obs = observe(kind="batch", job=job("Failed", "DeadlineExceeded", deadline=90), pods=[])
    assert (obs.state, obs.reason) == (State.FAILED, "DeadlineExceeded")
    assert obs.message == "Stopped at its time limit (1m30s)."
    assert obs.finished_at == datetime(2026, 1, 1, 1, 0, tzinfo=UTC)


def test_evicted_pod_fails_the_workload():
    obs = observe(
        kind="batch",
        job=job(),
        pods=[pod("Failed", status_extra={"reason": "Evicted", "message": "The node was low on resource: memory."})],
    )
    assert (obs.state, obs.reason) == (State.FAILED, "Evicted")


def test_a_service_follows_its_newest_pod():
    old = pod(
        "Running", state={"running": {"startedAt": "2026-01-01T00:00:05Z"}}, name="old", created="2026-01-01T00:00:00Z"
    )
    old["metadata"]["deletionTimestamp"] = "2026-01-01T02:00:00Z"
    new = pod(state={"waiting": {"reason": "ContainerCreating"}}, name="new", created="2026-01-01T02:00:00Z")
    obs = observe(kind="service", job=None, pods=[old, new])
    assert (obs.state, obs.pod_name) == (State.PENDING, "new")


def test_no_objects_yet_says_nothing():
    assert observe(kind="batch", job=None, pods=[]) is None


def test_a_job_failed_at_its_deadline_is_a_deadline_end_whatever_reason_the_controller_gives():
    failed = job("Failed", "BackoffLimitExceeded", at="2026-01-01T00:02:00Z", deadline=120)
    failed["status"]["startTime"] = "2026-01-01T00:00:00Z"
    obs = observe(kind="batch", job=failed, pods=[])
    assert (obs.state, obs.reason) == (State.FAILED, "DeadlineExceeded")


def test_a_pod_being_deleted_is_not_the_outcome_of_a_batch_job():
    terminated = {
        "exitCode": 137,
        "reason": "Error",
        "startedAt": "2026-01-01T00:00:05Z",
        "finishedAt": "2026-01-01T00:00:09Z",
    }
    dying = pod("Failed", state={"terminated": terminated})
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:09Z"
    assert observe(kind="batch", job=job(), pods=[dying]) is None


def test_a_running_service_is_starting_until_its_pod_is_ready():
    running = {"running": {"startedAt": "2026-01-01T00:00:05Z"}}
    obs = observe(kind="service", job=None, pods=[pod("Running", state=running, conditions=[
        {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}])])  # fmt: skip
    assert (obs.state, obs.reason) == (State.RUNNING, "Starting")
    assert obs.message == "Running on p100-0; starting up: it does not answer on its port yet."
    assert obs.started_at == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)  # billed from the container's start
    obs = observe(kind="service", job=None, pods=[pod("Running", state=running, conditions=[
        {"type": "Ready", "status": "True"}])])  # fmt: skip
    assert (obs.state, obs.reason, obs.message) == (State.RUNNING, "Running", "Running on p100-0.")
    # A batch job has no port to wait for: running is running.
    assert observe(kind="batch", job=job(), pods=[pod("Running", state=running)]).reason == "Running"
