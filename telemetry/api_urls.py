"""The agents' endpoint, included by api/urls.py under /api/v1/agent/ (agent/push.py posts there).

Mounted inside the API's own include, before its catch-all 404, so no reordering of the root URL
includes can shadow it, and its errors share the API's format.
"""

from __future__ import annotations

from django.urls import path

from telemetry import views

urlpatterns = [
    path("reports", views.AgentReportView.as_view(), name="agent_report"),
]
