from __future__ import annotations

from django.urls import path

from api import profile_views

urlpatterns = [
    path("tokens/", profile_views.tokens, name="api-tokens"),
    path("tokens/<int:token_id>/revoke/", profile_views.revoke, name="api-token-revoke"),
]
