"""Notifications through the real engine: the tracker sees a job end, the worker sends one e-mail to a
real SMTP server and one webhook to a real HTTP receiver; a worker killed mid-send still sends exactly one."""

from __future__ import annotations

import time

import pytest

from jobs.models import State
from notifications.models import Delivery, TeamWebhook, WebhookFormat

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]


def mails_about(sinks, uid: str):
    return [m for m in sinks.smtp.messages if f"/workloads/{uid}/" in m.get_payload()]


def hooks_about(deliveries, uid: str):
    return [d for d in deliveries if d.body["workload"]["uid"] == uid]


def wait_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    pytest.fail(f"no {what} within {timeout:.0f}s")


def test_a_job_that_fails_sends_one_email_and_one_webhook(engine, notification_sinks):
    path = f"/hooks/{engine.team.slug}"
    TeamWebhook.objects.create(team=engine.team, url=notification_sinks.webhooks.url(path), format=WebhookFormat.JSON)
    job = engine.submit(name="train-oom", gpu_count=2, env={"SIM_RUN_SECONDS": "2", "SIM_OUTCOME": "OOMKilled"})
    engine.wait_for(job, State.FAILED, timeout=90)

    (mail,) = wait_until(lambda: mails_about(notification_sinks, job.uid), 30, "e-mail")
    (hook,) = wait_until(lambda: hooks_about(notification_sinks.webhooks.deliveries, job.uid), 30, "webhook")
    job.refresh_from_db()
    assert mail["To"] == engine.owner.email
    assert mail["Subject"].startswith("[GPU Portal] train-oom failed")
    assert "Reason: OOMKilled" in mail.get_payload()
    assert hook.path == path
    facts = hook.body["workload"]
    assert (facts["name"], facts["state"], facts["reason"]) == ("train-oom", "FAILED", "OOMKilled")
    assert facts["gpu_hours"] == round(job.gpu_seconds() / 3600, 4) > 0
    time.sleep(3)  # the sweep runs every second: anything extra would have gone out by now
    assert len(mails_about(notification_sinks, job.uid)) == 1
    assert len(hooks_about(notification_sinks.webhooks.deliveries, job.uid)) == 1


def test_a_worker_killed_mid_send_still_sends_exactly_one(engine, notification_sinks):
    smtp, webhooks = notification_sinks.smtp, notification_sinks.webhooks
    path = f"/kill/{engine.team.slug}"
    TeamWebhook.objects.create(team=engine.team, url=webhooks.url(path))
    smtp.hold.arm(match=engine.owner.email)
    webhooks.hold.arm(match=path)
    job = engine.submit(name="killed-mid-send", gpu_count=1, env={"SIM_RUN_SECONDS": "1"})
    engine.wait_for(job, State.SUCCEEDED, timeout=90)

    # Both sends are in flight, held by the receivers; the worker dies with them unfinished.
    assert smtp.hold.reached.wait(30), "the e-mail was never sent"
    assert webhooks.hold.reached.wait(30), "the webhook was never sent"
    assert set(Delivery.objects.filter(event__workload=job).values_list("status", flat=True)) == {"sending"}
    engine.processes.kill("worker")
    smtp.hold.release.set()
    webhooks.hold.release.set()
    engine.processes.start("worker")

    # After the claims' lease (8 s here) the sweep hands both over to the new worker.
    (mail,) = wait_until(lambda: mails_about(notification_sinks, job.uid), 60, "e-mail after the restart")
    (hook,) = wait_until(lambda: hooks_about(webhooks.deliveries, job.uid), 60, "webhook after the restart")
    time.sleep(3)
    assert len(mails_about(notification_sinks, job.uid)) == 1
    assert len(hooks_about(webhooks.deliveries, job.uid)) == 1
    deliveries = {d.channel: d for d in Delivery.objects.filter(event__workload=job)}
    assert {c: (d.status, d.attempts) for c, d in deliveries.items()} == {"email": ("sent", 2), "webhook": ("sent", 2)}
    # The cut-off attempt carried the same key as the one that went through: a receiver that acted on
    # the first copy can recognise the second.
    (cut_off,) = hooks_about(webhooks.cut_off, job.uid)
    assert (
        cut_off.headers["Idempotency-Key"]
        == hook.headers["Idempotency-Key"]
        == str(deliveries["webhook"].idempotency_key)
    )
    assert mail["Message-ID"].startswith(f"<{deliveries['email'].idempotency_key}@")
