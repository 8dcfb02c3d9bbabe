"""One lockout for all (issue 33.3): behind the proxy (the one entry of `make run` and compose) every
client reached the web from the proxy's address, and django-axes locked usernames and addresses apart, so
six wrong passwords for one account locked everyone out. Now the pair (username, address) is locked and
the proxy writes X-Forwarded-For itself: a real portal (live server) behind the real proxy, people
connecting from different loopback addresses, and the portal trusting only the proxy (127.0.0.1)."""

from __future__ import annotations

import http.client
import re
from http.cookies import SimpleCookie
from urllib.parse import urlencode

import pytest

from proxy.app import ServiceProxy
from tests.engine.factories import UserFactory
from tests.proxy.conftest import _free_port, serve

PASSWORD = "a long enough password 7"  # a test account's


@pytest.fixture
def front(live_server, settings, transactional_db):
    settings.TRUSTED_PROXIES = ["127.0.0.1/32"]  # as make run and compose set it: the proxy, nobody else
    settings.AXES_FAILURE_LIMIT = 5
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    for name in ("alice", "bob"):
        user = UserFactory(username=name)
        user.set_password(PASSWORD)
        user.save()
    app = ServiceProxy(portal_upstream=live_server.url, endpoints=lambda namespace, service: None)
    port = _free_port()
    server, thread = serve(app, port)
    yield port
    server.should_exit = True
    thread.join(10)


class Browser:
    """One person's browser on its own loopback address, talking to the proxy."""

    def __init__(self, port: int, address: str) -> None:
        self.port, self.address, self.cookies = port, address, {}

    def request(self, method: str, path: str, body: str = "", headers: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20, source_address=(self.address, 0))
        sent = {"Host": f"127.0.0.1:{self.port}", **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if body:
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        text = response.read().decode()
        for header in response.headers.get_all("Set-Cookie") or []:
            jar = SimpleCookie(header)
            self.cookies.update({k: m.value for k, m in jar.items()})
        conn.close()
        return response.status, text

    def sign_in(self, username: str, password: str, **headers) -> int:
        status, page = self.request("GET", "/login/")
        assert status == 200, page[:300]
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)[1]
        body = urlencode({"csrfmiddlewaretoken": token, "username": username, "password": password})
        status, _ = self.request(
            "POST", "/login/", body, {"Referer": f"http://127.0.0.1:{self.port}/login/", **headers}
        )
        return status


def test_six_wrong_passwords_for_one_person_lock_nobody_else_behind_the_proxy(front):
    mallory, bob = Browser(front, "127.0.0.2"), Browser(front, "127.0.0.3")
    for _ in range(6):
        mallory.sign_in("alice", "wrong")
    assert mallory.sign_in("alice", PASSWORD) == 429  # the pair that failed is locked
    assert bob.sign_in("bob", PASSWORD) == 302  # another person behind the same proxy is not
    assert Browser(front, "127.0.0.4").sign_in("alice", PASSWORD) == 302  # nor alice from where she is


def test_a_forged_x_forwarded_for_does_not_choose_the_address(front):
    mallory, bob = Browser(front, "127.0.0.2"), Browser(front, "127.0.0.3")
    # Mallory claims to be bob's address; the proxy writes the address that connected instead.
    for _ in range(6):
        mallory.sign_in("bob", "wrong", **{"X-Forwarded-For": "127.0.0.3"})
    assert bob.sign_in("bob", PASSWORD) == 302
    # And a forged address never frees the pair that failed.
    assert mallory.sign_in("bob", PASSWORD, **{"X-Forwarded-For": "203.0.113.77"}) == 429
