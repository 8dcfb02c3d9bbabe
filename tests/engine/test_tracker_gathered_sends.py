"""A burst of ends recorded by the tracker hands its notifications to the worker as one message, and the
worker fans every one of them out; outside a burst an event still goes alone (issue 41: the tracker is the
one watcher, and a publish per finished workload was a fifth of its CPU)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from benchmarks.profile_tracker import _objects
from jobs.kube import names
from jobs.models import Kind, State, Workload
from jobs.services import dispatch
from jobs.services.cluster import watch_loop
from notifications import tasks as notifications_tasks
from notifications.models import Delivery, Event
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory, UserFactory


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, list[int]]]:
    """Every gathered message, as it would go to the broker. Recorded, not published: in the whole suite a
    worker of the running engine consumes the broker and would fan the events out before the test does
    (the test plays the worker's part itself, with the ids the message carried)."""
    messages: list[tuple[str, list[int]]] = []

    def recorded(task_name: str, ids: list[int]) -> None:
        messages.append((task_name, list(ids)))

    monkeypatch.setattr(dispatch, "_send_ids", recorded)
    return messages


def _running(count: int) -> list[Workload]:
    team = TeamFactory(slug="vision")
    owner = MembershipFactory(team=team, user=UserFactory(username="olivia")).user
    gpu = GpuTypeFactory(slug="p100")
    started = timezone.now() - timedelta(minutes=5)
    burst = []
    for i in range(count):
        workload = Workload.objects.create(
            team=team, owner=owner, name=f"train-{i}", kind=Kind.BATCH, image="docker.io/x:1", gpu_type=gpu,
            gpu_count=1, time_limit_seconds=3600, state=State.RUNNING, namespace=team.namespace,
            submitted_at=started, started_at=started,
        )  # fmt: skip
        workload.k8s_name = names.attempt_name(workload.name, workload.uid, 0)
        workload.save(update_fields=["k8s_name"])
        burst.append(workload)
    return burst


@pytest.mark.django_db(transaction=True)  # each transition commits, and hands its event over on commit
def test_a_burst_of_ends_sends_one_fan_out_and_the_worker_fans_out_every_event(sent):
    burst = _running(3)
    view = watch_loop.ClusterView()
    for workload in burst:
        job, pod = _objects(workload, succeeded=True, started=workload.started_at)
        view.put("Job", job)
        view.put("Pod", pod)
    inserts: list[str] = []

    def watch(execute, sql, params, many, context):
        if sql.startswith(f'INSERT INTO "{Event._meta.db_table}"'):
            inserts.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        assert watch_loop.sync_workloads(view, {w.uid for w in burst}, full=False) == 3
    events = list(Event.objects.filter(workload__in=burst).order_by("id").values_list("id", flat=True))
    assert len(events) == 3
    assert len(inserts) == 1  # the burst's events stored together, in its transaction
    assert sent == [("notifications.tasks.fan_out_many", events)]
    with CaptureQueriesContext(connection) as fanning_out:
        assert notifications_tasks.fan_out_many(events) == 3  # an email to the owner for each
    # The burst's events read together, their deliveries stored and the events marked together.
    assert len(fanning_out.captured_queries) == 2, [q["sql"] for q in fanning_out.captured_queries]
    assert Event.objects.filter(id__in=events, fanned_out_at=None).count() == 0
    assert Delivery.objects.filter(event_id__in=events).count() == 3
    assert notifications_tasks.fan_out_many(events) == 0  # again (a retried task): nothing new
    assert Delivery.objects.filter(event_id__in=events).count() == 3


def test_outside_a_burst_nothing_is_gathered():
    assert not dispatch.gather("notifications.tasks.fan_out_many", 1)
    with dispatch.sends_gathered():
        assert dispatch.gather("notifications.tasks.fan_out_many", 1)
    assert not dispatch.gather("notifications.tasks.fan_out_many", 1)


def _ended_view(burst: list[Workload]) -> watch_loop.ClusterView:
    view = watch_loop.ClusterView()
    for workload in burst:
        job, pod = _objects(workload, succeeded=True, started=workload.started_at)
        view.put("Job", job)
        view.put("Pod", pod)
    return view


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_ends_asks_for_one_admission_pass_per_team_and_gpu_type(monkeypatch, sent):
    """Their GPUs are free once the burst is committed: one pass per team and type sees them all (the
    request's Redis round trip was paid once per finished workload)."""
    from django.core.cache import caches

    burst = _running(3)
    other = burst[0]
    other_type = GpuTypeFactory(slug="a100")
    Workload.objects.filter(id=other.id).update(gpu_type=other_type)
    burst = list(Workload.objects.filter(id__in=[w.id for w in burst]).select_related("gpu_type"))
    for type_id in {w.gpu_type_id for w in burst}:
        caches["api"].delete(dispatch._admission_key(burst[0].team_id, type_id))
    asked: list[tuple] = []
    monkeypatch.setattr(dispatch, "_send", lambda task_name, *args, **kwargs: asked.append((task_name, *args)))
    cache, added = caches["api"], []
    add = cache.add
    monkeypatch.setattr(cache, "add", lambda key, *args, **kwargs: added.append(key) or add(key, *args, **kwargs))
    assert watch_loop.sync_workloads(_ended_view(burst), {w.uid for w in burst}, full=False) == 3
    team = burst[0].team_id
    assert sorted(asked) == sorted({("jobs.tasks.admit", team, w.gpu_type_id) for w in burst})
    assert len(asked) == 2
    assert len(added) == 2  # one Redis request per team and type, not one per finished workload


@pytest.mark.django_db(transaction=True)
def test_a_workload_that_cannot_be_recorded_holds_back_none_of_the_others(monkeypatch, sent):
    """A burst is recorded in one transaction; one workload whose write fails (here the database refuses
    its statement, which aborts the transaction) has the others recorded one at a time, each told once."""
    from django.db import connection

    from jobs.services.cluster import status_mapping

    burst = _running(3)
    bad = burst[1]
    apply, plan = status_mapping.apply_observation, status_mapping.plan_observation

    def failing_for_one(original):
        def failing(workload, obs):
            if workload.uid == bad.uid:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1 / 0")
            return original(workload, obs)

        return failing

    # One at a time (and elsewhere than PostgreSQL) the observation is applied; in a chunk on PostgreSQL,
    # planned for the chunk's one statement.
    monkeypatch.setattr(watch_loop, "apply_observation", failing_for_one(apply))
    monkeypatch.setattr(status_mapping, "plan_observation", failing_for_one(plan))
    assert watch_loop.sync_workloads(_ended_view(burst), {w.uid for w in burst}, full=False) == 2
    states = dict(Workload.objects.filter(id__in=[w.id for w in burst]).values_list("uid", "state"))
    assert states == {w.uid: State.RUNNING if w.uid == bad.uid else State.SUCCEEDED for w in burst}
    events = list(Event.objects.filter(workload__in=burst).order_by("id").values_list("id", flat=True))
    assert len(events) == 2  # the rolled-back attempt left no event behind
    assert sent == [("notifications.tasks.fan_out_many", events)]


@pytest.mark.django_db(transaction=True)
def test_bursts_within_a_second_hand_over_their_notifications_together(sent):
    """The tracker holds what its bursts gathered and publishes it once a second (under a busy cluster a
    burst holds one or two ends): one message for both bursts here, every event fanned out."""
    first, second = _running(2)
    with dispatch.gathered_ids_held():
        assert watch_loop.sync_workloads(_ended_view([first]), {first.uid}, full=False) == 1
        assert watch_loop.sync_workloads(_ended_view([second]), {second.uid}, full=False) == 1
        assert sent == []  # held, committed
    events = list(Event.objects.filter(workload__in=[first, second]).order_by("id").values_list("id", flat=True))
    assert sent == [("notifications.tasks.fan_out_many", events)]
    assert notifications_tasks.fan_out_many(events) == 2
