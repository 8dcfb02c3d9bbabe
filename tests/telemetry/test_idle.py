"""The idle-service policy with frozen time: warn the owner, then stop the service; every step on the timeline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from agent.simulated import BusyGpu
from jobs.models import Kind, State
from notifications.events import CANCELLED, IDLE_WARNING
from notifications.models import Event
from telemetry.models import IdlePolicy, IdleWarning
from telemetry.services.idle import idle_check
from telemetry.services.ingest import report_ingest
from tests.telemetry.conftest import running_workload
from tests.telemetry.helpers import make_report

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def feed(workload, start: datetime, end: datetime, utilization: float, *, every: timedelta = timedelta(minutes=1)):
    """One real agent report per `every` from start to end, the workload's GPU at `utilization` %."""
    at = start + timedelta(seconds=30)
    while at < end:
        busy = {
            i: BusyGpu(pod_uid=workload.pod_uid, utilization_percent=utilization) for i in range(workload.gpu_count)
        }
        report_ingest(report=make_report(busy=busy, at=at, interval=60), received_at=at)
        at += every


def check_at(moment: datetime) -> dict[str, int]:
    with time_machine.travel(moment, tick=False):
        return idle_check()


def timeline(workload) -> list[tuple[str, str, str]]:
    return [(e.from_state, e.to_state, e.reason) for e in workload.events.order_by("at", "id")]


@pytest.fixture
def notebook(people):
    IdlePolicy.objects.create(
        team=people.team, threshold_percent=5, warn_after_hours=Decimal(2), stop_after_hours=Decimal(1)
    )
    return running_workload(people, name="notebook", kind=Kind.SERVICE, gpus=2, started_at=T0)


def test_an_idle_service_is_warned_after_n_hours_then_stopped_after_m_more(people, notebook):
    feed(notebook, T0, T0 + timedelta(hours=4), utilization=2)

    assert check_at(T0 + timedelta(hours=1))["warned"] == 0
    assert check_at(T0 + timedelta(hours=1, minutes=59))["warned"] == 0

    assert check_at(T0 + timedelta(hours=2, minutes=1)) == {"checked": 1, "warned": 1, "cleared": 0, "stopped": 0}
    notebook.refresh_from_db()
    assert notebook.state == State.RUNNING
    warning = notebook.events.get(reason="IdleWarning")
    assert (warning.from_state, warning.to_state, warning.source) == (State.RUNNING, State.RUNNING, "portal")
    assert warning.at == T0 + timedelta(hours=2, minutes=1)
    assert "below 5 % utilization for 2.0 h" in warning.message
    assert "stopped at 2026-03-02 11:01 UTC" in warning.message
    # The owner is told (notifications: one event, sent by Celery; tests/notifications send it for real).
    (told,) = Event.objects.filter(workload=notebook)
    assert (told.kind, told.recipient) == (IDLE_WARNING, people.owner)
    assert "notebook" in told.summary
    assert "stopped at 2026-03-02 11:01 UTC" in told.summary

    # Still idle, not yet M hours after the warning: nothing new.
    assert check_at(T0 + timedelta(hours=2, minutes=40)) == {"checked": 1, "warned": 0, "cleared": 0, "stopped": 0}

    assert check_at(T0 + timedelta(hours=3, minutes=2))["stopped"] == 1
    notebook.refresh_from_db()
    assert (notebook.state, notebook.reason) == (State.CANCELLED, "IdleStopped")
    assert notebook.finished_at == T0 + timedelta(hours=3, minutes=2)
    assert "below 5 % GPU utilization" in notebook.message
    assert timeline(notebook)[-2:] == [
        (State.RUNNING, State.RUNNING, "IdleWarning"),
        (State.RUNNING, State.CANCELLED, "IdleStopped"),
    ]
    assert list(Event.objects.filter(workload=notebook).order_by("id").values_list("kind", flat=True)) == [
        IDLE_WARNING,
        CANCELLED,
    ]
    assert not IdleWarning.objects.exists()
    # A stopped service is not looked at again.
    assert check_at(T0 + timedelta(hours=5))["checked"] == 0


def test_the_warning_is_withdrawn_when_the_gpus_are_used_again(people, notebook):
    feed(notebook, T0, T0 + timedelta(hours=2, minutes=10), utilization=1)
    assert check_at(T0 + timedelta(hours=2, minutes=5))["warned"] == 1
    feed(notebook, T0 + timedelta(hours=2, minutes=10), T0 + timedelta(hours=2, minutes=20), utilization=95)
    feed(notebook, T0 + timedelta(hours=2, minutes=20), T0 + timedelta(hours=4), utilization=1)

    assert check_at(T0 + timedelta(hours=2, minutes=30))["cleared"] == 1
    assert check_at(T0 + timedelta(hours=3, minutes=10)) == {"checked": 1, "warned": 0, "cleared": 0, "stopped": 0}

    notebook.refresh_from_db()
    assert notebook.state == State.RUNNING
    assert [r for _, _, r in timeline(notebook)][-2:] == ["IdleWarning", "IdleCleared"]


def test_missing_telemetry_is_not_idleness(people, notebook):
    # Agent down for the whole time: nothing to judge by.
    assert check_at(T0 + timedelta(hours=6))["warned"] == 0
    # A sample every five minutes covers a fifth of the idle period: still not enough to accuse anyone.
    feed(notebook, T0, T0 + timedelta(hours=6), utilization=0, every=timedelta(minutes=5))
    assert check_at(T0 + timedelta(hours=6))["warned"] == 0
    assert not notebook.events.filter(reason="IdleWarning").exists()


def test_without_a_stop_time_the_owner_is_warned_once_and_the_service_keeps_running(people, notebook):
    IdlePolicy.objects.filter(team=people.team).update(stop_after_hours=None)
    feed(notebook, T0, T0 + timedelta(hours=8), utilization=0)
    assert check_at(T0 + timedelta(hours=3))["warned"] == 1
    assert check_at(T0 + timedelta(hours=7)) == {"checked": 1, "warned": 0, "cleared": 0, "stopped": 0}
    notebook.refresh_from_db()
    assert notebook.state == State.RUNNING
    assert "Please stop it" in notebook.events.get(reason="IdleWarning").message


def test_batch_jobs_busy_services_and_teams_without_a_policy_are_left_alone(people, notebook):
    batch = running_workload(people, name="batch", kind=Kind.BATCH, started_at=T0)
    busy = running_workload(people, name="busy-svc", kind=Kind.SERVICE, started_at=T0)
    feed(batch, T0, T0 + timedelta(hours=3), utilization=0)
    feed(busy, T0, T0 + timedelta(hours=3), utilization=60)
    IdlePolicy.objects.filter(team=people.team).update(enabled=False)
    assert check_at(T0 + timedelta(hours=3)) == {"checked": 0, "warned": 0, "cleared": 0, "stopped": 0}
    IdlePolicy.objects.filter(team=people.team).update(enabled=True)
    result = check_at(T0 + timedelta(hours=2, minutes=30))
    # The notebook (no samples) and the busy service are checked; neither is warned; the batch job is not a service.
    assert result == {"checked": 2, "warned": 0, "cleared": 0, "stopped": 0}


# --- browser activity through the portal's proxy: the second signal ----------------------------------
def _opened_at(workload, moment: datetime) -> None:
    type(workload).objects.filter(id=workload.id).update(last_activity_at=moment)


def test_an_active_browser_tab_keeps_an_idle_gpu_service_from_being_warned(people, notebook):
    feed(notebook, T0, T0 + timedelta(hours=4, minutes=30), utilization=1)
    _opened_at(notebook, T0 + timedelta(hours=1, minutes=50))
    assert check_at(T0 + timedelta(hours=2, minutes=5))["warned"] == 0  # GPU idle 2 h, but used 15 min ago
    assert check_at(T0 + timedelta(hours=3, minutes=45))["warned"] == 0
    result = check_at(T0 + timedelta(hours=3, minutes=52))  # 2 h after the last request: idle by both signals
    assert result["warned"] == 1
    warning = notebook.events.get(reason="IdleWarning")
    assert "nobody has opened it or held an SSH session to it through the portal since" in warning.message
    assert "since 2026-03-02 09:50 UTC" in warning.message


def test_a_policy_on_gpu_use_only_ignores_the_browser(people, notebook):
    IdlePolicy.objects.filter(team=people.team).update(browser_activity_counts=False)
    feed(notebook, T0, T0 + timedelta(hours=2, minutes=10), utilization=1)
    _opened_at(notebook, T0 + timedelta(hours=2))
    assert check_at(T0 + timedelta(hours=2, minutes=5))["warned"] == 1


def test_opening_the_service_withdraws_the_warning(people, notebook):
    feed(notebook, T0, T0 + timedelta(hours=3), utilization=1)
    assert check_at(T0 + timedelta(hours=2, minutes=5))["warned"] == 1
    _opened_at(notebook, T0 + timedelta(hours=2, minutes=20))
    assert check_at(T0 + timedelta(hours=2, minutes=30))["cleared"] == 1
    assert [r for _, _, r in timeline(notebook)][-2:] == ["IdleWarning", "IdleCleared"]
