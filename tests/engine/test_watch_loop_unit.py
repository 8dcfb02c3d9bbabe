"""jobs.services.cluster.watch_loop against the in-memory Kubernetes client (tests/engine/fake_kube.py): the full
list, the watch stream, what a stranger's look-alike may not do, and the reaping of pods that outlived
their workload. The engine tests run the same loop against the real local cluster."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.kube import names
from jobs.models import Kind, State, Workload
from jobs.services import dispatch
from jobs.services.cluster import watch_loop
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settings(settings, monkeypatch):
    settings.PORTAL_INSTANCE = "unit"
    settings.KUBE_NAMESPACE_PREFIX = "gp-"
    settings.PORTAL_RESYNC_SECONDS = 60
    # The loop refreshes its connection between batches; inside a test's transaction that would end it.
    monkeypatch.setattr(watch_loop, "close_old_connections", lambda: None)


@pytest.fixture
def tracker(monkeypatch) -> watch_loop.Tracker:
    """A tracker whose watches are started by the test, one at a time, instead of in threads."""
    made = watch_loop.Tracker(batch_seconds=0.01)
    made.watches_from: dict[str, str] = {}
    monkeypatch.setattr(made, "_start_watches", made.watches_from.update)
    return made


@pytest.fixture
def running(db) -> Workload:
    team = TeamFactory(slug="vision")
    owner = MembershipFactory(team=team).user
    workload = Workload.objects.create(
        team=team, owner=owner, name="train", kind=Kind.BATCH, image="docker.io/x:1",
        gpu_type=GpuTypeFactory(slug="p100"), gpu_count=1, time_limit_seconds=3600, state=State.PENDING,
        namespace=team.namespace, submitted_at=timezone.now(),  # within the grace: not "objects missing"
    )  # fmt: skip
    workload.k8s_name = names.attempt_name(workload.name, workload.uid, 0)
    workload.save(update_fields=["k8s_name"])
    return workload


def _labels(workload: Workload, instance: str = "unit") -> dict[str, str]:
    return {
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_INSTANCE: instance,
        names.LABEL_WORKLOAD: workload.uid,
        "job-name": workload.k8s_name,
    }


def job(workload: Workload, *, complete: bool = False, namespace: str = "gp-vision") -> dict:
    conditions = [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T01:00:00Z"}]
    return {
        "metadata": {"name": workload.k8s_name, "namespace": namespace, "labels": _labels(workload)},
        "spec": {"activeDeadlineSeconds": 3600},
        "status": {"conditions": conditions if complete else []},
    }


def pod(workload: Workload, phase: str = "Running", *, namespace: str = "gp-vision", name: str = "") -> dict:
    state = {"running": {"startedAt": "2026-01-01T00:00:05Z"}}
    if phase == "Succeeded":
        state = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "2026-01-01T00:00:05Z",
                                "finishedAt": "2026-01-01T00:59:00Z"}}  # fmt: skip
    return {
        "metadata": {"name": name or f"{workload.k8s_name}-abcde", "namespace": namespace, "uid": "pod-1",
                     "labels": _labels(workload), "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "gpu-p100-1"},
        "status": {"phase": phase, "conditions": [], "containerStatuses": [{"name": "main", "state": state}]},
    }  # fmt: skip


def test_a_full_list_brings_a_workload_up_to_date_and_starts_the_watches_from_it(fake_kube, tracker, running):
    fake_kube.add("Job", job(running))
    fake_kube.add("Pod", pod(running))
    tracker.relist()
    running.refresh_from_db()
    assert (running.state, running.node_name) == (State.RUNNING, "gpu-p100-1")
    lists = [call[0] for call in fake_kube.calls if call[0].startswith("list_")]
    assert lists == ["list_job_for_all_namespaces", "list_pod_for_all_namespaces"]
    assert tracker.watches_from == {"Job": str(fake_kube.resource_version), "Pod": str(fake_kube.resource_version)}


def test_another_instances_objects_are_not_listed_into_the_view(fake_kube, tracker, running):
    theirs = pod(running)
    theirs["metadata"]["labels"][names.LABEL_INSTANCE] = "staging"
    fake_kube.add("Pod", theirs)
    tracker.relist()
    assert tracker.view.pods == {}
    assert Workload.objects.get(id=running.id).state == State.PENDING


def test_a_look_alike_in_another_namespace_says_nothing_about_the_workload(fake_kube, tracker, running):
    fake_kube.add("Job", job(running, complete=True, namespace="gp-language"))
    fake_kube.add("Pod", pod(running, "Succeeded", namespace="gp-language"))
    tracker.relist()
    assert Workload.objects.get(id=running.id).state == State.PENDING


def _stream(tracker: watch_loop.Tracker, kind: str, seconds: float = 0.6) -> None:
    """One watch, read to its end on this thread; then the loop applies what it queued."""
    tracker._watch(kind, tracker.watches_from.get(kind, "1"), tracker.generation)
    tracker.relist_needed.clear()  # the stream ended; the loop would relist next, this test looks first
    tracker._stream_until_relist(time.monotonic(), seconds)


def test_a_watched_change_reaches_the_workload(fake_kube, tracker, running):
    fake_kube.add("Job", job(running))
    tracker.relist()
    fake_kube.watch_events["Pod"] = [
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "200"}}},
        {"type": "ADDED", "object": pod(running)},
    ]
    _stream(tracker, "Pod")
    assert Workload.objects.get(id=running.id).state == State.RUNNING
    assert ("watch", "Pod", tracker.watches_from["Pod"]) in fake_kube.calls


def test_a_watch_error_asks_for_a_relist_and_applies_nothing_after_it(fake_kube, tracker, running):
    tracker.relist()
    fake_kube.watch_events["Pod"] = [
        {"type": "ERROR", "object": {"code": 410, "reason": "Expired"}},
        {"type": "ADDED", "object": pod(running)},
    ]
    tracker._watch("Pod", "1", tracker.generation)
    assert tracker.relist_needed.is_set()
    assert tracker.events.empty()
    assert Workload.objects.get(id=running.id).state == State.PENDING


def test_events_of_an_older_list_are_dropped(fake_kube, tracker, running):
    tracker.relist()
    fake_kube.watch_events["Pod"] = [{"type": "ADDED", "object": pod(running)}]
    old_generation = tracker.generation
    tracker.generation += 1  # a relist happened while the old watch was still delivering
    tracker._watch("Pod", "1", old_generation)
    tracker.relist_needed.clear()
    tracker._stream_until_relist(time.monotonic(), 0.6)
    assert Workload.objects.get(id=running.id).state == State.PENDING


def test_a_batch_job_whose_objects_vanished_fails_on_a_full_sync(fake_kube, tracker, running):
    Workload.objects.filter(id=running.id).update(state=State.RUNNING, submitted_at=timezone.now() - timedelta(hours=1))
    tracker.relist()
    running.refresh_from_db()
    assert (running.state, running.reason) == (State.FAILED, "ObjectsMissing")
    assert running.message == "Its Job was deleted outside the portal."


def test_a_service_is_failed_only_when_its_deployment_is_gone(fake_kube, tracker, running):
    Workload.objects.filter(id=running.id).update(
        kind=Kind.SERVICE, port=8888, state=State.RUNNING, submitted_at=timezone.now() - timedelta(hours=1)
    )
    fake_kube.add("Deployment", {"metadata": {"name": running.k8s_name, "namespace": "gp-vision"}})
    tracker.relist()
    assert Workload.objects.get(id=running.id).state == State.RUNNING  # pods between replacements
    fake_kube.objects.clear()
    tracker.relist()
    assert Workload.objects.get(id=running.id).reason == "ObjectsMissing"
    assert [c for c in fake_kube.calls if c[0] == "read_namespaced_deployment"] == [("read_namespaced_deployment",)] * 2


def test_a_cancelled_workloads_running_pod_is_deleted_again(fake_kube, tracker, running, monkeypatch):
    asked: list[int] = []
    monkeypatch.setattr(dispatch, "enqueue_delete", lambda workload: asked.append(workload.id))
    Workload.objects.filter(id=running.id).update(state=State.CANCELLED)
    fake_kube.add("Pod", pod(running))
    gone = pod(running, name="being-deleted")
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:10:00Z"
    fake_kube.add("Pod", gone)
    tracker.relist()
    assert asked == [running.id]


def test_jobs_without_pods_cost_the_tracker_no_database_read(fake_kube, tracker, running, django_assert_num_queries):
    """Draining a long queue makes thousands of Jobs at once; until their pods come they say nothing."""
    tracker.relist()
    others = [job(running) for _ in range(3)]
    for n, other in enumerate(others):
        other["metadata"]["name"] = f"{running.k8s_name}-{n}"
    fake_kube.watch_events["Job"] = [{"type": "ADDED", "object": j} for j in [job(running), *others]]
    with django_assert_num_queries(0):
        _stream(tracker, "Job")
    assert Workload.objects.get(id=running.id).state == State.PENDING


def test_a_change_that_says_nothing_new_costs_the_tracker_no_database_read(
    fake_kube, tracker, running, django_assert_num_queries
):
    """A running pod turning Ready, its Job's start time: the view changes, what the workload is does not."""
    fake_kube.add("Job", job(running))
    fake_kube.add("Pod", pod(running))
    tracker.relist()
    timeline = running.events.count()
    ready = pod(running)
    ready["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:06Z"}]
    started = job(running)
    started["status"]["startTime"] = "2026-01-01T00:00:01Z"
    fake_kube.watch_events["Pod"] = [{"type": "MODIFIED", "object": ready}]
    fake_kube.watch_events["Job"] = [{"type": "MODIFIED", "object": started}]
    with django_assert_num_queries(0):
        _stream(tracker, "Pod")
        _stream(tracker, "Job")
    running.refresh_from_db()
    assert (running.state, running.message, running.events.count()) == (
        State.RUNNING,
        "Running on gpu-p100-1.",
        timeline,
    )
    fake_kube.watch_events["Pod"] = [{"type": "MODIFIED", "object": pod(running, "Succeeded")}]
    _stream(tracker, "Pod")  # what does say something new is recorded as before
    assert Workload.objects.get(id=running.id).state == State.SUCCEEDED
    fake_kube.watch_events["Job"] = [{"type": "MODIFIED", "object": job(running, complete=True)}]
    with django_assert_num_queries(0):  # an end is final: what its objects say after it changes nothing
        _stream(tracker, "Job")


def test_a_new_pod_is_never_taken_for_a_resend_of_what_was_recorded(fake_kube, tracker, running):
    """Another pod of the same workload (a replacement): its row is read and written as before."""
    fake_kube.add("Job", job(running))
    fake_kube.add("Pod", pod(running))
    tracker.relist()
    other = pod(running, name=f"{running.k8s_name}-fghij")
    other["metadata"]["creationTimestamp"] = "2026-01-01T00:00:30Z"
    fake_kube.watch_events["Pod"] = [{"type": "ADDED", "object": other}]
    _stream(tracker, "Pod")
    assert Workload.objects.get(id=running.id).pod_name == f"{running.k8s_name}-fghij"


def test_a_full_sync_reads_one_row_per_workload_whose_job_waits_for_its_pod(
    fake_kube, tracker, running, django_assert_num_queries
):
    Workload.objects.filter(id=running.id).update(submitted_at=timezone.now() - timedelta(hours=1))
    fake_kube.add("Job", job(running))
    tracker.relist()
    with django_assert_num_queries(1):  # the active workloads as a few columns; none of them loaded
        tracker.resync()
    assert Workload.objects.get(id=running.id).state == State.PENDING  # its Job is there: not "missing"


def test_a_resync_loads_no_workload_whose_objects_agree_with_its_row(
    fake_kube, tracker, running, django_assert_num_queries
):
    fake_kube.add("Job", job(running))
    fake_kube.add("Pod", pod(running))
    tracker.relist()
    assert Workload.objects.get(id=running.id).state == State.RUNNING
    with django_assert_num_queries(1):  # the active workloads as a few columns; none loaded, nothing written
        assert watch_loop.sync_workloads(tracker.view, None, full=True) == 0


def test_a_resync_puts_back_what_the_database_lost_of_what_the_cluster_says(fake_kube, tracker, running):
    fake_kube.add("Job", job(running))
    fake_kube.add("Pod", pod(running))
    tracker.relist()
    Workload.objects.filter(id=running.id).update(node_name="", message="")  # changed by someone meanwhile
    tracker.resync()
    running.refresh_from_db()
    assert (running.state, running.node_name, running.message) == (
        State.RUNNING,
        "gpu-p100-1",
        "Running on gpu-p100-1.",
    )
    Workload.objects.filter(id=running.id).update(state=State.PENDING)
    fake_kube.watch_events["Pod"] = []
    tracker.resync()
    assert Workload.objects.get(id=running.id).state == State.RUNNING


def test_a_watch_the_api_server_ended_goes_on_from_the_last_version_seen_without_a_relist(fake_kube, tracker, running):
    fake_kube.add("Job", job(running))
    tracker.relist()
    seen = pod(running)
    seen["metadata"]["resourceVersion"] = "205"
    fake_kube.watch_events["Pod"] = [
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "200"}}},
        {"type": "ADDED", "object": seen},
    ]
    watch = tracker._watch

    def twice(kind, version, generation):
        if sum(1 for call in fake_kube.calls if call[0] == "watch") == 1:
            tracker.stop_event.set()  # the second stream is the last this test reads
        return watch(kind, version, generation)

    tracker._watch = twice
    tracker._follow("Pod", "150", tracker.generation)
    assert [c for c in fake_kube.calls if c[0] == "watch"] == [("watch", "Pod", "150"), ("watch", "Pod", "205")]
    assert not tracker.relist_needed.is_set()
    assert [c[0] for c in fake_kube.calls if c[0].startswith("list_")] == [
        "list_job_for_all_namespaces",
        "list_pod_for_all_namespaces",
    ]


def test_objects_the_portal_deleted_are_never_blamed_on_someone_outside(fake_kube, tracker, running):
    """The portal itself deleted a running job's objects (not by its tasks, which refuse that, but a direct
    call): the tracker then says so, never "deleted outside the portal"."""
    from jobs.services.cluster import object_creation

    Workload.objects.filter(id=running.id).update(state=State.RUNNING, submitted_at=timezone.now() - timedelta(hours=1))
    running.refresh_from_db()
    fake_kube.add("Job", job(running))
    object_creation.workload_delete_objects(running)
    assert fake_kube.names("Job") == []
    tracker.relist()
    running.refresh_from_db()
    assert (running.state, running.reason) == (State.FAILED, "DeletedByPortal")
    assert "outside" not in running.message
    assert running.message == "Its Job was deleted by the portal, so it cannot go on."


def test_the_started_tracker_takes_what_it_holds_out_of_the_collectors_full_passes_once(
    fake_kube, tracker, running, monkeypatch
):
    """What the process holds once started is frozen (gc.freeze) after its first list, once, however often it
    lists again; the tracker records as before."""
    import gc

    fake_kube.add("Job", job(running))
    fake_kube.add("Pod", pod(running))
    settled: list[int] = []
    real = watch_loop.settle_heap
    monkeypatch.setattr(watch_loop, "settle_heap", lambda: settled.append(real()) or settled[-1])
    relist = tracker.relist

    def lists() -> list:
        return [call for call in fake_kube.calls if call[0].startswith("list_")]

    def relist_then_stop_after_the_second() -> None:
        relist()
        if len(lists()) >= 4:
            tracker.stop_event.set()

    monkeypatch.setattr(tracker, "relist", relist_then_stop_after_the_second)
    monkeypatch.setattr(tracker, "_stream_until_relist", lambda started, max_seconds: None)  # a watch broke at once
    try:
        tracker.run(max_seconds=30)
        assert len(lists()) == 4  # listed twice, Jobs and pods
        assert len(settled) == 1
        assert settled[0] > 0
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    running.refresh_from_db()
    assert running.state == State.RUNNING
