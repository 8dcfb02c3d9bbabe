"""A burst's moves and pending reasons are written by one statement per chunk on PostgreSQL (issue 41: the
tracker is the one watcher, and a statement per workload was most of its CPU), with the guards of one at a
time: a row moves only from the state it was read in, and only the rows written get a timeline entry and
their follow-ups."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from benchmarks.profile_tracker import _objects
from jobs.kube import names
from jobs.models import Kind, State, Workload, WorkloadEvent
from jobs.services.cluster import watch_loop
from jobs.services.usage.accounting import counted_interval
from notifications.events import SUCCEEDED
from notifications.models import Event
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="the chunk's one statement is PostgreSQL's")


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    from portal.celery import app

    monkeypatch.setattr(app, "send_task", lambda *args, **kwargs: None)


def _placed(count: int, state: str) -> list[Workload]:
    team = TeamFactory(slug="vision")
    owner = MembershipFactory(team=team, user=UserFactory(username="olivia")).user
    gpu = GpuTypeFactory(slug="p100")
    started = timezone.now() - timedelta(minutes=5)
    placed = []
    for i in range(count):
        workload = Workload.objects.create(
            team=team, owner=owner, name=f"train-{i}", kind=Kind.BATCH, image="docker.io/x:1", gpu_type=gpu,
            gpu_count=1, time_limit_seconds=3600, state=state, namespace=team.namespace, submitted_at=started,
            started_at=started if state == State.RUNNING else None,
        )  # fmt: skip
        workload.k8s_name = names.attempt_name(workload.name, workload.uid, 0)
        workload.save(update_fields=["k8s_name"])
        placed.append(workload)
    return placed


def _view(workloads: list[Workload], *, succeeded: bool) -> watch_loop.ClusterView:
    view = watch_loop.ClusterView()
    for workload in workloads:
        job, pod = _objects(workload, succeeded=succeeded, started=timezone.now() - timedelta(minutes=5))
        view.put("Job", job)
        view.put("Pod", pod)
    return view


def _statements(run) -> tuple[object, list[str]]:
    sent: list[str] = []

    def watch(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        return run(), sent


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("count", [2, 7])
def test_a_burst_of_ends_costs_the_same_statements_whatever_its_size(count):
    burst = _placed(count, State.RUNNING)
    view = _view(burst, succeeded=True)
    changed, sent = _statements(lambda: watch_loop.sync_workloads(view, {w.uid for w in burst}, full=False))
    assert changed == count
    # The load, the chunk's moves with their timeline rows, the chunk's notification events.
    assert len(sent) == 3, sent
    for workload in burst:
        workload.refresh_from_db()
        assert workload.state == State.SUCCEEDED
        assert counted_interval(workload) is not None  # its end recorded: its GPU time is accounted
        timeline = list(WorkloadEvent.objects.filter(workload=workload).values_list("from_state", "to_state"))
        assert timeline == [(State.RUNNING, State.SUCCEEDED)]
    assert Event.objects.filter(workload__in=burst, kind=SUCCEEDED).count() == count


@pytest.mark.django_db(transaction=True)
def test_a_row_moved_by_someone_else_after_the_load_is_left_alone(monkeypatch):
    burst = _placed(3, State.PENDING)
    stale = burst[1]
    load = watch_loop._load

    def load_then_someone_cancels(wanted):
        rows = load(wanted)
        Workload.objects.filter(id=stale.id).update(state=State.CANCELLED, finished_at=None)
        return rows

    monkeypatch.setattr(watch_loop, "_load", load_then_someone_cancels)
    view = _view(burst, succeeded=False)
    assert watch_loop.sync_workloads(view, {w.uid for w in burst}, full=False) == 2
    states = dict(Workload.objects.filter(id__in=[w.id for w in burst]).values_list("id", "state"))
    assert states == {burst[0].id: State.RUNNING, stale.id: State.CANCELLED, burst[2].id: State.RUNNING}
    assert not WorkloadEvent.objects.filter(workload=stale).exists()  # no timeline entry for a move not made
    assert WorkloadEvent.objects.filter(workload__in=[burst[0], burst[2]], to_state=State.RUNNING).count() == 2


@pytest.mark.django_db(transaction=True)
def test_pending_reasons_and_moves_of_one_burst_are_one_statement():
    pending = _placed(2, State.PENDING)
    view = _view(pending[:1], succeeded=False)
    # The second one's pod is named but not placed yet: a new pending reason, no move.
    job, pod = _objects(pending[1], succeeded=False, started=timezone.now())
    pod["spec"] = {}
    pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                     "reason": "Unschedulable", "message": "0/3 nodes are available"}]}  # fmt: skip
    view.put("Job", job)
    view.put("Pod", pod)
    changed, sent = _statements(lambda: watch_loop.sync_workloads(view, {w.uid for w in pending}, full=False))
    assert changed == 2
    assert len(sent) == 2, sent  # the load, then the moves and the reasons together
    first, second = (Workload.objects.get(id=w.id) for w in pending)
    assert first.state == State.RUNNING
    assert second.state == State.PENDING
    assert second.reason != ""
    entry = WorkloadEvent.objects.get(workload=second)
    assert (entry.from_state, entry.to_state, entry.reason) == (State.PENDING, State.PENDING, second.reason)


@pytest.mark.django_db(transaction=True)
def test_a_chunk_whose_statement_fails_is_recorded_one_at_a_time(caplog):
    """The database refuses one workload's row (a trigger here): the chunk's one statement fails, its
    transaction is rolled back, and its workloads are recorded again one at a time: the others move, each
    with one timeline entry and one notification; the refused one stays as it was."""
    burst = _placed(3, State.RUNNING)
    refused = burst[1]
    table = Workload._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE FUNCTION refuse_one() RETURNS trigger AS $$ BEGIN IF NEW.id = {int(refused.id)} THEN "
            "RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql"
        )
        cursor.execute(
            f'CREATE TRIGGER refuse_one BEFORE UPDATE ON "{table}" FOR EACH ROW EXECUTE FUNCTION refuse_one()'
        )
    try:
        view = _view(burst, succeeded=True)
        assert watch_loop.sync_workloads(view, {w.uid for w in burst}, full=False) == 2
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP TRIGGER refuse_one ON "{table}"')
            cursor.execute("DROP FUNCTION refuse_one()")
    assert "recording them one at a time" in caplog.text
    states = dict(Workload.objects.filter(id__in=[w.id for w in burst]).values_list("id", "state"))
    assert states == {w.id: State.RUNNING if w.id == refused.id else State.SUCCEEDED for w in burst}
    for workload in burst:
        entries = WorkloadEvent.objects.filter(workload=workload).count()
        events = Event.objects.filter(workload=workload, kind=SUCCEEDED).count()
        assert (entries, events) == ((0, 0) if workload.id == refused.id else (1, 1))
