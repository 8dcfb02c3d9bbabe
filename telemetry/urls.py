from __future__ import annotations

from django.urls import path

from telemetry import views

urlpatterns = [
    # The agent's endpoint lives under the REST API's prefix (agent/push.py posts here) but is not a DRF
    # view: it authenticates agents, not people.
    path("api/v1/agent/reports", views.agent_report, name="agent_report"),
    path("nodes/", views.nodes, name="nodes"),
    path("telemetry/workloads/<str:uid>/gpu/", views.workload_gpu_partial, name="workload_gpu"),
    path("telemetry/workloads/<str:uid>/gpu.json", views.workload_gpu_json, name="workload_gpu_json"),
]
