from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from api import views

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("workloads", views.WorkloadViewSet, basename="workload")
router.register("teams", views.TeamViewSet, basename="team")

urlpatterns = [
    path("", include(router.urls)),
    path("gpu-types/", views.GpuTypeListView.as_view(), name="gpu-types"),
    path("images/", views.CatalogImageListView.as_view(), name="images"),
    path("usage/", views.UsageView.as_view(), name="usage"),
]
