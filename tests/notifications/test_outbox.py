"""Notifications end to end in one process: a workload's transition records one event, fan-out makes one
delivery per channel and recipient, and each is sent once to a real SMTP server and a real HTTP receiver;
retries are bounded, bad receivers never block, and no URL or secret leaks into what is stored."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from jobs.models import Kind, State, Workload
from jobs.services.cancel import workload_cancel
from jobs.services.transitions import transition
from notifications import events
from notifications.delivery import delivery_send, event_fan_out, notifications_sweep
from notifications.models import Delivery, Event, Preference, TeamWebhook, Topic, WebhookFormat
from tests.notifications.helpers import deliver_everything

pytestmark = [pytest.mark.django_db, pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")]


def workload(lab, *, state=State.RUNNING, name="resnet", **fields) -> Workload:
    now = timezone.now()
    defaults = {
        "team": lab.team,
        "owner": lab.owner,
        "name": name,
        "kind": Kind.BATCH,
        "image": "nvidia/cuda:12.2.0-base-ubuntu22.04",
        "gpu_type": lab.p100,
        "gpu_count": 2,
        "time_limit_seconds": 3600,
        "state": state,
        "created_at": now - timedelta(hours=3),
        "admitted_at": now - timedelta(hours=3),
        "started_at": now - timedelta(hours=3),
    }
    return Workload.objects.create(**{**defaults, **fields})


def test_a_failed_job_sends_one_email_and_one_webhook_with_name_state_reason_and_gpu_hours(lab, smtp, receiver):
    TeamWebhook.objects.create(team=lab.team, url=receiver.url("/team"), format=WebhookFormat.JSON)
    job = workload(lab)
    finished = job.started_at + timedelta(hours=1, minutes=30)
    assert transition(
        job, State.FAILED, reason="OOMKilled", message="The container ran out of memory.", finished_at=finished
    )

    assert deliver_everything()
    assert Delivery.objects.filter(status=Delivery.Status.SENT).count() == 2
    (mail,) = smtp.wait_for(1)
    assert mail["To"] == lab.owner.email
    assert mail["Subject"] == "[GPU Portal] resnet failed: The container ran out of memory."
    body = mail.get_payload()
    for fact in ("State: FAILED", "Reason: OOMKilled", "GPU-hours: 3.0", "Team: Vision Lab", f"/workloads/{job.uid}/"):
        assert fact in body
    (hook,) = receiver.wait_for(1)
    assert hook.path == "/team"
    assert hook.body["event"] == "workload.failed"
    assert {k: hook.body["workload"][k] for k in ("name", "state", "reason", "gpu_hours")} == {
        "name": "resnet",
        "state": "FAILED",
        "reason": "OOMKilled",
        "gpu_hours": 3.0,
    }
    # The same key in both places a receiver can deduplicate on.
    email_key = Delivery.objects.get(channel="email").idempotency_key
    assert mail["Message-ID"] == f"<{email_key}@127.0.0.1>"
    assert hook.headers["Idempotency-Key"] == hook.body["id"]

    # Everything again (a retried task, the sweep): nothing more goes out.
    event_fan_out(Event.objects.get().id)
    for delivery in Delivery.objects.all():
        assert delivery_send(delivery.id) == "not-due"
    assert (len(smtp.messages), len(receiver.deliveries)) == (1, 1)


def test_success_is_told_with_gpu_hours_and_slack_and_mattermost_payloads(lab, smtp, receiver):
    Preference.objects.create(user=lab.owner, webhook_url=receiver.url("/me"), webhook_format=WebhookFormat.SLACK)
    TeamWebhook.objects.create(team=lab.team, url=receiver.url("/team"), format=WebhookFormat.MATTERMOST)
    job = workload(lab)
    transition(job, State.SUCCEEDED, reason="Completed", finished_at=job.started_at + timedelta(hours=2))
    deliver_everything()
    bodies = {d.path: d.body for d in receiver.wait_for(2)}
    assert bodies["/me"]["text"].startswith("resnet succeeded (4.00 GPU-hours).")
    assert bodies["/me"]["blocks"][0]["type"] == "section"
    assert bodies["/team"]["username"] == "GPU Portal"
    assert "4.0 GPU-hours" in bodies["/team"]["props"]["card"]
    assert smtp.wait_for(1)[0]["Subject"] == "[GPU Portal] resnet succeeded (4.00 GPU-hours)."


def test_cancelled_by_someone_else_is_news_cancelled_by_oneself_is_not(lab):
    mine = workload(lab, name="mine")
    workload_cancel(workload=mine, by=lab.owner)
    assert not Event.objects.exists()
    theirs = workload(lab, name="theirs")
    workload_cancel(workload=theirs, by=lab.manager)
    (event,) = Event.objects.all()
    assert (event.kind, event.recipient) == (events.CANCELLED, lab.owner)
    assert event.summary == "theirs was stopped: Cancelled by max."


def test_started_after_waiting_is_told_once_a_short_wait_is_not(lab, settings):
    settings.NOTIFY_QUEUED_MIN_SECONDS = 600
    now = timezone.now()
    waited = workload(lab, name="waited", state=State.PENDING, created_at=now - timedelta(hours=2), admitted_at=now)
    quick = workload(lab, name="quick", state=State.PENDING, created_at=now - timedelta(seconds=20), admitted_at=now)
    transition(waited, State.RUNNING)
    transition(quick, State.RUNNING)
    # A service whose pod is re-created runs again: still one "started".
    transition(waited, State.PENDING)
    transition(waited, State.RUNNING)
    (event,) = Event.objects.all()
    assert (event.kind, event.workload_id) == (events.STARTED, waited.id)
    assert "after waiting 2 h 0 min in the queue" in event.summary


def test_time_limit_warning_once_before_the_limit(lab):
    service = workload(lab, kind=Kind.SERVICE, name="notebook", time_limit_seconds=4 * 3600)
    deadline = service.started_at + timedelta(hours=4)
    with time_machine.travel(deadline - timedelta(minutes=30), tick=False):
        assert events.time_limit_warnings() == 0
    with time_machine.travel(deadline - timedelta(minutes=10), tick=False):
        assert events.time_limit_warnings() == 1
        assert events.time_limit_warnings() == 0
    (event,) = Event.objects.all()
    assert event.kind == events.TIME_LIMIT_WARNING
    assert "reaches its time limit" in event.summary


def test_preferences_choose_topics_and_channels(lab, smtp):
    Preference.objects.create(user=lab.owner, topics=[Topic.PROBLEMS], email=True)
    ok, bad = workload(lab, name="ok"), workload(lab, name="bad")
    transition(ok, State.SUCCEEDED, finished_at=timezone.now())
    transition(bad, State.FAILED, reason="Error", message="Exit code 1.", finished_at=timezone.now())
    deliver_everything()
    assert [m["Subject"] for m in smtp.wait_for(1)] == ["[GPU Portal] bad failed: Exit code 1."]
    Preference.objects.filter(user=lab.owner).update(email=False)
    transition(workload(lab, name="quiet"), State.FAILED, reason="Error", finished_at=timezone.now())
    deliver_everything()
    assert len(smtp.messages) == 1


def test_a_receiver_that_is_down_is_retried_with_backoff_then_given_up(lab, receiver, settings):
    settings.NOTIFY_MAX_ATTEMPTS = 3
    settings.NOTIFY_RETRY_BASE_SECONDS = 30
    receiver.status = 503
    TeamWebhook.objects.create(team=lab.team, url=receiver.url("/secret-token-abc"))
    transition(workload(lab), State.FAILED, reason="Error", finished_at=timezone.now())
    deliver_everything()
    delivery = Delivery.objects.get(channel=Delivery.Channel.WEBHOOK)
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("pending", 1, "the receiver answered HTTP 503")
    first_wait = delivery.next_attempt_at - timezone.now()
    assert timedelta(seconds=25) < first_wait <= timedelta(seconds=30)
    assert delivery_send(delivery.id) == "not-due"  # not before its time
    second = timezone.now() + timedelta(seconds=31)
    with time_machine.travel(second):
        assert delivery_send(delivery.id) == "retry"
    delivery.refresh_from_db()
    assert timedelta(seconds=55) < delivery.next_attempt_at - second <= timedelta(seconds=61)  # doubled
    with time_machine.travel(second + timedelta(seconds=62)):
        assert delivery_send(delivery.id) == Delivery.Status.FAILED
    delivery.refresh_from_db()
    assert delivery.last_error.startswith("gave up after 3 attempts")
    assert "secret-token" not in delivery.last_error
    assert "127.0.0.1" not in delivery.last_error
    assert len(receiver.deliveries) == 3


def test_a_slow_receiver_times_out_and_a_404_is_not_retried(lab, receiver):
    receiver.delay = 3  # longer than NOTIFY_WEBHOOK_TIMEOUT_SECONDS (1 s here)
    TeamWebhook.objects.create(team=lab.team, url=receiver.url())
    transition(workload(lab, name="a"), State.FAILED, reason="Error", finished_at=timezone.now())
    started = timezone.now()
    deliver_everything()
    assert timezone.now() - started < timedelta(seconds=2.5)
    assert Delivery.objects.get(channel="webhook").last_error == "the receiver did not answer in time"
    receiver.delay, receiver.status = 0, 404
    Delivery.objects.all().delete()
    transition(workload(lab, name="b"), State.FAILED, reason="Error", finished_at=timezone.now())
    deliver_everything()
    failed = Delivery.objects.get(event__workload__name="b", channel="webhook")
    assert (failed.status, failed.attempts, failed.last_error) == ("failed", 1, "the receiver answered HTTP 404")


def test_a_sender_that_died_mid_send_is_replaced_after_its_lease_with_the_same_key(lab, receiver, settings):
    settings.NOTIFY_LEASE_SECONDS = 60
    TeamWebhook.objects.create(team=lab.team, url=receiver.url())
    transition(workload(lab), State.FAILED, reason="Error", finished_at=timezone.now())
    Preference.objects.create(user=lab.owner, email=False)
    event_fan_out(Event.objects.get().id)
    delivery = Delivery.objects.get()
    # A worker claimed it and died: the claim holds until its lease ends, then the sweep hands it over.
    Delivery.objects.filter(id=delivery.id).update(
        status=Delivery.Status.SENDING, attempts=1, claimed_until=timezone.now() + timedelta(seconds=60)
    )
    assert delivery_send(delivery.id) == "not-due"
    assert notifications_sweep()["deliveries"] == 0
    with time_machine.travel(timezone.now() + timedelta(seconds=61)):
        assert notifications_sweep()["deliveries"] == 1
        assert delivery_send(delivery.id) == "sent"
    (hook,) = receiver.deliveries
    assert hook.headers["Idempotency-Key"] == str(delivery.idempotency_key)


def test_an_event_recorded_twice_under_one_key_is_stored_once_and_the_callers_transaction_goes_on(lab):
    """A retried caller (or a service's pod made again that fails again) records nothing new, and the
    transaction it runs in is not broken by the duplicate: what it writes next is kept."""
    job = workload(lab, state=State.FAILED, finished_at=timezone.now())
    first = events.notify(kind=events.FAILED, workload=job, summary="resnet failed: OOMKilled")
    assert first is not None
    assert first.pk
    assert events.notify(kind=events.FAILED, workload=job, summary="resnet failed: OOMKilled") is None
    Workload.objects.filter(id=job.id).update(message="written after the duplicate")
    assert Event.objects.filter(key=f"{events.FAILED}:{job.uid}").count() == 1
    assert Workload.objects.get(id=job.id).message == "written after the duplicate"
    assert Event.objects.get(id=first.pk).details["name"] == "resnet"
