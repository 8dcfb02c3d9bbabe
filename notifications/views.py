"""The notification settings page: a person's own choices, and their team's webhook for its managers."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from jobs.views.common import acting_for
from notifications.forms import PreferenceForm, TeamWebhookForm
from notifications.models import TeamWebhook
from notifications.preferences import preference_of, preference_update, team_webhook_set


def _show_errors(form, exc: ValidationError) -> None:
    for field, errors in exc.message_dict.items():
        for error in errors:
            form.add_error(field if field in form.fields else None, error)


def _save_team_webhook(request: HttpRequest, team) -> tuple[TeamWebhookForm, HttpResponse | None]:
    """The team's webhook form as posted, and a redirect once it is saved."""
    team_form = TeamWebhookForm(request.POST, prefix="team")
    if team_form.is_valid():
        try:
            team_webhook_set(team=team, by=request.user, **team_form.cleaned_data)
        except ValidationError as exc:
            _show_errors(team_form, exc)
        else:
            messages.success(request, f"Webhook of {team.name} saved.")
            return team_form, redirect("notification_settings")
    return team_form, None


def _save_preference(request: HttpRequest) -> tuple[PreferenceForm, HttpResponse | None]:
    """The person's own settings form as posted, and a redirect once they are saved."""
    personal = PreferenceForm(request.POST, prefix="me")
    if personal.is_valid():
        try:
            preference_update(user=request.user, **personal.cleaned_data)
        except ValidationError as exc:
            _show_errors(personal, exc)
        else:
            messages.success(request, "Your notification settings are saved.")
            return personal, redirect("notification_settings")
    return personal, None


def _team_form(hook: TeamWebhook | None) -> TeamWebhookForm:
    return TeamWebhookForm(
        initial={"url": hook.url, "format": hook.format, "topics": hook.topics, "enabled": hook.enabled}
        if hook
        else {"enabled": True, "topics": ["problems"]},
        prefix="team",
    )


@login_required
def notification_settings(request: HttpRequest) -> HttpResponse:
    acting = acting_for(request)
    request.acting = acting
    team = acting.team if acting and acting.is_manager else None
    preference = preference_of(request.user)
    hook = TeamWebhook.objects.filter(team=team).first() if team else None
    personal = PreferenceForm(
        initial={
            "topics": preference.topics,
            "email": preference.email,
            "webhook_url": preference.webhook_url,
            "webhook_format": preference.webhook_format,
        },
        prefix="me",
    )
    team_form = _team_form(hook)
    status = 200
    if request.method == "POST":
        status = 400
        if request.POST.get("form") == "team" and team is not None:
            team_form, saved = _save_team_webhook(request, team)
        else:
            personal, saved = _save_preference(request)
        if saved is not None:
            return saved
    return render(
        request,
        "notifications/settings.html",
        {"personal": personal, "team_form": team_form, "team": team, "has_email": bool(request.user.email)},
        status=status,
    )
