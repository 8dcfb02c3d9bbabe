from __future__ import annotations

from django.urls import path

from identity import profile_views, views

urlpatterns = [
    path("sso/login/", views.sso_login, name="sso_login"),
    path("sso/callback/", views.sso_callback, name="sso_callback"),
    # Before jobs.urls: the same address as the plain sign-out, which it replaces.
    path("logout/", views.sso_logout, name="sso_logout"),
    path("profile/ssh-keys/", profile_views.ssh_keys, name="ssh-keys"),
    path("profile/ssh-keys/<int:key_id>/remove/", profile_views.ssh_key_remove, name="ssh-key-remove"),
]
