"""The telemetry pages. The agents' REST endpoint is api/views_agent.py, mounted in api/urls.py."""

from __future__ import annotations

from django.urls import path

from telemetry import views

urlpatterns = [
    path("nodes/", views.nodes, name="nodes"),
    path("telemetry/workloads/<str:uid>/gpu/", views.workload_gpu_partial, name="workload_gpu"),
    path("telemetry/workloads/<str:uid>/gpu.json", views.workload_gpu_json, name="workload_gpu_json"),
]
