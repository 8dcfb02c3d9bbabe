"""Who hears about what: a person's own preferences, and a team's webhook (set by its managers)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import URLValidator

from identity.models import Membership, Role
from jobs.models import Team
from notifications.models import Preference, TeamWebhook, Topic, WebhookFormat
from notifications.webhooks import WebhookUrlError, check_webhook_url


def preference_of(user: Any) -> Preference:
    """The person's preferences, or the defaults (not saved) when they never chose."""
    return Preference.objects.filter(user=user).first() or Preference(user=user)


def webhook_url_validate(url: str) -> str:
    """A webhook URL the portal may call, or a ValidationError saying why not ('' removes the webhook)."""
    url = (url or "").strip()
    if not url:
        return ""
    if len(url) > 500:
        raise ValidationError("At most 500 characters.")
    try:
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError as exc:
        raise ValidationError("Enter a full http:// or https:// address.") from exc
    try:
        check_webhook_url(url)
    except WebhookUrlError as exc:
        raise ValidationError(str(exc)) from exc
    return url


def _topics(topics: list[str]) -> list[str]:
    unknown = set(topics) - set(Topic.values)
    if unknown:
        raise ValidationError(f"Unknown topic(s): {', '.join(sorted(unknown))}.")
    return [t for t in Topic.values if t in topics]  # stored in a stable order


def preference_update(
    *, user: Any, topics: list[str], email: bool, webhook_url: str, webhook_format: str
) -> Preference:
    if webhook_format not in WebhookFormat.values:
        raise ValidationError({"webhook_format": "Choose json, slack or mattermost."})
    errors = {}
    try:
        topics = _topics(topics)
    except ValidationError as exc:
        errors["topics"] = exc.messages
    try:
        webhook_url = webhook_url_validate(webhook_url)
    except ValidationError as exc:
        errors["webhook_url"] = exc.messages
    if errors:
        raise ValidationError(errors)
    preference, _ = Preference.objects.update_or_create(
        user=user,
        defaults={"topics": topics, "email": email, "webhook_url": webhook_url, "webhook_format": webhook_format},
    )
    return preference


def can_manage_webhook(user: Any, team: Team) -> bool:
    return user.is_superuser or Membership.objects.filter(user=user, team=team, role=Role.MANAGER).exists()


def team_webhook_set(
    *, team: Team, by: Any, url: str, format: str, topics: list[str], enabled: bool
) -> TeamWebhook | None:
    """Set (or with an empty URL, remove) the team's webhook. Only the team's managers may."""
    if not can_manage_webhook(by, team):
        raise PermissionDenied("Only the team's managers can set its webhook.")
    errors = {}
    try:
        url = webhook_url_validate(url)
    except ValidationError as exc:
        errors["url"] = exc.messages
    try:
        topics = _topics(topics)
    except ValidationError as exc:
        errors["topics"] = exc.messages
    if format not in WebhookFormat.values:
        errors["format"] = ["Choose json, slack or mattermost."]
    if errors:
        raise ValidationError(errors)
    if not url:
        TeamWebhook.objects.filter(team=team).delete()
        return None
    hook, _ = TeamWebhook.objects.update_or_create(
        team=team, defaults={"url": url, "format": format, "topics": topics, "enabled": enabled, "updated_by": by}
    )
    return hook
