from __future__ import annotations

from django.urls import path

from identity import views

urlpatterns = [
    path("sso/login/", views.sso_login, name="sso_login"),
    path("sso/callback/", views.sso_callback, name="sso_callback"),
    # Before jobs.urls: the same address as the plain sign-out, which it replaces.
    path("logout/", views.sso_logout, name="sso_logout"),
]
