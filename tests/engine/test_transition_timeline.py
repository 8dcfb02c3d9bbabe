"""A transition is one statement on PostgreSQL (the guarded UPDATE feeding the timeline INSERT), and its timeline entry never
sorts before the one it follows, even when Kubernetes' whole-second timestamp says it happened earlier."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.models import State, Workload, WorkloadEvent
from jobs.services.transitions import transition
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def workload():
    team = TeamFactory(slug="lab")
    owner = MembershipFactory(team=team).user
    return Workload.objects.create(
        team=team, owner=owner, name="w", kind="batch", image="ubuntu", gpu_type=GpuTypeFactory(slug="p100"),
        gpu_count=1, time_limit_seconds=3600, state=State.SUBMITTING,
    )  # fmt: skip


def test_a_transition_costs_one_statement(workload):
    with CaptureQueriesContext(connection) as captured:
        assert transition(workload, State.PENDING, reason="Created", message="Job created.")
    statements = [
        q["sql"] for q in captured.captured_queries if q["sql"].split()[0] in ("WITH", "UPDATE", "INSERT", "SELECT")
    ]
    assert len(statements) == 1
    assert statements[0].split()[:4] == ["WITH", "moved", "AS", "(UPDATE"]
    assert "INSERT INTO" in statements[0]
    assert Workload.objects.get(id=workload.id).state == State.PENDING
    assert list(workload.events.values_list("to_state", "message")) == [(State.PENDING, "Job created.")]


def test_a_transition_that_lost_the_race_writes_no_entry(workload):
    Workload.objects.filter(id=workload.id).update(state=State.CANCELLED)  # another process moved it first
    assert not transition(workload, State.PENDING, reason="Created")
    assert workload.state == State.CANCELLED  # re-read
    assert not workload.events.exists()


def test_an_earlier_kubernetes_timestamp_is_moved_up_to_the_entry_it_follows(workload):
    pending_at = timezone.now()
    WorkloadEvent.objects.create(workload=workload, at=pending_at, to_state=State.SUBMITTING, reason="Admitted")
    transition(workload, State.PENDING, reason="Created")
    created = WorkloadEvent.objects.filter(workload=workload).latest("id")
    assert created.at >= pending_at
    whole_second = created.at.replace(microsecond=0) - timedelta(seconds=1)  # as the pod's status says
    transition(workload, State.RUNNING, reason="Started", at=whole_second, source=WorkloadEvent.Source.KUBERNETES)
    running = WorkloadEvent.objects.filter(workload=workload).latest("id")
    assert running.at == created.at
    assert [e.to_state for e in workload.events.order_by("at", "id")][-2:] == [State.PENDING, State.RUNNING]


def test_a_later_timestamp_is_kept(workload):
    later = timezone.now() + timedelta(seconds=30)
    transition(workload, State.PENDING, reason="Created", at=later)
    assert WorkloadEvent.objects.filter(workload=workload).latest("id").at == later


def test_a_note_after_a_state_change_stamped_ahead_of_our_clock_still_sorts_after_it(workload):
    from jobs.services.transitions import note

    ahead = timezone.now() + timedelta(seconds=30)  # the API server's clock runs ahead of the portal's
    transition(workload, State.PENDING, reason="Created", at=ahead, source=WorkloadEvent.Source.KUBERNETES)
    note(workload, reason="Unschedulable", message="0/5 nodes are available")
    assert [e.reason for e in workload.events.order_by("at", "id")][-2:] == ["Created", "Unschedulable"]


def test_a_new_reason_read_against_a_state_that_has_moved_on_writes_nothing(workload):
    from jobs.services.cluster.status_mapping import Observation, apply_observation

    Workload.objects.filter(id=workload.id).update(state=State.RUNNING)  # the tracker's copy is behind
    workload.state = State.PENDING
    stale = Observation(state=State.PENDING, reason="ImagePullBackOff", message="Back-off pulling image")
    assert not apply_observation(workload, stale)
    assert not WorkloadEvent.objects.filter(workload=workload, reason="ImagePullBackOff").exists()
    assert Workload.objects.get(id=workload.id).reason != "ImagePullBackOff"


def test_a_new_reason_on_the_current_state_is_stored_with_its_timeline_entry(workload):
    from jobs.services.cluster.status_mapping import Observation, apply_observation

    Workload.objects.filter(id=workload.id).update(state=State.PENDING)
    workload.state = State.PENDING
    assert apply_observation(workload, Observation(state=State.PENDING, reason="Unschedulable", message="0/5 nodes"))
    stored = Workload.objects.get(id=workload.id)
    assert (stored.reason, stored.message) == ("Unschedulable", "0/5 nodes")
    entry = WorkloadEvent.objects.get(workload=workload, reason="Unschedulable")
    assert (entry.from_state, entry.to_state) == (State.PENDING, State.PENDING)
