"""REST: a workload's checkpoints, /api/v1/workloads/<uid>/checkpoints/.

POST is the job's own: its pod holds a workload-scoped token (GPUPORTAL_TOKEN_FILE, `gpw_...`) that
authenticates nothing else and only for its own workload; any other workload's uid answers 404. A
person's token or session may read (GET) the checkpoints of a workload they can see, never report one.
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, NotFound, PermissionDenied
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.authentication import ApiTokenAuthentication
from api.errors import Invalid
from jobs import policy
from jobs.models import Checkpoint, Workload
from jobs.services.checkpoints import tokens
from jobs.services.checkpoints.reports import CheckpointRefused, last_checkpoint, record_checkpoint

MAX_SHOWN = 50


class WorkloadScope:
    """`request.auth` for a workload token: the one workload it speaks for."""

    def __init__(self, uid: str) -> None:
        self.uid = uid


class WorkloadTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer gpw_...`: a workload's own checkpoint token (jobs/services/checkpoints/tokens.py)."""

    def authenticate(self, request: Request):
        header = get_authorization_header(request).split()
        if len(header) != 2 or header[0].lower() != b"bearer" or not header[1].startswith(tokens.PREFIX.encode()):
            return None
        uid = tokens.token_uid(header[1].decode("ascii", "replace"))
        if uid is None:
            raise AuthenticationFailed("Invalid workload token.")
        from django.contrib.auth.models import AnonymousUser

        return AnonymousUser(), WorkloadScope(uid)

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class WorkloadTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.views_checkpoints.WorkloadTokenAuthentication"
    name = "workloadToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A workload's own checkpoint token, mounted into its pod (Authorization: Bearer gpw_...): "
            "it reports that workload's checkpoints and nothing else.",
        }


class SignedInOrWorkload(BasePermission):
    def has_permission(self, request: Request, view) -> bool:
        return isinstance(request.auth, WorkloadScope) or bool(request.user and request.user.is_authenticated)


class CheckpointInSerializer(serializers.Serializer):
    step = serializers.IntegerField(required=False, allow_null=True, min_value=0, max_value=2**62)
    path = serializers.CharField(required=False, allow_blank=True, max_length=1024, default="")
    note = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")
    attempt = serializers.IntegerField(required=False, allow_null=True, min_value=0, max_value=10**6)


class CheckpointView(APIView):
    """GET: the workload's last checkpoints (newest first) and the newest one's age. POST (its own
    token only): report one; 201 with what was stored."""

    permission_classes = [SignedInOrWorkload]
    http_method_names = ["get", "post"]

    def get_authenticators(self):
        from rest_framework.authentication import SessionAuthentication

        return [WorkloadTokenAuthentication(), ApiTokenAuthentication(), SessionAuthentication()]

    @extend_schema(responses={200: None})
    def get(self, request: Request, uid: str) -> Response:
        if isinstance(request.auth, WorkloadScope):
            raise PermissionDenied("A workload token may only report checkpoints (POST).")
        workload = policy.workload_or_404(request.user, uid, policy.visible_workloads(request.user))
        rows = Checkpoint.objects.filter(workload=workload)[:MAX_SHOWN]
        return Response({"last": _last(workload), "checkpoints": [_row(c) for c in rows]})

    @extend_schema(request=CheckpointInSerializer, responses={201: None})
    def post(self, request: Request, uid: str) -> Response:
        scope = request.auth
        if not isinstance(scope, WorkloadScope):
            raise PermissionDenied(
                "Only the workload itself reports checkpoints, with the token in its GPUPORTAL_TOKEN_FILE "
                "(`gpuportal checkpoint` inside its container)."
            )
        workload = Workload.objects.filter(uid=uid).first() if scope.uid == uid else None
        if workload is None:
            raise NotFound("No such workload.")
        if not isinstance(request.data, dict):
            raise Invalid({"non_field_errors": ["Send a JSON object."]}, "Send a JSON object.")
        body = CheckpointInSerializer(data=request.data)
        if not body.is_valid():
            raise Invalid(body.errors)
        try:
            checkpoint = record_checkpoint(workload, **body.validated_data)
        except CheckpointRefused as exc:
            # The token died with the workload.
            raise AuthenticationFailed(str(exc)) from None
        return Response(_row(checkpoint), status=201)


def _row(c: Checkpoint) -> dict:
    return {"attempt": c.attempt, "at": c.at.isoformat(), "step": c.step, "path": c.path, "note": c.note}


def _last(workload: Workload) -> dict | None:
    last = last_checkpoint(workload, timezone.now())
    if last is None:
        return None
    return {"at": last.at.isoformat(), "step": last.step, "age_seconds": int(last.age_seconds), "age": last.age}
