from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from jobs.views import account, dashboard, gpu_health, health, launch, members, queue, secrets, usage, workloads

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("nodes/health/<int:mark_id>/clear/", gpu_health.gpu_health_clear, name="gpu_health_clear"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("team/", account.team_switch, name="team_switch"),
    path("", dashboard.dashboard, name="dashboard"),
    path("launch/", launch.launch, name="launch"),
    path("launch/outlook/", launch.launch_outlook_partial, name="launch_outlook"),
    path("workloads/", workloads.workload_list, name="workload_list"),
    path("workloads/<str:uid>/", workloads.workload_detail, name="workload_detail"),
    path("workloads/<str:uid>/live/", workloads.workload_live, name="workload_live"),
    path("workloads/<str:uid>/logs/", workloads.workload_logs_partial, name="workload_logs"),
    path("workloads/<str:uid>/logs/stream/", workloads.workload_logs_stream, name="workload_logs_stream"),
    path("workloads/<str:uid>/events/", workloads.workload_events_partial, name="workload_events"),
    path("workloads/<str:uid>/cancel/", workloads.workload_cancel_confirm, name="workload_cancel_confirm"),
    path("workloads/<str:uid>/cancel/do/", workloads.workload_cancel_view, name="workload_cancel"),
    path("workloads/<str:uid>/share/", workloads.workload_share_view, name="workload_share"),
    path("workloads/<str:uid>/open/", workloads.workload_open, name="workload_open"),
    path("usage/", usage.usage, name="usage"),
    path("queue/", queue.queue, name="queue"),
    path("secrets/", secrets.secrets_page, name="secrets"),
    path("secrets/<str:name>/delete/", secrets.secret_delete_view, name="secret_delete"),
    path("members/", members.members_page, name="members"),
    path("members/<int:membership_id>/role/", members.member_role_view, name="member_role"),
    path("members/<int:membership_id>/remove/", members.member_remove_view, name="member_remove"),
]
