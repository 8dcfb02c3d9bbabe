"""REST endpoints: parse the request, call the engine's services and selectors, render the result."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from datetime import date

import urllib3
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.http import StreamingHttpResponse
from django.utils import timezone
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from kubernetes.client.exceptions import ApiException
from rest_framework import mixins, status, viewsets
from rest_framework import serializers as drf_serializers
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, Throttled
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import access, throttling
from api.errors import BodyTooLarge, ClusterUnavailable, Conflict, Invalid, error_body
from api.filters import WorkloadFilter
from api.idempotency import MAX_KEY_LENGTH, KeyReused, Outcome, create_once, request_fingerprint
from api.pagination import WorkloadCursorPagination
from api.renderers import PlainTextRenderer, UsageCsvRenderer
from api.serializers import (
    CatalogImageSerializer,
    DatasetSerializer,
    ErrorSerializer,
    GpuTypeSerializer,
    QueueSerializer,
    QuotaUseSerializer,
    TeamSerializer,
    TypeQueueSerializer,
    UsageSerializer,
    WorkloadBatchCreateSerializer,
    WorkloadBatchSerializer,
    WorkloadCreateSerializer,
    WorkloadEventsSerializer,
    WorkloadSerializer,
    parse_batch,
    parse_submission,
)
from identity.models import Membership
from jobs import policy
from jobs.kube.client import KubeConfigError, classify
from jobs.models import CatalogImage, GpuType, Kind, State, Workload
from jobs.selectors import (
    attach_related_names,
    cluster_capacity,
    queue_positions,
    queued_position_and_type,
    team_datasets,
    team_quota_use,
    with_earlier_runs,
    with_queue_position,
    with_related_names,
)
from jobs.selectors_sharing import team_queue_explained
from jobs.services.cancel import workload_cancel
from jobs.services.logs.container_logs import MAX_TAIL, LogsUnavailable, follow_logs, workload_events, workload_logs
from jobs.services.logs.follow_slots import HeldStream, TooManyStreams
from jobs.services.opening import workload_share
from jobs.services.submission import intake_facts
from jobs.services.submission.intake import queue_slots_later, workload_submit, workloads_submit_many
from jobs.services.usage import reports

log = logging.getLogger(__name__)

User = Membership._meta.get_field("user").related_model


def _once(request: Request, key: str, payload: dict, perform, before_commit) -> Outcome | Response:
    """A create under the request's Idempotency-Key (`create_once`): its outcome, first or replayed, or
    the 422 for a key used before with another body (`payload`: what makes the request this one)."""
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable() or not key.isascii():
        raise Invalid({"Idempotency-Key": [f"1 to {MAX_KEY_LENGTH} printable ASCII characters."]})
    try:
        return create_once(
            user=request.user,
            key=key,
            fingerprint=request_fingerprint(payload),
            perform=perform,
            before_commit=before_commit,
        )
    except KeyReused:
        return Response(
            error_body(
                422,
                "idempotency_key_reused",
                "This Idempotency-Key was already used for a different request.",
                {"Idempotency-Key": ["Already used for a different request."]},
            ),
            status=422,
        )


def _has_bad_text(value) -> bool:
    """NUL characters and lone surrogates cannot be stored in PostgreSQL: refuse them up front."""
    if isinstance(value, str):
        if "\x00" in value:
            return True
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_bad_text(k) or _has_bad_text(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_bad_text(v) for v in value)
    return False


BAD_TEXT = "May not contain NUL characters or lone surrogates."


def _bad_text_errors(team_slug, specs: list, *, prefix: str = "") -> dict[str, list[str]]:
    """The fields (as validation names them: `env`, `workloads[2].command`) whose text cannot be stored."""
    errors: dict[str, list[str]] = {}
    if _has_bad_text(team_slug):
        errors["team"] = [BAD_TEXT]
    for index, spec in enumerate(specs):
        item = f"{prefix}[{index}]" if prefix else "non_field_errors"  # as the serializers name an item
        where = f"{prefix}[{index}]." if prefix else ""
        if not isinstance(spec, dict):
            if _has_bad_text(spec):
                errors[item] = [BAD_TEXT]
            continue
        for name, value in spec.items():
            if _has_bad_text(name):
                errors[item] = [BAD_TEXT]
            elif _has_bad_text(value):
                errors[f"{where}{name}"] = [BAD_TEXT]
    return errors


class ApiViewMixin:
    """What every endpoint shares: a body size limit, clean text, and errors always as JSON."""

    def initial(self, request: Request, *args, **kwargs) -> None:
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > settings.API_MAX_BODY_BYTES:
            raise BodyTooLarge(f"The request body may be at most {settings.API_MAX_BODY_BYTES} bytes.")
        bad = [name for name, values in request.query_params.lists() if _has_bad_text(values) or _has_bad_text(name)]
        bad += [name for name, value in kwargs.items() if _has_bad_text(value)]
        if bad:
            raise Invalid({name: ["Contains characters that are not allowed."] for name in bad})
        super().initial(request, *args, **kwargs)

    def check_throttles(self, request) -> None:
        # As DRF's, with every throttle's window checked and counted in one Redis round trip.
        throttles = self.get_throttles()
        throttling.count_together(throttles, request, self)
        waits = [throttle.wait() for throttle in throttles if not throttle.allow_request(request, self)]
        if waits:
            self.throttled(request, max((w for w in waits if w is not None), default=None))

    def finalize_response(self, request, response, *args, **kwargs):
        if isinstance(response, Response) and response.status_code >= 400:
            # Errors are JSON even from endpoints that otherwise answer text or CSV.
            request.accepted_renderer = JSONRenderer()
            request.accepted_media_type = "application/json"
        return super().finalize_response(request, response, *args, **kwargs)


class IgnoreAcceptNegotiation(DefaultContentNegotiation):
    """Logs are text whatever the client asks for."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class _Lines:
    """A followed log as text lines, passing `close` through so the stream slot is always given back."""

    def __init__(self, held: HeldStream, first: str | None) -> None:
        self.held, self.first = held, first

    def __iter__(self) -> Iterator[str]:
        if self.first is not None:
            yield f"{self.first}\n"
        for line in self.held:
            yield f"{line}\n"

    def close(self) -> None:
        self.held.close()


@contextlib.contextmanager
def cluster_call() -> Iterator[None]:
    try:
        yield
    except LogsUnavailable:
        raise
    except (ApiException, KubeConfigError, urllib3.exceptions.HTTPError, OSError) as exc:
        log.warning("cluster call failed: %s", classify(exc).message)
        raise ClusterUnavailable("The Kubernetes cluster could not answer; try again in a minute.") from exc


def _int_param(request: Request, name: str, *, default: int | None, low: int, high: int) -> int | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise Invalid({name: [f"A whole number from {low} to {high}."]})
    return int(raw)


def _bool_param(request: Request, name: str) -> bool:
    raw = (request.query_params.get(name) or "").lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise Invalid({name: ["true or false."]})


E = OpenApiResponse(ErrorSerializer)
TEAM_PARAM = OpenApiParameter(
    "team", str, description="Team slug; may be left out when you belong to exactly one team."
)


# --- workloads ------------------------------------------------------------------------------------
def _refuse_unknown_params(request: Request, known: Iterable[str]) -> None:
    """A query parameter the endpoint does not take is a 400 naming it: ignored, `?status=RUNNING` (for
    `state`) answered with every workload, which a script took for the running ones."""
    taken = sorted({*known, "format"})  # DRF's ?format= picks a renderer anywhere
    unknown = [name for name in request.query_params if name not in taken]
    if unknown:
        message = f"Not a parameter of this endpoint; it takes: {', '.join(taken)}."
        raise Invalid({name: [message] for name in unknown})


LIST_PARAMS = (*WorkloadFilter.base_filters, WorkloadCursorPagination.page_size_query_param,
               WorkloadCursorPagination.cursor_query_param)  # fmt: skip


def _check_list_filters(request: Request) -> None:
    """A team or GPU type filter that names nothing the caller could see is refused (400 naming it), as
    /usage/ and /secrets/ refuse such a team: an empty list would read as "nothing there"."""
    _refuse_unknown_params(request, LIST_PARAMS)
    errors = {}
    team = request.query_params.get("team")
    if team and not access.visible_teams(request.user).filter(slug=team).exists():
        errors["team"] = [f"You are not a member of a team {team!r}."]
    gpu_type = request.query_params.get("gpu_type")
    if gpu_type and not GpuType.objects.filter(slug=gpu_type).exists():
        errors["gpu_type"] = [f"No GPU type {gpu_type!r}; GET /api/v1/gpu-types/ lists them."]
    owner = request.query_params.get("owner")
    if owner:  # a member of one of the caller's teams, or anyone who ran work in one; else a typo, or a stranger
        teams = access.visible_teams(request.user)
        in_teams = Q(memberships__team__in=teams) | Q(workloads__team__in=teams)
        if not User.objects.filter(in_teams, username=owner).exists():
            errors["owner"] = [f"No one in your teams has the username {owner!r}."]
    if errors:
        raise Invalid(errors)


@extend_schema_view(
    list=extend_schema(summary="List workloads in your teams", description="Newest first, cursor-paginated."),
    retrieve=extend_schema(summary="Get a workload"),
)
class WorkloadViewSet(ApiViewMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = WorkloadSerializer
    lookup_field = "uid"
    lookup_value_regex = "[0-9a-z]{1,16}"
    pagination_class = WorkloadCursorPagination
    filter_backends = [DjangoFilterBackend]
    filterset_class = WorkloadFilter

    def get_queryset(self):
        queryset = access.visible_workloads(self.request.user)
        if self.action == "list":
            # Related names as columns, queue positions per page (list), not computed for every row.
            return with_related_names(queryset)
        return with_queue_position(queryset.select_related("team", "owner", "gpu_type"))

    def get_object(self) -> Workload:
        return policy.workload_or_404(self.request.user, self.kwargs["uid"], self.get_queryset())

    def list(self, request: Request) -> Response:
        _check_list_filters(request)
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        attach_related_names(page)
        positions = queue_positions(page)
        for workload in page:
            workload.queue_position = positions.get(workload.id)
        with_earlier_runs(page)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "now": timezone.now()}

    def _render_stored(self, workload: Workload, snapshot) -> dict:
        """A workload this request just stored QUEUED (its team and owner at hand): rendered from memory
        with its queue position as the store read it (PostgreSQL) and its GPU type from the facts it was
        judged by, else both read in one statement; never read back whole."""
        stored_position = getattr(workload, "queue_position_at_store", None)
        slugs = {type_id: slug for slug, type_id in snapshot.site.gpu_type_ids.items()} if snapshot else {}
        if stored_position is None or workload.gpu_type_id not in slugs:
            workload.gpu_type, workload.queue_position = queued_position_and_type(workload)
        else:  # read with the store (workload_submit's `with_queue_position`), the type from the facts
            slug = slugs[workload.gpu_type_id]
            workload.gpu_type = GpuType.from_db(workload._state.db, ["id", "slug"], [workload.gpu_type_id, slug])
            workload.queue_position = stored_position
        return self.get_serializer(workload).data

    def _render(self, workload: Workload) -> dict:
        # The caller found the workload through the caller's visibility (or just created it): one read
        # with its queue position, no second check.
        fresh = with_queue_position(Workload.objects.select_related("team", "owner", "gpu_type")).get(id=workload.id)
        return self.get_serializer(fresh).data

    @extend_schema(
        summary="Submit a workload",
        request=WorkloadCreateSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Any unique string (a UUID). A retry with the same key and body returns the first "
                "response instead of submitting again; the same key with another body is refused (422).",
            )
        ],
        responses={201: WorkloadSerializer, 422: E},
    )
    def create(self, request: Request) -> Response:
        team_slug, spec = parse_submission(request.data)
        bad = _bad_text_errors(team_slug, [spec])
        if bad:
            raise Invalid(bad)
        team, snapshot = access.resolve_team_to_submit(request.user, team_slug)
        key = request.headers.get("Idempotency-Key")

        stored, take_queue_slot = queue_slots_later(team=team, owner=request.user)

        def perform() -> tuple[int, dict]:
            # With a key, the response is rendered inside the record's transaction, before an admission
            # after the commit could show in it: a worker admits (coalesced with concurrent submissions)
            # and the request does not wait for it. Without one, the answer says whether it was admitted.
            # With a key this runs in the record's transaction, which any error rolls back whole.
            workload = workload_submit(
                team=team, owner=request.user, spec=spec, snapshot=snapshot, admit_in_line=key is None,
                all_or_nothing=key is not None, queue_slot_later=key is not None, with_queue_position=key is not None,
            )  # fmt: skip
            if key is not None:  # still QUEUED: the admission comes after the commit
                stored[:] = [workload]  # this attempt's (create_once may run it again after a rollback)
                return status.HTTP_201_CREATED, self._render_stored(workload, snapshot)
            return status.HTTP_201_CREATED, self._render(workload)

        if key is None:
            code, body = perform()
            replayed = False
        else:
            outcome = _once(request, key, {"team": team.id, "spec": spec}, perform, take_queue_slot)
            if isinstance(outcome, Response):
                return outcome
            code, body, replayed = outcome.status_code, outcome.body, outcome.replayed
        headers = {"Location": f"/api/v1/workloads/{body['uid']}/"}
        if replayed:
            headers["Idempotent-Replayed"] = "true"
        return Response(body, status=code, headers=headers)

    @extend_schema(
        summary="Submit several workloads at once",
        description="A sweep in one request: each item is judged as a single submission, and all are stored "
        "(201, in the order given) or none (each error names `workloads[i].field`). The Idempotency-Key, if "
        "any, covers the whole request. Admission follows at once, as for single submissions.",
        request=WorkloadBatchCreateSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="As for a single submission: a retry with the same key and body gets the first response.",
            )
        ],
        responses={201: WorkloadBatchSerializer, 422: E},
    )
    @action(detail=False, methods=["post"], url_path="batch", filter_backends=[], pagination_class=None)
    def batch(self, request: Request) -> Response:
        team_slug, specs = parse_batch(request.data)
        bad = _bad_text_errors(team_slug, specs, prefix="workloads")
        if bad:
            raise Invalid(bad)
        team, snapshot = access.resolve_team_to_submit(request.user, team_slug)
        key = request.headers.get("Idempotency-Key")
        # The queue slots are taken last before the commit (after the rendering; with a key the idempotency
        # record goes in the locks' statement): every submission of the team waits for their locks.
        stored, take_queue_slots = queue_slots_later(team=team, owner=request.user)

        def perform() -> tuple[int, dict]:
            stored[:] = workloads_submit_many(
                team=team, owner=request.user, specs=specs, snapshot=snapshot, queue_slot_later=True
            )
            return status.HTTP_201_CREATED, {"workloads": self._render_stored_many(stored, snapshot)}

        if key is None:
            with transaction.atomic():
                code, body = perform()
                take_queue_slots()
            return Response(body, status=code)
        outcome = _once(request, key, {"team": team.id, "batch": specs}, perform, take_queue_slots)
        if isinstance(outcome, Response):
            return outcome
        headers = {"Idempotent-Replayed": "true"} if outcome.replayed else {}
        return Response(outcome.body, status=outcome.status_code, headers=headers)

    def _render_stored_many(self, workloads: list[Workload], snapshot) -> list[dict]:
        """Workloads this request just stored QUEUED, rendered from memory: their queue positions in one
        statement, their GPU types from the facts the request was judged by."""
        positions = queue_positions(workloads)
        slugs = {type_id: slug for slug, type_id in snapshot.site.gpu_type_ids.items()}
        types: dict[int, GpuType] = {}
        for workload in workloads:
            type_id = workload.gpu_type_id
            if type_id not in types:
                types[type_id] = GpuType.from_db(workload._state.db, ["id", "slug"], [type_id, slugs[type_id]])
            workload.gpu_type = types[type_id]
            workload.queue_position = positions.get(workload.id)
        return self.get_serializer(workloads, many=True).data

    @extend_schema(summary="Cancel a workload", request=None, responses={200: WorkloadSerializer, 409: E})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, uid: str) -> Response:
        workload = self.get_object()
        access.check_may_cancel(request.user, workload)
        workload_cancel(workload=workload, by=request.user)
        return Response(self._render(workload))

    @extend_schema(
        summary="Share a service with your team (or stop sharing it)",
        description='Body `{"shared_with_team": true}`. Only the owner may; teammates can then open it at '
        "`open_url` with their own portal sign-in.",
        request=inline_serializer("ShareRequest", {"shared_with_team": drf_serializers.BooleanField()}),
        responses={200: WorkloadSerializer, 403: E, 409: E, 422: E},
    )
    @action(detail=True, methods=["post"], filter_backends=[])
    def share(self, request: Request, uid: str) -> Response:
        workload = self.get_object()
        shared = request.data.get("shared_with_team") if isinstance(request.data, dict) else None
        unknown = set(request.data) - {"shared_with_team"} if isinstance(request.data, dict) else set()
        if unknown:
            raise Invalid({name: ["Unknown field."] for name in sorted(unknown)})
        if not isinstance(shared, bool):
            raise Invalid({"shared_with_team": ["Must be true or false."]})
        if workload.kind != Kind.SERVICE:
            raise Conflict("Only services can be opened, so only services can be shared.", code="not_a_service")
        if not policy.may_share(request.user, workload):
            raise PermissionDenied("Only the owner of a service decides who else may open it.")
        workload_share(workload=workload, by=request.user, shared=shared)
        return Response(self._render(workload))

    @extend_schema(
        summary="Container logs, as text",
        description="The last `tail` lines (or those of the last `since` seconds). With `follow=true` the "
        "response streams lines as the container writes them. 409 when there is no container to read from.",
        parameters=[
            OpenApiParameter("tail", OpenApiTypes.INT, description=f"Lines from the end (1-{MAX_TAIL}, default 200)."),
            OpenApiParameter("since", OpenApiTypes.INT, description="Only lines of the last N seconds."),
            OpenApiParameter("follow", OpenApiTypes.BOOL, description="Stream until the container ends."),
            OpenApiParameter("rank", OpenApiTypes.INT, description="A gang job's rank (0 to nodes - 1; default 0)."),
        ],
        responses={(200, "text/plain"): OpenApiTypes.STR, 409: E, 503: E},
    )
    @action(
        detail=True,
        methods=["get"],
        renderer_classes=[PlainTextRenderer],
        content_negotiation_class=IgnoreAcceptNegotiation,
        filter_backends=[],
    )
    def logs(self, request: Request, uid: str):
        workload = self.get_object()
        tail = _int_param(request, "tail", default=200, low=1, high=MAX_TAIL)
        since = _int_param(request, "since", default=None, low=1, high=366 * 24 * 3600)
        follow = _bool_param(request, "follow")
        rank = _int_param(request, "rank", default=None, low=0, high=workload.nodes - 1)
        if workload.state in (State.QUEUED, State.SUBMITTING) or not workload.k8s_name:
            raise Conflict("The workload has no container yet (it has not started).", code="logs_unavailable")
        if not follow:
            with cluster_call():
                return Response(workload_logs(workload, tail=tail, since_seconds=since, rank=rank))
        seconds = settings.API_LOG_FOLLOW_SECONDS
        try:
            held = HeldStream(
                follow_logs(workload, tail=tail, since_seconds=since, timeout_seconds=seconds, rank=rank),
                user_id=request.user.id,
                seconds=seconds,
            )
        except TooManyStreams as exc:
            raise Throttled(detail=str(exc), wait=30) from exc
        try:
            with cluster_call():
                first = next(held, None)
        except BaseException:
            held.close()
            raise
        stream = _Lines(held, first)
        return StreamingHttpResponse(stream, content_type="text/plain; charset=utf-8")

    @extend_schema(
        summary="The workload's timeline and Kubernetes events",
        parameters=[
            OpenApiParameter(
                "rank", OpenApiTypes.INT, description="A gang job's rank: only its Job's and pod's events."
            ),
        ],
        responses={200: WorkloadEventsSerializer, 503: E},
    )
    @action(detail=True, methods=["get"], filter_backends=[])
    def events(self, request: Request, uid: str) -> Response:
        workload = self.get_object()
        rank = _int_param(request, "rank", default=None, low=0, high=workload.nodes - 1)
        with cluster_call():
            kubernetes = workload_events(workload, rank=rank)
        body = {"timeline": list(workload.events.all()), "kubernetes": kubernetes}
        return Response(WorkloadEventsSerializer(body).data)


# --- teams, quotas, queue --------------------------------------------------------------------------
class TeamViewSet(ApiViewMixin, viewsets.GenericViewSet):
    serializer_class = TeamSerializer
    lookup_field = "slug"
    lookup_value_regex = "[-a-zA-Z0-9_]+"
    pagination_class = None

    def get_queryset(self):
        return access.visible_teams(self.request.user).order_by("name")

    def get_serializer_context(self):
        roles = dict(Membership.objects.filter(user=self.request.user).values_list("team_id", "role"))
        return {**super().get_serializer_context(), "roles": roles}

    @extend_schema(summary="Your teams")
    def list(self, request: Request) -> Response:
        return Response(self.get_serializer(self.get_queryset(), many=True).data)

    @extend_schema(summary="A team")
    def retrieve(self, request: Request, slug: str) -> Response:
        return Response(self.get_serializer(access.team_by_slug(request.user, slug)).data)

    @extend_schema(summary="The team's GPU quotas and their use", responses=QuotaUseSerializer(many=True))
    @action(detail=True, methods=["get"])
    def quotas(self, request: Request, slug: str) -> Response:
        team = access.team_by_slug(request.user, slug)
        return Response(QuotaUseSerializer(team_quota_use(team), many=True).data)

    @extend_schema(summary="The team's queue", responses=QueueSerializer)
    @action(detail=True, methods=["get"])
    def queue(self, request: Request, slug: str) -> Response:
        team = access.team_by_slug(request.user, slug)
        queued = with_queue_position(
            Workload.objects.filter(team=team, state=State.QUEUED).select_related("team", "owner", "gpu_type")
        ).order_by("gpu_type__slug", "-priority", "created_at", "id")[: settings.API_QUEUE_LIMIT]
        # Read in index order (the limit stays cheap), listed as the positions number them: where a GPU type
        # ages, waiting longer with more GPUs moves a workload ahead within its priority.
        queued = sorted(queued, key=lambda w: (w.gpu_type.slug, w.queue_position, w.id))
        with_earlier_runs(queued)  # requeued work shows the GPU time of the runs it already had
        body = {
            "team": team.slug,
            "quotas": QuotaUseSerializer(team_quota_use(team), many=True).data,
            "queued": WorkloadSerializer(queued, many=True, context={"now": timezone.now(), "request": request}).data,
            "sharing": TypeQueueSerializer(team_queue_explained(team), many=True).data,
        }
        return Response(body)


# --- GPU types and the catalog --------------------------------------------------------------------
class GpuTypeListView(ApiViewMixin, APIView):
    @extend_schema(
        summary="GPU types, free/total in the cluster, and your team's quota",
        parameters=[TEAM_PARAM],
        responses=GpuTypeSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        team = access.resolve_team(request.user, request.query_params.get("team"))
        types = list(GpuType.objects.all())
        capacity = cluster_capacity(types)
        quotas = {use.gpu_type.id: use for use in team_quota_use(team)}
        # The CUDA version a submission is judged against (and the launch page shows): what an admin set,
        # else what the type's nodes' drivers report.
        judged = intake_facts.snapshot(team=team, user=request.user).site.gpu_types
        rows = [
            {
                "slug": t.slug,
                "display_name": t.display_name,
                "enabled": t.enabled,
                "billing_weight": t.billing_weight,
                "kind": t.kind,
                "gpu_share": float(t.share.fraction),
                "described": t.described,
                "max_per_container": t.share.per_container_limit,
                "max_cuda_version": (judged[t.slug].max_cuda if t.slug in judged else t.max_cuda_version) or "",
                "cluster": capacity[t.id],
                "quota": quotas.get(t.id),
            }
            for t in types
        ]
        return Response(GpuTypeSerializer(rows, many=True).data)


class CatalogImageListView(ApiViewMixin, APIView):
    @extend_schema(summary="The image catalog", responses=CatalogImageSerializer(many=True))
    def get(self, request: Request) -> Response:
        images = CatalogImage.objects.filter(enabled=True).order_by("title")
        return Response(CatalogImageSerializer(images, many=True).data)


class DatasetListView(ApiViewMixin, APIView):
    @extend_schema(
        summary="The datasets your team may mount",
        description="The names a submission's `datasets` takes, each mounted read-only at its `mount_path`. "
        "Only the team's own: another team's datasets are never listed.",
        parameters=[TEAM_PARAM],
        responses=DatasetSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        team = access.resolve_team(request.user, request.query_params.get("team"))
        return Response(DatasetSerializer(team_datasets(team), many=True).data)


class DatasetDetailView(ApiViewMixin, APIView):
    @extend_schema(
        summary="One dataset your team may mount",
        description="404 for a dataset that does not exist, is turned off, or is not your team's to use (the same "
        "answer, so another team's names are not given away).",
        parameters=[TEAM_PARAM],
        responses={200: DatasetSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, name: str) -> Response:
        team = access.resolve_team(request.user, request.query_params.get("team"))
        dataset = team_datasets(team).filter(name=name).first() if access.storable(name) else None
        if dataset is None:
            return Response(error_body(404, "not_found", "No such dataset among your team's."), status=404)
        return Response(DatasetSerializer(dataset).data)


# --- usage ----------------------------------------------------------------------------------------
GROUPS = ("day", "user", "gpu_type")


def _date_param(request: Request, name: str, default: date) -> date:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise Invalid({name: ["A date as YYYY-MM-DD."]}) from None


class UsageView(ApiViewMixin, APIView):
    renderer_classes = [JSONRenderer, UsageCsvRenderer]

    @extend_schema(
        summary="GPU-hours of a team over a date range",
        description="Grouped by day, user or GPU type; `format=csv` (or Accept: text/csv) for CSV.",
        parameters=[
            TEAM_PARAM,
            OpenApiParameter("start", OpenApiTypes.DATE, description="First day (default: first of this month)."),
            OpenApiParameter("end", OpenApiTypes.DATE, description="Last day, inclusive (default: today)."),
            OpenApiParameter("group_by", str, enum=list(GROUPS), description="Default: day."),
            OpenApiParameter(
                "user", str, description="Only this user's workloads (username; 400 when no one in the team has it)."
            ),
            OpenApiParameter("format", str, enum=["json", "csv"]),
        ],
        responses={(200, "application/json"): UsageSerializer, (200, "text/csv"): OpenApiTypes.STR},
    )
    def get(self, request: Request, format=None) -> Response:
        _refuse_unknown_params(request, ("team", "start", "end", "group_by", "user"))
        team = access.resolve_team(request.user, request.query_params.get("team"))
        default_start, default_end = reports.month_to_date(timezone.localdate())
        try:
            days = reports.day_range(
                _date_param(request, "start", default_start), _date_param(request, "end", default_end)
            )
        except reports.RangeInvalid as exc:
            raise Invalid({exc.field: [exc.message]}) from None
        group_by = request.query_params.get("group_by") or "day"
        if group_by not in GROUPS:
            raise Invalid({"group_by": ["One of: day, user, gpu_type."]})
        user_ids = policy.usage_user_ids(request.user, team)  # None: every member's
        username = request.query_params.get("user")
        if username:
            # Someone with a place in the team's figures: a member, or anyone who ran work in it (a former
            # member). Anyone else is a 400, a typo as much as another team's member: an empty 200 read as
            # "used nothing", and the same answer for both tells nobody who exists elsewhere.
            in_team = Q(memberships__team=team) | Q(workloads__team=team)
            wanted = list(User.objects.filter(in_team, username=username).values_list("id", flat=True).distinct())
            if not wanted:
                raise Invalid({"user": [f"No one in {team.slug} has the username {username!r}."]})
            if user_ids is not None and set(wanted) - set(user_ids):
                raise PermissionDenied("Only a manager of the team sees another member's usage.")
            user_ids = wanted
        report = reports.usage_build(days=days, team_ids=[team.id], user_ids=user_ids)
        name = self._key_name(group_by, report)
        entries = [
            {
                "key": name(key),
                "gpu_hours": sums.gpu_hours,
                "weighted_gpu_hours": sums.weighted_gpu_hours,
                "borrowed_gpu_hours": sums.borrowed_gpu_hours,
                "lost_gpu_hours": sums.lost_gpu_hours,
                "gpu_equivalent_hours": sums.gpu_equivalent_hours,
            }
            for (key,), sums in report.group(group_by).items()
        ]
        body = {
            "team": team.slug,
            "start": days.first.isoformat(),
            "end": days.last.isoformat(),
            "group_by": group_by,
            "rows": entries,
            "total_gpu_hours": round(sum(e["gpu_hours"] for e in entries), 6),
            "total_weighted_gpu_hours": round(sum(e["weighted_gpu_hours"] for e in entries), 6),
            "total_borrowed_gpu_hours": round(sum(e["borrowed_gpu_hours"] for e in entries), 6),
            "total_lost_gpu_hours": round(sum(e["lost_gpu_hours"] for e in entries), 6),
            "total_gpu_equivalent_hours": round(sum(e["gpu_equivalent_hours"] for e in entries), 6),
        }
        response = Response(body)
        if request.accepted_renderer.format == "csv":
            filename = f"usage-{team.slug}-{days.first}-{days.last}-by-{group_by}.csv"
            response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response

    @staticmethod
    def _key_name(group_by: str, report: reports.UsageReport):
        if group_by == "day":
            return lambda day: day.isoformat()
        if group_by == "user":
            return lambda user_id: report.users[user_id].get_username()
        return lambda type_id: report.gpu_types[type_id].slug
