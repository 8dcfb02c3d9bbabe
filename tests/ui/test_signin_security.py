"""Sign-in hardening: failed sign-ins are throttled per pair of username and address on /login/ and /admin/;
every page carries a Content-Security-Policy; forwarding headers are believed only from trusted proxies."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from jobs.models import State
from tests.ui.conftest import PASSWORD, make_workload

pytestmark = pytest.mark.django_db

ADMIN_LOGIN = "/admin/login/"


@pytest.fixture
def limits(settings):
    settings.AXES_FAILURE_LIMIT = 3
    return settings


def sign_in(client, url: str, username: str, password: str, address: str = "198.51.100.7", **headers):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address, **headers)


@pytest.mark.parametrize("url", [reverse("login"), ADMIN_LOGIN])
def test_guessing_one_users_password_is_stopped(client, world, limits, url):
    assert sign_in(client, url, "olivia", "guess").status_code == 200
    assert sign_in(client, url, "olivia", "guess").status_code == 200
    assert sign_in(client, url, "olivia", "guess").status_code == 429  # the third failure locks
    # Even the right password is refused now from that address: the pair is locked.
    locked = sign_in(client, url, "olivia", PASSWORD)
    assert locked.status_code == 429
    assert "Too many sign-in attempts" in locked.content.decode()
    assert "_auth_user_id" not in client.session


def test_failures_lock_only_the_pair_of_username_and_address(client, world, limits):
    for _ in range(3):
        sign_in(client, reverse("login"), "mallory-guesses", "guess")
    # The same address signs in as someone else, and olivia signs in from her own address.
    assert sign_in(client, reverse("login"), "olivia", PASSWORD).status_code == 302
    client.logout()
    for _ in range(3):
        sign_in(client, reverse("login"), "olivia", "guess", "203.0.113.66")
    assert sign_in(client, reverse("login"), "olivia", PASSWORD, "192.0.2.99").status_code == 302


def test_a_forged_x_forwarded_for_does_not_dodge_the_lock(client, world, limits):
    for i in range(3):
        sign_in(client, reverse("login"), "olivia", "guess", HTTP_X_FORWARDED_FOR=f"10.9.9.{i}")
    assert sign_in(client, reverse("login"), "olivia", PASSWORD, HTTP_X_FORWARDED_FOR="10.9.9.99").status_code == 429


def test_behind_a_trusted_proxy_the_client_address_is_what_the_proxy_says(client, world, limits):
    limits.TRUSTED_PROXIES = ["10.0.0.0/8"]
    for i in range(3):
        sign_in(client, reverse("login"), f"user{i}", "guess", "10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.1")
    # The proxy itself is not locked out: another client behind it signs in.
    ok = sign_in(client, reverse("login"), "olivia", PASSWORD, "10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.2")
    assert ok.status_code == 302


def test_a_success_before_the_limit_starts_the_count_again(client, world, limits):
    sign_in(client, reverse("login"), "olivia", "guess")
    sign_in(client, reverse("login"), "olivia", "guess")
    assert sign_in(client, reverse("login"), "olivia", PASSWORD).status_code == 302
    client.logout()
    sign_in(client, reverse("login"), "olivia", "guess")
    assert sign_in(client, reverse("login"), "olivia", PASSWORD).status_code == 302


@pytest.mark.parametrize("path", ["/login/", "/", "/admin/login/", "/api/docs/"])
def test_every_page_allows_only_this_sites_scripts(client, world, login, path):
    login(world.owner)
    if path == "/admin/login/":
        get_user_model().objects.filter(pk=world.owner.pk).update(is_staff=True)
    response = client.get(path)
    policy = response["Content-Security-Policy"]
    assert "script-src 'self';" in policy
    assert "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy.split("script-src", 1)[1].split(";")[0]
    assert "<script>" not in response.content.decode()  # no inline script anywhere


def test_the_terminal_page_alone_gets_a_style_nonce_and_scripts_still_only_self(client, world, login):
    """xterm.js makes <style> elements as it runs: the service page's style-src carries a fresh nonce its
    terminal script hands them (portal/security.py StyleNonce); script-src stays 'self', other pages plain."""
    login(world.owner)
    service = make_workload(world, kind="service", state=State.RUNNING)
    first, second = (client.get(f"/workloads/{service.uid}/") for _ in range(2))
    nonces = []
    for response in (first, second):
        policy = response["Content-Security-Policy"]
        style = policy.split("style-src", 1)[1].split(";")[0]
        nonce = re.fullmatch(r" 'self' 'nonce-([A-Za-z0-9_-]{20,})'", style).group(1)
        assert f'nonce="{nonce}"' in response.content.decode()
        assert "script-src 'self';" in policy
        assert "unsafe-inline" not in policy
        nonces.append(nonce)
    assert nonces[0] != nonces[1]
    assert "nonce-" not in client.get("/")["Content-Security-Policy"]


def test_x_forwarded_proto_is_believed_only_from_a_trusted_proxy(client, world, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    forged = client.get(reverse("login"), REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_PROTO="https")
    assert forged.status_code == 301  # it came over plain http, whatever it claims
    assert forged["Location"].startswith("https://")
    proxied = client.get(reverse("login"), REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_PROTO="https")
    assert proxied.status_code == 200
