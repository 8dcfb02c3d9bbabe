from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView


def favicon(request: HttpRequest) -> HttpResponse:
    # Resolved per request: the hashed name exists only once collectstatic wrote the manifest.
    return HttpResponsePermanentRedirect(static("favicon.svg"))


urlpatterns = [
    path("admin/", admin.site.urls),
    # Pages name their icon; browsers and tools that ask for /favicon.ico anyway get it too, never a 404.
    path("favicon.ico", favicon),
    path("", include("telemetry.urls")),
    path("api/v1/", include(("api.urls", "api"), namespace="v1")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # drf-spectacular's page without its inline <style>, which the Content-Security-Policy refuses.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="api-schema", template_name="api/swagger_ui.html"),
        name="api-docs",
    ),
    path("profile/", include("api.profile_urls")),
    path("notifications/", include("notifications.urls")),
    path("", include("identity.urls")),
    path("", include("jobs.urls")),
]
