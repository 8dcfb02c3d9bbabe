"""/api/v1/queue/estimate-accuracy/ and /api/v1/workloads/<uid>/estimates/: how good the start estimates
are per GPU type, and one workload's own estimate history and promise (what the queue page and a
workload's page show)."""

from __future__ import annotations

import re

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import access
from api.errors import Invalid
from api.serializers import ErrorSerializer
from api.views import ApiViewMixin
from jobs import policy
from jobs.services.queue import estimate_history, reservations

E = OpenApiResponse(ErrorSerializer)
MAX_DAYS = 90


class AccuracySerializer(serializers.Serializer):
    gpu_type = serializers.CharField(help_text="GPU type slug.")
    started = serializers.IntegerField(help_text="Workloads with an estimate that started in the window.")
    p50_error_seconds = serializers.FloatField(allow_null=True, help_text="Median |start - first estimate|.")
    p90_error_seconds = serializers.FloatField(allow_null=True, help_text="90th percentile of the same.")
    p50_error_percent = serializers.FloatField(allow_null=True, help_text="Median error as a share of the wait.")
    late = serializers.IntegerField(help_text="Started more than a minute after their first estimate.")

    def to_representation(self, row: estimate_history.TypeAccuracy) -> dict:
        a = row.accuracy
        return {
            "gpu_type": row.gpu_type.slug,
            "started": a.started,
            "p50_error_seconds": a.p50_error_s,
            "p90_error_seconds": a.p90_error_s,
            "p50_error_percent": a.p50_error_pct,
            "late": a.late,
        }


class AccuracyAnswerSerializer(serializers.Serializer):
    days = serializers.IntegerField()
    gpu_types = AccuracySerializer(many=True)


class EstimateSerializer(serializers.Serializer):
    at = serializers.DateTimeField(help_text="When the estimate was made.")
    estimated_start_at = serializers.DateTimeField(allow_null=True, help_text="Null: not within a week.")


class WorkloadEstimatesSerializer(serializers.Serializer):
    uid = serializers.CharField()
    starts_no_later_than = serializers.DateTimeField(
        allow_null=True, help_text="The promise while GPUs are reserved for it (queued); null: none stands."
    )
    estimates = EstimateSerializer(many=True, help_text="The first estimate and each revision, oldest first.")
    started_at = serializers.DateTimeField(allow_null=True)


class EstimateAccuracyView(ApiViewMixin, APIView):
    @extend_schema(
        summary="How good start estimates are, per GPU type",
        parameters=[OpenApiParameter("days", int, description=f"Window in days (1-{MAX_DAYS}, default 30).")],
        responses={200: AccuracyAnswerSerializer, 400: E},
    )
    def get(self, request: Request) -> Response:
        raw = request.query_params.get("days", str(estimate_history.WINDOW_DAYS))
        if not re.fullmatch(r"[0-9]{1,3}", raw) or not 1 <= int(raw) <= MAX_DAYS:
            raise Invalid({"days": [f"A whole number of days from 1 to {MAX_DAYS}."]})
        rows = estimate_history.accuracy_by_gpu_type(days=int(raw))
        return Response({"days": int(raw), "gpu_types": AccuracySerializer(rows, many=True).data})


class WorkloadEstimatesView(ApiViewMixin, APIView):
    @extend_schema(
        summary="A workload's start estimates as they were made, its promise and its start",
        responses={200: WorkloadEstimatesSerializer, 404: E},
    )
    def get(self, request: Request, uid: str) -> Response:
        workload = policy.workload_or_404(request.user, uid, access.visible_workloads(request.user))
        promise = reservations.promise_of(workload)
        field = serializers.DateTimeField()
        return Response(
            {
                "uid": workload.uid,
                "starts_no_later_than": field.to_representation(promise) if promise else None,
                "estimates": [
                    {
                        "at": field.to_representation(line.at),
                        "estimated_start_at": field.to_representation(line.estimate) if line.estimate else None,
                    }
                    for line in estimate_history.story_of(workload)
                    if line.kind == "estimate"
                ],
                "started_at": field.to_representation(s)
                if (s := workload.started_at or workload.admitted_at)
                else None,
            }
        )
