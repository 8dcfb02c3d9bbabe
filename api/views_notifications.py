"""REST: a person's notification preferences (GET, PUT, PATCH /api/v1/me/notifications/)."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.errors import Invalid
from api.views import ApiViewMixin
from notifications.models import Topic, WebhookFormat
from notifications.preferences import preference_of, preference_update


class PreferenceSerializer(serializers.Serializer):
    topics = serializers.ListField(
        child=serializers.ChoiceField(choices=Topic.choices),
        max_length=len(Topic.values),
        help_text="What you hear about: finished (succeeded), problems (failed, or stopped or cancelled by "
        "someone else), started (after waiting in the queue), warnings (a service about to be stopped).",
    )
    email = serializers.BooleanField(help_text="E-mail to the account's address.")
    webhook_url = serializers.CharField(
        allow_blank=True,
        max_length=500,
        help_text="Your own incoming webhook (http/https, public address); empty: none.",
    )
    webhook_format = serializers.ChoiceField(choices=WebhookFormat.choices)


def _as_dict(preference) -> dict:
    return {
        "topics": list(preference.topics),
        "email": preference.email,
        "webhook_url": preference.webhook_url,
        "webhook_format": preference.webhook_format,
    }


class NotificationPreferenceView(ApiViewMixin, APIView):
    @extend_schema(summary="Your notification preferences", responses=PreferenceSerializer)
    def get(self, request: Request) -> Response:
        return Response(_as_dict(preference_of(request.user)))

    @extend_schema(
        summary="Replace your notification preferences", request=PreferenceSerializer, responses=PreferenceSerializer
    )
    def put(self, request: Request) -> Response:
        return self._save(request, partial=False)

    @extend_schema(
        summary="Change some of your notification preferences",
        request=PreferenceSerializer,
        responses=PreferenceSerializer,
    )
    def patch(self, request: Request) -> Response:
        return self._save(request, partial=True)

    def _save(self, request: Request, *, partial: bool) -> Response:
        current = _as_dict(preference_of(request.user))
        if isinstance(request.data, dict):  # a misspelt field would otherwise be dropped with a 200
            unknown = set(request.data) - set(PreferenceSerializer().fields)
            if unknown:
                raise Invalid({name: ["Unknown field."] for name in sorted(unknown)})
        serializer = PreferenceSerializer(data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        try:
            preference = preference_update(user=request.user, **{**current, **serializer.validated_data})
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from exc
        return Response(_as_dict(preference))
