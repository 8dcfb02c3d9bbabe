"""Turning events into deliveries and sending each exactly once.

- `event_fan_out`: one Delivery per channel and recipient the preferences ask for; a unique constraint
  makes a second fan-out of the same event (a retried task, the sweep) add nothing.
- `delivery_send`: claims the delivery with one conditional UPDATE (pending and due, or a claim whose
  lease ran out because its sender died), sends, records the outcome. Two workers can never both send.
  A sender killed before the receiver accepted leaves a claim that expires and is sent again; a sender
  killed after the receiver accepted but before the outcome was written is the one case a second copy
  can go out, with the same Message-ID / Idempotency-Key, so the receiver can drop it.
- Failures: timeouts, connection errors, HTTP 408/429/5xx and SMTP 4xx retry with capped exponential
  backoff up to NOTIFY_MAX_ATTEMPTS; anything else (HTTP 4xx, a refused address, a URL no longer allowed)
  fails at once. The reason is kept without the URL (webhook URLs often hold a secret token).
"""

from __future__ import annotations

import json
import logging
import smtplib
from datetime import timedelta
from urllib.parse import urlsplit

import urllib3
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from jobs import sql as jobs_sql
from notifications.events import KINDS, enqueue
from notifications.models import Delivery, Event, Preference, TeamWebhook
from notifications.webhooks import WebhookUrlError, webhook_body, webhook_post, webhook_target

log = logging.getLogger(__name__)


class PermanentFailure(Exception):
    """Sending again would not help."""


class TransientFailure(Exception):
    """The receiver said "not now" (HTTP 408, 429, 5xx): try again later."""


def _personal_deliveries(event: Event, topic: str | None) -> list[Delivery]:
    """The recipient's own deliveries of the event: by e-mail and to their webhook, as their settings ask
    (read with the event: `_event_read`)."""
    person = event.recipient
    if person is None or not person.is_active:
        return []
    preference = getattr(person, "notification_preference", None) or Preference(user=person)
    if topic not in preference.topics:
        return []
    rows: list[Delivery] = []
    if preference.email and person.email:
        rows.append(Delivery(event=event, channel=Delivery.Channel.EMAIL, recipient=f"user:{person.id}"))
    if preference.webhook_url:
        rows.append(Delivery(event=event, channel=Delivery.Channel.WEBHOOK, recipient=f"user:{person.id}"))
    return rows


def _events_read(event_ids: list[int]) -> list[Event]:
    """The events with everything their fan-out decides on, in one statement: each one's recipient and
    their preferences (none when they never chose), and its team's webhook (none when the team has none)."""
    return list(
        Event.objects.select_related("recipient__notification_preference", "team__webhook")
        .filter(id__in=event_ids)
        .order_by("id")
    )


def _team_hook(event: Event) -> TeamWebhook | None:
    if event.team_id is None:
        return None
    hook = getattr(event.team, "webhook", None)
    return hook if hook is not None and hook.enabled else None


def _deliveries(event: Event) -> list[Delivery]:
    """Who is to hear of the event: the recipient as their settings ask, and the team's webhook."""
    topic = KINDS.get(event.kind)
    rows = _personal_deliveries(event, topic)
    hook = _team_hook(event)
    if hook is not None and topic in hook.topics:
        rows.append(Delivery(event=event, channel=Delivery.Channel.WEBHOOK, recipient=f"team:{event.team_id}"))
    return rows


def event_fan_out(event_id: int) -> int:
    """Create the event's deliveries (idempotent); returns how many are new."""
    return events_fan_out([event_id])


def events_fan_out(event_ids: list[int]) -> int:
    """Create the deliveries of each event (idempotent: a retried task, the sweep); returns how many are
    new. On PostgreSQL two statements for all of them, whatever their number, and no transaction: the
    read (`_events_read`), then every delivery stored and every event marked in one (`_store_and_mark`).
    Elsewhere one transaction per event."""
    events = _events_read(list(event_ids))
    if not events:
        return 0
    if connection.vendor != "postgresql":
        return sum(_fan_out_apart(event) for event in events)
    rows = [row for event in events for row in _deliveries(event)]
    pending = _store_and_mark([event.id for event in events], rows)
    _hand_over(pending)
    return sum(1 for row in rows if row.pk is not None)


def _fan_out_apart(event: Event) -> int:
    rows = _deliveries(event)
    with transaction.atomic():
        # A delivery an earlier attempt stored is left alone and not counted.
        jobs_sql.insert_many(rows, unless_taken=_ONE_PER_RECIPIENT)
        pending = _mark_fanned_out([event.id])
    _hand_over(pending)
    return sum(1 for row in rows if row.pk is not None)


def _hand_over(pending: list[int]) -> None:
    for delivery_id in pending:
        transaction.on_commit(lambda delivery_id=delivery_id: enqueue("notifications.tasks.send", delivery_id))


_ONE_PER_RECIPIENT = ("event", "channel", "recipient")
# The new deliveries stored (a delivery an earlier attempt stored is left alone: ON CONFLICT DO NOTHING),
# the events marked fanned out (once), and the deliveries still to send: those stored now (the statement's
# own inserts, which its SELECT does not see: they come from `stored`) and any an earlier attempt stored
# but did not hand over. One statement, so no transaction of its own: all or nothing as one.
_STORE_AND_MARK_SQL = """
WITH stored AS ({insert}),
marked AS (UPDATE notifications_event SET fanned_out_at = %s WHERE id = ANY(%s) AND fanned_out_at IS NULL)
SELECT stored.*, true FROM stored
UNION ALL
SELECT id, event_id, channel, recipient, false FROM notifications_delivery WHERE event_id = ANY(%s) AND status = %s
ORDER BY 1 DESC
"""


def _store_and_mark(event_ids: list[int], rows: list[Delivery]) -> list[int]:
    """PostgreSQL: `rows` stored (their primary keys set where new), the events marked, in one statement;
    returns the ids of their deliveries still to send, newest first. Without rows: the events marked alone."""
    if not rows:
        return _mark_fanned_out(event_ids)
    insert, values = jobs_sql.insert_many_statement(rows, unless_taken=_ONE_PER_RECIPIENT)
    with connection.cursor() as cursor:
        cursor.execute(
            _STORE_AND_MARK_SQL.format(insert=insert),
            [*values, timezone.now(), event_ids, event_ids, Delivery.Status.PENDING],
        )
        found = cursor.fetchall()
    jobs_sql.stored_set(rows, [row[:-1] for row in found if row[-1]], unless_taken=_ONE_PER_RECIPIENT)
    return [row[0] for row in found]


def _mark_fanned_out(event_ids: list[int]) -> list[int]:
    """Mark the events fanned out (once) and return their deliveries still to send, those stored just now and
    any an earlier attempt stored but did not hand over: one statement on PostgreSQL (the UPDATE in a WITH
    runs whether or not the SELECT reads it, and the SELECT sees the rows this transaction inserted before)."""
    now = timezone.now()
    if connection.vendor != "postgresql":
        Event.objects.filter(id__in=event_ids, fanned_out_at=None).update(fanned_out_at=now)
        return list(
            Delivery.objects.filter(event_id__in=event_ids, status=Delivery.Status.PENDING)
            .order_by("-id")
            .values_list("id", flat=True)
        )
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH marked AS (UPDATE notifications_event SET fanned_out_at = %s"
            " WHERE id = ANY(%s) AND fanned_out_at IS NULL)"
            " SELECT id FROM notifications_delivery WHERE event_id = ANY(%s) AND status = %s ORDER BY id DESC",
            [now, event_ids, event_ids, Delivery.Status.PENDING],
        )
        return [row[0] for row in cursor.fetchall()]


def delivery_send(delivery_id: int) -> str:
    """Claim and send one delivery; returns what became of it (sent, retry, failed, not-due)."""
    now = timezone.now()
    claimable = Q(status=Delivery.Status.PENDING, next_attempt_at__lte=now) | Q(
        status=Delivery.Status.SENDING, claimed_until__lt=now
    )
    claimed = Delivery.objects.filter(claimable, id=delivery_id).update(
        status=Delivery.Status.SENDING,
        claimed_until=now + timedelta(seconds=settings.NOTIFY_LEASE_SECONDS),
        attempts=F("attempts") + 1,
    )
    if not claimed:
        return "not-due"  # sent, being sent by another worker, or waiting for its next attempt
    delivery = Delivery.objects.select_related("event").get(id=delivery_id)
    try:
        if delivery.channel == Delivery.Channel.EMAIL:
            _send_email(delivery)
        else:
            _send_webhook(delivery)
    except PermanentFailure as exc:
        return _finish(delivery, Delivery.Status.FAILED, str(exc))
    except Exception as exc:  # a timeout, a refused connection, a 5xx: worth another try
        if delivery.attempts >= settings.NOTIFY_MAX_ATTEMPTS:
            return _finish(
                delivery, Delivery.Status.FAILED, f"gave up after {delivery.attempts} attempts: {_describe(exc)}"
            )
        delay = min(
            settings.NOTIFY_RETRY_MAX_SECONDS, settings.NOTIFY_RETRY_BASE_SECONDS * 2 ** (delivery.attempts - 1)
        )
        Delivery.objects.filter(id=delivery.id, status=Delivery.Status.SENDING).update(
            status=Delivery.Status.PENDING,
            next_attempt_at=timezone.now() + timedelta(seconds=delay),
            claimed_until=None,
            last_error=_describe(exc)[:300],
        )
        log.info(
            "notification %s: attempt %d failed (%s); next in %d s",
            delivery.id,
            delivery.attempts,
            _describe(exc),
            delay,
        )
        return "retry"
    return _finish(delivery, Delivery.Status.SENT, "")


def _finish(delivery: Delivery, status: str, error: str) -> str:
    Delivery.objects.filter(id=delivery.id, status=Delivery.Status.SENDING).update(
        status=status,
        sent_at=timezone.now() if status == Delivery.Status.SENT else None,
        claimed_until=None,
        last_error=error[:300],
    )
    if status == Delivery.Status.FAILED:
        log.warning("notification %s (%s) failed: %s", delivery.id, delivery.channel, error)
    return status


def _describe(exc: Exception) -> str:
    """An error without the URL (urllib3 puts it in its messages; webhook URLs hold tokens)."""
    if isinstance(exc, urllib3.exceptions.TimeoutError):
        return "the receiver did not answer in time"
    if isinstance(exc, urllib3.exceptions.SSLError):
        return "the receiver's TLS certificate was refused"
    if isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError)):
        return "could not connect to the receiver"
    if isinstance(exc, TransientFailure):
        return str(exc)
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"mail server answered {exc.smtp_code}"
    return type(exc).__name__ + (f": {exc}" if not isinstance(exc, urllib3.exceptions.HTTPError) else "")


def _recipient_user(delivery: Delivery):
    kind, _, ident = delivery.recipient.partition(":")
    if kind != "user":
        return None
    return get_user_model().objects.filter(id=int(ident), is_active=True).first()


def _send_email(delivery: Delivery) -> None:
    person = _recipient_user(delivery)
    if person is None or not person.email:
        raise PermanentFailure("the recipient has no active account with an e-mail address")
    event = delivery.event
    details = event.details
    domain = urlsplit(settings.SITE_URL).hostname or "gpuportal"
    lines = [event.summary, ""]
    for label, key in (("Workload", "name"), ("Team", "team"), ("State", "state"), ("Reason", "reason"),
                       ("Message", "message"), ("GPUs", "gpu_count"), ("GPU type", "gpu_type"),
                       ("GPU-hours", "gpu_hours")):  # fmt: skip
        if details.get(key) not in (None, ""):
            lines.append(f"{label}: {details[key]}")
    if details.get("url"):
        lines += ["", details["url"]]
    lines += ["", f"Change what you are told about: {settings.SITE_URL.rstrip('/')}/notifications/"]
    message = EmailMessage(
        subject=f"[GPU Portal] {event.summary}"[:200],
        body="\n".join(lines) + "\n",
        to=[person.email],
        headers={"Message-ID": f"<{delivery.idempotency_key}@{domain}>", "X-GPU-Portal-Event": event.kind},
    )
    try:
        message.send(fail_silently=False)
    except smtplib.SMTPRecipientsRefused as exc:
        raise PermanentFailure("the mail server refused the address") from exc
    except smtplib.SMTPResponseException as exc:
        if 500 <= exc.smtp_code < 600:
            raise PermanentFailure(f"mail server answered {exc.smtp_code}") from exc
        raise


def _webhook_target(delivery: Delivery) -> tuple[str, str]:
    kind, _, ident = delivery.recipient.partition(":")
    if kind == "team":
        hook = TeamWebhook.objects.filter(team_id=int(ident), enabled=True).first()
        if hook is None:
            raise PermanentFailure("the team's webhook was removed or disabled")
        return hook.url, hook.format
    person = _recipient_user(delivery)
    preference = Preference.objects.filter(user=person).first() if person else None
    if preference is None or not preference.webhook_url:
        raise PermanentFailure("the recipient removed their webhook")
    return preference.webhook_url, preference.webhook_format


def _send_webhook(delivery: Delivery) -> None:
    url, fmt = _webhook_target(delivery)
    try:
        target = webhook_target(url)  # checked and resolved once; the request goes to that address
    except WebhookUrlError as exc:
        raise PermanentFailure(str(exc)) from exc
    event = delivery.event
    key = str(delivery.idempotency_key)
    body = webhook_body(fmt, event_kind=event.kind, summary=event.summary, details=event.details, delivery_id=key)
    status = webhook_post(  # never follows a redirect: it could lead anywhere the check would have refused
        target,
        json.dumps(body).encode(),
        {
            "Content-Type": "application/json",
            "User-Agent": "GPU-Portal-Notifications/1",
            "Idempotency-Key": key,
            "X-GPU-Portal-Event": event.kind,
        },
        timeout=settings.NOTIFY_WEBHOOK_TIMEOUT_SECONDS,
    )
    if 200 <= status < 300:
        return
    if status in (408, 429) or status >= 500:
        raise TransientFailure(f"the receiver answered HTTP {status}")
    raise PermanentFailure(f"the receiver answered HTTP {status}")


def notifications_sweep(*, now=None, limit: int = 500) -> dict[str, int]:
    """Hand over what was missed: events never fanned out, deliveries due again or whose sender died."""
    now = now or timezone.now()
    grace = now - timedelta(seconds=5)  # fresh ones are on their way already
    events = list(Event.objects.filter(fanned_out_at=None, created_at__lt=grace).values_list("id", flat=True)[:limit])
    due = list(
        Delivery.objects.filter(
            Q(status=Delivery.Status.PENDING, next_attempt_at__lt=grace)
            | Q(status=Delivery.Status.PENDING, attempts__gt=0, next_attempt_at__lte=now)
            | Q(status=Delivery.Status.SENDING, claimed_until__lt=now)
        ).values_list("id", flat=True)[:limit]
    )
    for event_id in events:
        enqueue("notifications.tasks.fan_out", event_id)
    for delivery_id in due:
        enqueue("notifications.tasks.send", delivery_id)
    return {"events": len(events), "deliveries": len(due)}
