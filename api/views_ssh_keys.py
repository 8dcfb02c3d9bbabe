"""/api/v1/me/ssh-keys/: the SSH public keys that reach the services a person may open (issue 39)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.errors import Invalid, error_body
from api.serializers import ErrorSerializer
from api.views import ApiViewMixin
from identity.models import SshKey
from identity.sshkeys import KeyRefused, key_add, key_delete

E = OpenApiResponse(ErrorSerializer)


class SshKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = SshKey
        fields = ["id", "name", "key_type", "bits", "fingerprint", "public_key", "created_at"]
        read_only_fields = fields


class SshKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="What the key is for, e.g. the laptop it lives on (at most 100 characters).")
    public_key = serializers.CharField(
        help_text="One line of a .pub file: ssh-ed25519, ecdsa-sha2-nistp256/384/521, or ssh-rsa (2048 bits or more)."
    )


class SshKeyListView(ApiViewMixin, APIView):
    @extend_schema(summary="Your SSH public keys", responses=SshKeySerializer(many=True))
    def get(self, request: Request) -> Response:
        return Response(SshKeySerializer(SshKey.objects.filter(user=request.user), many=True).data)

    @extend_schema(summary="Add an SSH public key", request=SshKeyCreateSerializer,
                   responses={201: SshKeySerializer, 400: E})  # fmt: skip
    def post(self, request: Request) -> Response:
        body = request.data
        if not isinstance(body, dict):
            raise Invalid({"non_field_errors": ["Send a JSON object."]})
        unknown = set(body) - {"name", "public_key"}
        if unknown:
            raise Invalid({name: ["Unknown field."] for name in sorted(unknown)})
        name, public_key = body.get("name"), body.get("public_key")
        for field, value in (("name", name), ("public_key", public_key)):
            if not isinstance(value, str):
                raise Invalid({field: ["Required, as a string."]})
        try:
            key = key_add(user=request.user, name=name, public_key=public_key)
        except KeyRefused as exc:
            raise Invalid({exc.field: [str(exc)]}) from None
        return Response(SshKeySerializer(key).data, status=status.HTTP_201_CREATED)


class SshKeyDetailView(ApiViewMixin, APIView):
    @extend_schema(summary="Remove an SSH public key", responses={204: None, 404: E})
    def delete(self, request: Request, key_id: int) -> Response:
        key = SshKey.objects.filter(user=request.user, id=key_id).first()
        if key is None:
            return Response(error_body(404, "not_found", "No such key among yours."), status=404)
        key_delete(key=key)
        return Response(status=status.HTTP_204_NO_CONTENT)
