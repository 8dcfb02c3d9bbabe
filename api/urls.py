from __future__ import annotations

from django.urls import include, path, re_path
from django.views.decorators.csrf import csrf_exempt
from rest_framework.routers import DefaultRouter

from api import (
    views,
    views_agent,
    views_checkpoints,
    views_members,
    views_notifications,
    views_queue,
    views_secrets,
    views_ssh_keys,
)

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("workloads", views.WorkloadViewSet, basename="workload")
router.register("teams", views.TeamViewSet, basename="team")

urlpatterns = [
    path("teams/<str:slug>/members/", views_members.TeamMembersView.as_view(), name="team-members"),
    path(
        "teams/<str:slug>/members/changes/", views_members.TeamMemberChangesView.as_view(), name="team-member-changes"
    ),
    path("teams/<str:slug>/members/<str:username>/", views_members.TeamMemberView.as_view(), name="team-member"),
    path("workloads/<str:uid>/checkpoints/", views_checkpoints.CheckpointView.as_view(), name="workload-checkpoints"),
    path("workloads/<str:uid>/estimates/", views_queue.WorkloadEstimatesView.as_view(), name="workload-estimates"),
    path("queue/estimate-accuracy/", views_queue.EstimateAccuracyView.as_view(), name="estimate-accuracy"),
    path("", include(router.urls)),
    path("gpu-types/", views.GpuTypeListView.as_view(), name="gpu-types"),
    path("images/", views.CatalogImageListView.as_view(), name="images"),
    path("datasets/", views.DatasetListView.as_view(), name="datasets"),
    path("datasets/<str:name>/", views.DatasetDetailView.as_view(), name="dataset"),
    path("usage/", views.UsageView.as_view(), name="usage"),
    path(
        "me/notifications/", views_notifications.NotificationPreferenceView.as_view(), name="notification-preferences"
    ),
    path("me/ssh-keys/", views_ssh_keys.SshKeyListView.as_view(), name="ssh-keys"),
    path("me/ssh-keys/<int:key_id>/", views_ssh_keys.SshKeyDetailView.as_view(), name="ssh-key"),
    path("secrets/", views_secrets.SecretListView.as_view(), name="secrets"),
    path("secrets/<str:name>/", views_secrets.SecretDetailView.as_view(), name="secret"),
    path("agent/reports", views_agent.AgentReportView.as_view(), name="agent_report"),
]


@csrf_exempt  # it changes nothing, and must answer 404 (not a CSRF 403) to any method
def _not_found(request, *args, **kwargs):
    # Anything under /api/v1/ that matches no route answers in the API's error format, not Django's HTML page.
    from django.http import JsonResponse

    from api.errors import error_body

    return JsonResponse(error_body(404, "not_found", "No such API endpoint or object."), status=404)


urlpatterns.append(re_path(r"^[\s\S]*$", _not_found))  # newlines included
