"""/api/v1/secrets/: store, list and delete named secrets. Values go in and never come back out.

A store seals the value for the engine, which writes the Kubernetes Secret (the web's identity may not):
the answer waits briefly for it, then says 201 (written, `status: ready`), or 202 (`status: pending`:
the engine has not confirmed it yet; a launch that uses it waits for it), or 503 when the engine could not
write it (the reason is in the message and in the listing's `message`)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import access
from api.errors import Invalid, error_body
from api.serializers import ErrorSerializer
from api.views import TEAM_PARAM, ApiViewMixin
from jobs import policy
from jobs.models import SecretState, TeamSecret
from jobs.services.storage.secrets import (
    SecretNotWritable,
    secret_delete,
    secret_save,
    secret_wait_written,
    secrets_listed,
)

E = OpenApiResponse(ErrorSerializer)
NOT_CONFIGURED = "The portal cannot store secrets: it has no key to seal them for its engine. Tell an admin."


class SecretSerializer(serializers.Serializer):
    name = serializers.CharField()
    shared = serializers.BooleanField(help_text="Usable by the whole team (stored by a manager).")
    owner = serializers.CharField(help_text="Who stored it.")
    status = serializers.ChoiceField(
        choices=["pending", "ready", "failed"],
        help_text="ready: written in the cluster; pending: the engine is writing it; failed: store it again.",
    )
    message = serializers.CharField(help_text="Why the engine could not write it (status failed).")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def to_representation(self, secret: TeamSecret) -> dict:
        return {
            "name": secret.name,
            "shared": secret.shared,
            "owner": secret.owner.get_username(),
            "status": secret.state,
            "message": secret.message,
            "created_at": serializers.DateTimeField().to_representation(secret.created_at),
            "updated_at": serializers.DateTimeField().to_representation(secret.updated_at),
        }


class SecretCreateSerializer(serializers.Serializer):
    team = serializers.CharField(required=False, help_text="Team slug; may be left out if you are in one team.")
    name = serializers.CharField(help_text="Lowercase letters, digits and '-'; how submissions refer to it.")
    value = serializers.CharField(
        write_only=True, help_text="Sealed for the engine, which stores it in Kubernetes; never shown again."
    )
    shared = serializers.BooleanField(required=False, default=False, help_text="Managers only.")


class SecretListView(ApiViewMixin, APIView):
    @extend_schema(summary="Your secrets and your team's shared ones (names only)", parameters=[TEAM_PARAM],
                   responses=SecretSerializer(many=True))  # fmt: skip
    def get(self, request: Request) -> Response:
        team = access.resolve_team(request.user, request.query_params.get("team"))
        return Response(SecretSerializer(secrets_listed(team=team, user=request.user), many=True).data)

    @extend_schema(summary="Store or replace a secret", request=SecretCreateSerializer,
                   responses={201: SecretSerializer, 202: SecretSerializer, 400: E, 503: E})  # fmt: skip
    def post(self, request: Request) -> Response:
        body = request.data
        if not isinstance(body, dict):
            raise Invalid({"non_field_errors": ["Send a JSON object."]})
        unknown = set(body) - {"team", "name", "value", "shared"}
        if unknown:
            raise Invalid({name: ["Unknown field."] for name in sorted(unknown)})
        team = access.resolve_team(request.user, body.get("team"))
        try:
            secret = secret_save(team=team, user=request.user, name=body.get("name"), value=body.get("value"),
                                 shared=body.get("shared", False))  # fmt: skip
        except SecretNotWritable:
            return Response(error_body(503, "secrets_unavailable", NOT_CONFIGURED), status=503)
        secret = secret_wait_written(secret)
        if secret.state == SecretState.FAILED:
            return Response(error_body(503, "secret_not_written", secret.message), status=503)
        answer = status.HTTP_201_CREATED if secret.state == SecretState.READY else status.HTTP_202_ACCEPTED
        return Response(SecretSerializer(secret).data, status=answer)


class SecretDetailView(ApiViewMixin, APIView):
    @extend_schema(summary="Delete a secret", parameters=[TEAM_PARAM], responses={204: None, 404: E})
    def delete(self, request: Request, name: str) -> Response:
        team = access.resolve_team(request.user, request.query_params.get("team"))
        secret = secrets_listed(team=team, user=request.user).filter(name=name).first()
        if secret is None:
            return Response(error_body(404, "not_found", "No such secret among yours."), status=404)
        if not policy.may_delete_secret(request.user, secret):
            raise Invalid({"name": ["Only its owner or a team manager can delete this secret."]})
        secret_delete(secret=secret)
        return Response(status=status.HTTP_204_NO_CONTENT)
