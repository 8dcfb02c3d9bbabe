"""/api/v1/secrets/: store, list and delete named secrets. Values go in and never come back out."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import access
from api.errors import Invalid, error_body
from api.serializers import ErrorSerializer
from api.views import TEAM_PARAM, ApiViewMixin, cluster_call
from jobs import policy
from jobs.models import TeamSecret
from jobs.services.secrets import secret_delete, secret_save, secrets_listed

E = OpenApiResponse(ErrorSerializer)


class SecretSerializer(serializers.Serializer):
    name = serializers.CharField()
    shared = serializers.BooleanField(help_text="Usable by the whole team (stored by a manager).")
    owner = serializers.CharField(help_text="Who stored it.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def to_representation(self, secret: TeamSecret) -> dict:
        return {
            "name": secret.name,
            "shared": secret.shared,
            "owner": secret.owner.get_username(),
            "created_at": serializers.DateTimeField().to_representation(secret.created_at),
            "updated_at": serializers.DateTimeField().to_representation(secret.updated_at),
        }


class SecretCreateSerializer(serializers.Serializer):
    team = serializers.CharField(required=False, help_text="Team slug; may be left out if you are in one team.")
    name = serializers.CharField(help_text="Lowercase letters, digits and '-'; how submissions refer to it.")
    value = serializers.CharField(write_only=True, help_text="Stored in Kubernetes; never shown again.")
    shared = serializers.BooleanField(required=False, default=False, help_text="Managers only.")


class SecretListView(ApiViewMixin, APIView):
    @extend_schema(summary="Your secrets and your team's shared ones (names only)", parameters=[TEAM_PARAM],
                   responses=SecretSerializer(many=True))  # fmt: skip
    def get(self, request: Request) -> Response:
        team = access.resolve_team(request.user, request.query_params.get("team"))
        return Response(SecretSerializer(secrets_listed(team=team, user=request.user), many=True).data)

    @extend_schema(summary="Store or replace a secret", request=SecretCreateSerializer,
                   responses={201: SecretSerializer, 400: E, 503: E})  # fmt: skip
    def post(self, request: Request) -> Response:
        body = request.data
        if not isinstance(body, dict):
            raise Invalid({"non_field_errors": ["Send a JSON object."]})
        unknown = set(body) - {"team", "name", "value", "shared"}
        if unknown:
            raise Invalid({name: ["Unknown field."] for name in sorted(unknown)})
        team = access.resolve_team(request.user, body.get("team"))
        with cluster_call():
            secret = secret_save(team=team, user=request.user, name=body.get("name"), value=body.get("value"),
                                 shared=body.get("shared", False))  # fmt: skip
        return Response(SecretSerializer(secret).data, status=status.HTTP_201_CREATED)


class SecretDetailView(ApiViewMixin, APIView):
    @extend_schema(summary="Delete a secret", parameters=[TEAM_PARAM], responses={204: None, 404: E})
    def delete(self, request: Request, name: str) -> Response:
        team = access.resolve_team(request.user, request.query_params.get("team"))
        secret = secrets_listed(team=team, user=request.user).filter(name=name).first()
        if secret is None:
            return Response(error_body(404, "not_found", "No such secret among yours."), status=404)
        if not policy.may_delete_secret(request.user, secret):
            raise Invalid({"name": ["Only its owner or a team manager can delete this secret."]})
        with cluster_call():
            secret_delete(secret=secret)
        return Response(status=status.HTTP_204_NO_CONTENT)
