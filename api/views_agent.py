"""REST: the agents' endpoint, POST /api/v1/agent/reports (agent/push.py posts there)."""

from __future__ import annotations

import json
import logging

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied, UnsupportedMediaType
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agent.report import Report, ReportError
from api.errors import BodyTooLarge, Invalid, StoreUnavailable
from jobs.services.cluster import node_health
from jobs.services.cluster.gpu_faults import GpuSeen
from telemetry.models import AgentToken
from telemetry.services.agent_pods import AgentPod, ReviewUnavailable, agent_pod_identify
from telemetry.services.ingest import ReportRejected, report_ingest
from telemetry.services.tokens import TOKEN_PREFIX, agent_token_check, agent_token_may_report

log = logging.getLogger(__name__)

TOKEN_REQUIRED = "A valid agent token is required (Authorization: Bearer <token>)."  # noqa: S105 - a message


class AgentTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <token>`: an agent pod's own service-account token (agent_pods.py), or an
    issued agent token (`gpa_...`, for agents outside the cluster). `request.auth` becomes the AgentPod or
    the token row; no person signs in."""

    def authenticate(self, request: Request):
        scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        token = token.strip()
        if token.startswith(TOKEN_PREFIX):
            credential = agent_token_check(token)
        else:
            try:
                credential = agent_pod_identify(token)
            except ReviewUnavailable:
                raise StoreUnavailable() from None  # 503: the agent keeps the report and retries
        if credential is None:
            raise AuthenticationFailed(TOKEN_REQUIRED)
        return AnonymousUser(), credential

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="gpuportal-agent"'


class HasAgentToken(BasePermission):
    message = TOKEN_REQUIRED

    def has_permission(self, request: Request, view) -> bool:
        return request.auth is not None


class AgentReportView(APIView):
    """POST /api/v1/agent/reports: one gpuportal.agent.report/v1 body, bearer-token authenticated.

    202 stored (or a duplicate acknowledged); errors in the API's one format (api/errors.py): 400
    naming the bad field, 401 bad or missing token, 403 a report for a node that is not the agent's own,
    405 not a POST, 413 body over
    TELEMETRY_MAX_REPORT_BYTES, 415 not JSON, 503 the portal could not store it (the agent keeps the
    report and retries). Not throttled: an agent catching up after an outage sends its buffer at once,
    and a token speaks for one node only.
    """

    authentication_classes = [AgentTokenAuthentication]
    permission_classes = [HasAgentToken]
    throttle_classes: list = []
    renderer_classes = [JSONRenderer]
    http_method_names = ["post"]

    @extend_schema(exclude=True)  # for agents, not people: documented in agent/README.md
    def post(self, request: Request) -> Response:
        report = _read_report(request)
        if not _may_report(request.auth, report.node):
            label = request.auth.label if isinstance(request.auth, AgentPod) else f"token {request.auth.prefix}"
            log.warning("agent %s refused: it may not report for node %s", label, report.node[:253])
            raise PermissionDenied("This agent may not report for this node.")
        try:
            result = report_ingest(report=report, received_at=timezone.now())
        except ReportRejected as exc:
            raise _invalid(str(exc)) from None
        except Exception:
            # Never a 500 for an agent: say "later", and it keeps the report and retries.
            log.exception("could not store a report from node %s", report.node)
            raise StoreUnavailable() from None
        _judge_health(report)
        return Response(
            {
                "stored": result.stored,
                "node": result.node,
                "gpus": result.gpus,
                "workloads": result.workloads,
                "workspaces": result.workspaces,
            },
            status=202,
        )


def _judge_health(report: Report) -> None:
    """GPU health from the same report (jobs/services/cluster/node_health.py); a failure here never loses
    the report, which is stored already."""
    gpus = [
        GpuSeen(
            index=g.index,
            uuid=g.uuid or "",
            lost=g.state == "lost",
            ecc_uncorrected=g.ecc_uncorrected_volatile,
            xid_errors=g.xid_errors,
            last_xid=g.last_xid,
            temperature_celsius=g.temperature_celsius,
        )
        for g in report.gpus
    ]
    try:
        node_health.apply_report(report.node, gpus)
    except Exception:
        log.exception("could not judge GPU health from a report of node %s", report.node)


def _may_report(credential: AgentPod | AgentToken, node: str) -> bool:
    if isinstance(credential, AgentPod):
        return credential.node_name == node
    return agent_token_may_report(credential, node)


def _invalid(message: str) -> Invalid:
    """ReportError and ReportRejected messages start with the field they are about: "gpus[1].index: ..."."""
    field = message.partition(":")[0]
    return Invalid({field: [message]}, message)


def _read_report(request: Request) -> Report:
    """The body as a Report, read no further than the size limit (a declared length is trusted first)."""
    if request.content_type.split(";")[0].strip().lower() != "application/json":
        raise UnsupportedMediaType(request.content_type or "none", detail="Send the report as application/json.")
    limit = settings.TELEMETRY_MAX_REPORT_BYTES
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise _invalid("body: bad Content-Length") from None
    too_large = BodyTooLarge(f"body: a report may be at most {limit} bytes")
    if declared > limit:
        raise too_large
    raw = request._request.read(limit + 1)  # the raw stream: DRF's parsers would read it whole
    if len(raw) > limit:
        raise too_large
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _invalid("body: not JSON") from None
    try:
        return Report.from_dict(body)
    except ReportError as exc:
        raise _invalid(str(exc)) from None
