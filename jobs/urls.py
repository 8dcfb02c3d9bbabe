from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from jobs import (
    views,
    views_account,
    views_dashboard,
    views_launch,
    views_queue,
    views_secrets,
    views_usage,
    views_workloads,
)

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("team/", views_account.team_switch, name="team_switch"),
    path("", views_dashboard.dashboard, name="dashboard"),
    path("launch/", views_launch.launch, name="launch"),
    path("launch/outlook/", views_launch.launch_outlook_partial, name="launch_outlook"),
    path("workloads/", views_workloads.workload_list, name="workload_list"),
    path("workloads/<str:uid>/", views_workloads.workload_detail, name="workload_detail"),
    path("workloads/<str:uid>/live/", views_workloads.workload_live, name="workload_live"),
    path("workloads/<str:uid>/logs/", views_workloads.workload_logs_partial, name="workload_logs"),
    path("workloads/<str:uid>/logs/stream/", views_workloads.workload_logs_stream, name="workload_logs_stream"),
    path("workloads/<str:uid>/events/", views_workloads.workload_events_partial, name="workload_events"),
    path("workloads/<str:uid>/cancel/", views_workloads.workload_cancel_confirm, name="workload_cancel_confirm"),
    path("workloads/<str:uid>/cancel/do/", views_workloads.workload_cancel_view, name="workload_cancel"),
    path("workloads/<str:uid>/share/", views_workloads.workload_share_view, name="workload_share"),
    path("usage/", views_usage.usage, name="usage"),
    path("queue/", views_queue.queue, name="queue"),
    path("secrets/", views_secrets.secrets_page, name="secrets"),
    path("secrets/<str:name>/delete/", views_secrets.secret_delete_view, name="secret_delete"),
]
