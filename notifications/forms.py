"""The settings page's forms: parse and show; the rules live in notifications.preferences."""

from __future__ import annotations

from django import forms

from notifications.models import Topic, WebhookFormat


class PreferenceForm(forms.Form):
    topics = forms.MultipleChoiceField(
        choices=Topic.choices, widget=forms.CheckboxSelectMultiple, required=False, label="Tell me when"
    )
    email = forms.BooleanField(required=False, label="By e-mail")
    webhook_url = forms.CharField(
        required=False,
        max_length=500,
        label="And to my webhook",
        help_text="A Slack, Mattermost or other incoming-webhook address (https://…). Empty: none.",
    )
    webhook_format = forms.ChoiceField(choices=WebhookFormat.choices, label="Webhook format")


class TeamWebhookForm(forms.Form):
    url = forms.CharField(
        required=False, max_length=500, label="Team webhook", help_text="Every workload of the team. Empty: none."
    )
    format = forms.ChoiceField(choices=WebhookFormat.choices, label="Format")
    topics = forms.MultipleChoiceField(
        choices=Topic.choices, widget=forms.CheckboxSelectMultiple, required=False, label="Post when"
    )
    enabled = forms.BooleanField(required=False, initial=True, label="Enabled")
