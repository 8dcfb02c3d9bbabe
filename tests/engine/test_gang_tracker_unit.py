"""The tracker and gangs, against the in-memory Kubernetes client: a requeued gang's running ranks are
never taken for a superseded attempt (their Jobs are named per rank), and one that was is reaped alone."""

from __future__ import annotations

import pytest

from jobs.kube import names
from jobs.models import State, Workload
from jobs.services import dispatch
from jobs.services.cluster import watch_loop
from tests.engine.test_watch_loop_unit import _settings, pod, running, tracker  # noqa: F401 (shared fixtures)


def rank_pod(workload: Workload, attempt: int, rank: int) -> dict:
    made = pod(workload, name=f"{names.rank_name(workload.name, workload.uid, attempt, rank)}-x")
    made["metadata"]["uid"] = f"pod-{attempt}-{rank}"
    made["metadata"]["labels"].update(
        {
            "job-name": names.rank_name(workload.name, workload.uid, attempt, rank),
            names.LABEL_GANG: names.gang_label(workload.uid, attempt),
            names.LABEL_RANK: str(rank),
        }
    )
    return made


@pytest.fixture
def requeued_gang(running) -> Workload:  # noqa: F811
    Workload.objects.filter(id=running.id).update(
        nodes=2, gpu_count=2, attempt=1, state=State.RUNNING, k8s_name=names.attempt_name("train", running.uid, 1)
    )
    running.refresh_from_db()
    return running


def test_only_the_superseded_attempts_ranks_are_reaped(fake_kube, tracker, requeued_gang, monkeypatch):  # noqa: F811
    asked: list[str] = []
    monkeypatch.setattr(dispatch, "enqueue_preempt_delete", lambda workload, name: asked.append(name))
    for rank in (0, 1):
        fake_kube.add("Pod", rank_pod(requeued_gang, 1, rank))  # the current attempt, running
    fake_kube.add("Pod", rank_pod(requeued_gang, 0, 1))  # a rank of the released attempt, still there
    tracker.relist()
    assert asked == [names.attempt_name("train", requeued_gang.uid, 0)]
    requeued_gang.refresh_from_db()
    assert requeued_gang.state == State.RUNNING
    assert requeued_gang.message.startswith("All 2 ranks running")
    assert watch_loop.reap_finished(tracker.view) == 1  # asked again at the next relist, never the current
