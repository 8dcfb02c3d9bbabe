"""Events worth telling someone about, their deliveries, and who wants to hear what."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class Topic(models.TextChoices):
    """What a person can switch on or off; every event kind belongs to one topic (events.KINDS)."""

    FINISHED = "finished", "a workload succeeded"
    PROBLEMS = "problems", "a workload failed, or was stopped or cancelled by someone else"
    STARTED = "started", "a queued workload started after waiting"
    WARNINGS = "warnings", "a service is about to be stopped (idle, time limit)"


class WebhookFormat(models.TextChoices):
    JSON = "json", "JSON (the portal's own fields)"
    SLACK = "slack", "Slack incoming webhook"
    MATTERMOST = "mattermost", "Mattermost incoming webhook"


def _all_topics() -> list[str]:
    return [topic.value for topic in Topic]


class Preference(models.Model):
    """One person's choices. No row: the defaults (e-mail on every topic, no webhook)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    topics = models.JSONField(default=_all_topics, blank=True, help_text="Topics this person hears about.")
    email = models.BooleanField(default=True, help_text="Send e-mail to the account's address.")
    webhook_url = models.URLField(max_length=500, blank=True)
    webhook_format = models.CharField(max_length=12, choices=WebhookFormat.choices, default=WebhookFormat.JSON)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"notification preferences of {self.user}"


class TeamWebhook(models.Model):
    """A team's channel (set by its managers): hears about every workload of the team on its topics."""

    team = models.OneToOneField("jobs.Team", on_delete=models.CASCADE, related_name="webhook")
    url = models.URLField(max_length=500)
    format = models.CharField(max_length=12, choices=WebhookFormat.choices, default=WebhookFormat.JSON)
    topics = models.JSONField(default=_all_topics, blank=True)
    enabled = models.BooleanField(default=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"webhook of {self.team}"


class Event(models.Model):
    """Something happened that someone may want to hear about. `key` makes it happen once."""

    # Unique by the constraint notify_event_key, not unique=True, which would add a LIKE copy of the index.
    key = models.CharField(max_length=200, help_text="One event per key, e.g. 'workload.failed:ab12cd34ef'.")
    kind = models.CharField(max_length=40)
    workload = models.ForeignKey("jobs.Workload", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    team = models.ForeignKey("jobs.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+",
        help_text="The person told (the workload's owner).",
    )  # fmt: skip
    summary = models.CharField(max_length=300)
    details = models.JSONField(default=dict, blank=True, help_text="What the message says, fixed when it happened.")
    created_at = models.DateTimeField(default=timezone.now)
    fanned_out_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        # The sweep's events not fanned out yet, oldest first: an event leaves the index when it is marked
        # (the mark writes no entry there; issue 41).
        indexes = [
            models.Index(
                fields=["created_at"], condition=models.Q(fanned_out_at__isnull=True), name="notify_event_fanout"
            )
        ]
        constraints = [models.UniqueConstraint(fields=["key"], name="notify_event_key")]

    def __str__(self) -> str:
        return self.key


class Delivery(models.Model):
    """One event sent over one channel to one recipient: claimed before it is sent, sent at most once."""

    class Channel(models.TextChoices):
        EMAIL = "email", "E-mail"
        WEBHOOK = "webhook", "Webhook"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SENDING = "sending", "Sending"
        SENT = "sent", "Sent"
        FAILED = "failed", "Failed"

    # No index of its own: one_delivery_per_channel_recipient begins with the event.
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="deliveries", db_index=False)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    # Who, as a stable key ("user:<id>", "team:<id>"); the address or URL is read when sending, so it is
    # never copied around (webhook URLs often carry a secret token).
    recipient = models.CharField(max_length=40)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    claimed_until = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    # Sent as the e-mail's Message-ID and the webhook's Idempotency-Key: the same on every attempt.
    idempotency_key = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["event", "channel", "recipient"], name="one_delivery_per_channel_recipient")
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="notify_delivery_due")]

    def __str__(self) -> str:
        return f"{self.event.key} → {self.channel} {self.recipient} ({self.status})"
