"""What each change of a workload's state writes in its indexes (issue 41, pgpath9). Every move changes `state`,
which indexes read, so no move is a HOT update: each writes an entry in every index whose condition the new row
meets. The indexes that only started runs, workloads with a catalog image or events not yet fanned out need are
partial, and the LIKE copies of the unique indexes (which nothing asks) are gone: a queued workload's moves and an
event's mark write fewer entries, and the queries those indexes serve still use them, whatever their parameters."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from jobs.models import CatalogImage, Kind, State, Workload
from jobs.services.usage.accounting import _live_querysets
from notifications.models import Event
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's index statistics and plans")


def _workload(**fields) -> Workload:
    team = TeamFactory(slug="vision")
    owner = UserFactory(username="olivia")
    if not owner.memberships.exists():
        MembershipFactory(team=team, user=owner)
    return Workload.objects.create(
        team=team, owner=owner, name="train", kind=Kind.BATCH, image="docker.io/x:1",
        gpu_type=GpuTypeFactory(slug="p100"), gpu_count=1, time_limit_seconds=3600, **fields,
    )  # fmt: skip


def _blocks_touched(table: str) -> dict[str, int]:
    """Buffer reads of each index of `table` so far (a descent to write an entry reads at least one)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:  # autocommit: the backend flushed its counters when it went idle
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT indexrelname, idx_blks_hit + idx_blks_read FROM pg_statio_user_indexes WHERE relname = %s",
            [table],
        )
        return dict(cursor.fetchall())


def _written_by(table: str, change, rows: list) -> set[str]:
    """The indexes of `table` that `change` of the last of `rows` reads; the others first, so that planning
    (which reads each index's first page once per connection) is behind it."""
    for row in rows[:-1]:
        change(row)
    before = _blocks_touched(table)
    change(rows[-1])
    after = _blocks_touched(table)
    return {name for name, blocks in after.items() if blocks > before.get(name, 0)}


@pytest.mark.django_db(transaction=True)
def test_a_queued_workloads_moves_before_it_starts_leave_the_usage_and_catalog_indexes_alone():
    now = timezone.now()
    # A started one with a catalog image, so no index is empty (planning reads an empty index's first page at
    # every statement; a filled one's is kept), then two queued ones.
    image = CatalogImage.objects.create(reference="docker.io/pytorch:2", title="PyTorch")
    _workload(catalog_image=image, state=State.RUNNING, started_at=now)
    workloads = [_workload(), _workload()]

    def admit(workload):
        Workload.objects.filter(id=workload.id).update(state=State.SUBMITTING, admitted_at=now, state_changed_at=now)

    written = _written_by("jobs_workload", admit, workloads)
    assert {"wl_state", "wl_queue"} <= written  # the move itself is no HOT update
    assert not written & {"wl_interval", "wl_catalog_image"}

    def start(workload):
        Workload.objects.filter(id=workload.id).update(state=State.RUNNING, started_at=now, state_changed_at=now)

    assert "wl_interval" in _written_by("jobs_workload", start, workloads)  # a started run enters the usage index


@pytest.mark.django_db(transaction=True)
def test_an_events_mark_leaves_the_sweeps_index_alone():
    Event.objects.create(key="workload.succeeded:0", kind="workload.succeeded", summary="done")  # none empty
    events = [
        Event.objects.create(key=f"workload.succeeded:{i}", kind="workload.succeeded", summary="done") for i in (1, 2)
    ]

    def mark(event):
        Event.objects.filter(id=event.id).update(fanned_out_at=timezone.now())  # (a read by id: the index alone)

    written = _written_by("notifications_event", mark, events)
    assert "notifications_event_pkey" in written  # the mark is no HOT update either
    assert "notify_event_fanout" not in written


@pytest.mark.django_db
def test_no_index_is_a_like_copy_of_another():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename IN ('jobs_workload', 'notifications_event') "
            "AND indexdef LIKE '%%pattern_ops%%'"
        )
        assert cursor.fetchall() == []


@pytest.mark.django_db(transaction=True)
def test_uids_and_event_keys_stay_unique():
    _workload(uid="x")
    with pytest.raises(IntegrityError), transaction.atomic():
        _workload(uid="x")
    Event.objects.create(key="k", kind="workload.failed", summary="failed")
    with pytest.raises(IntegrityError), transaction.atomic():
        Event.objects.create(key="k", kind="workload.failed", summary="failed again")


def _plan(queryset, *, generic: bool) -> str:
    """The plan PostgreSQL makes for the queryset with sequential scans off: with `generic`, the plan a prepared
    statement keeps after its first five runs (its parameters unknown to the planner), which is what the portal's
    connections run (`prepare_threshold`), so what a partial index must suit."""
    sql, params = queryset.query.sql_with_params()
    numbered = sql.replace("%s", "{}").format(*(f"${i}" for i in range(1, len(params) + 1)))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"SET LOCAL plan_cache_mode = {'force_generic_plan' if generic else 'force_custom_plan'}")
        cursor.execute(f"PREPARE planned AS {numbered}")
        try:
            values = ", ".join(["%s"] * len(params))
            cursor.execute(connection.ops.compose_sql(f"EXPLAIN EXECUTE planned({values})", params))
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("DEALLOCATE planned")
    assert ("$1" in plan) == generic  # the plan is the kind asked for
    return plan


@pytest.mark.django_db
@pytest.mark.parametrize("generic", [False, True])
def test_the_queries_the_partial_indexes_serve_still_use_them(generic):
    now = timezone.now()
    usage, _ = _live_querysets(now - timedelta(days=1), now, None)
    assert "wl_interval" in _plan(usage, generic=generic)
    image = CatalogImage.objects.create(reference="docker.io/pytorch:2", title="PyTorch")
    # What deleting a catalog image runs to set its workloads' image to NULL.
    assert "wl_catalog_image" in _plan(Workload.objects.filter(catalog_image__in=[image.id]), generic=generic)
    sweep = Event.objects.filter(fanned_out_at=None, created_at__lt=now).values_list("id", flat=True)[:500]
    assert "notify_event_fanout" in _plan(sweep, generic=generic)
