"""Services on an origin of their own (PROXY_ORIGIN): the portal hands the person over with a ticket.

The portal is the live server on `localhost`, the proxy serves the apps' origin on `127.0.0.1` (another
host name, so the browser keeps their cookies apart, as it would for portal.example.org and
apps.example.org), or one origin per service, `<uid>.apps.gpuportal.test` (the suite's chromium resolves
that domain to loopback, tests/browser.py). The three people are the owner, a teammate and an outsider.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import time_machine
from django.core import signing
from django.test import Client
from django.utils import timezone

from identity.models import Role
from jobs.models import Kind, RedeemedTicket, State, Workload
from jobs.services import opening
from proxy import access
from proxy.app import ServiceProxy
from tests.browser import APPS_DOMAIN
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory, UserFactory
from tests.proxy.conftest import _free_port, serve
from tests.ui.conftest import sign_in

pytestmark = pytest.mark.django_db(transaction=True)


class Recording:
    """The proxy behind a recorder of every request that reaches the apps' origin: its host and path, and
    its Cookie headers."""

    def __init__(self, app: ServiceProxy) -> None:
        self.app = app
        self.cookies: list[str] = []
        self.requests: list[tuple[str, str, list[str]]] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            headers = scope.get("headers", [])
            cookies = [v.decode("latin-1") for k, v in headers if k == b"cookie"]
            host = next((v.decode("latin-1") for k, v in headers if k == b"host"), "")
            self.cookies += cookies
            self.requests.append((host, scope["path"], cookies))
        await self.app(scope, receive, send)


@pytest.fixture
def apps(transactional_db, settings, backend, live_server):
    yield from _apps_world(settings, backend, live_server, "http://127.0.0.1:{port}")


@pytest.fixture
def service_origins(transactional_db, settings, backend, live_server):
    """One origin per service: `http://<uid>.apps.gpuportal.test:PORT`, all served by one proxy."""
    yield from _apps_world(settings, backend, live_server, f"http://{{uid}}.{APPS_DOMAIN}:{{port}}")


def _apps_world(settings, backend, live_server, origin: str):
    proxy_port = _free_port()
    settings.SITE_URL = live_server.url  # http://localhost:PORT
    settings.PROXY_ORIGIN = origin.replace("{port}", str(proxy_port))
    settings.PROXY_ACCESS_CACHE_SECONDS = 0
    settings.SESSION_COOKIE_SECURE = False
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    access.reset_caches()
    team, other = TeamFactory(slug="vision"), TeamFactory(slug="language")
    people = {
        "owner": UserFactory(username="olivia"),
        "teammate": UserFactory(username="tom"),
        "outsider": UserFactory(username="oscar"),
    }
    MembershipFactory(user=people["owner"], team=team)
    MembershipFactory(user=people["teammate"], team=team, role=Role.MEMBER)
    MembershipFactory(user=people["outsider"], team=other)
    workload = Workload.objects.create(
        team=team, owner=people["owner"], name="notebook", kind=Kind.SERVICE, image="docker.io/x:1",
        gpu_type=GpuTypeFactory(slug="p100"), gpu_count=1, port=8888, time_limit_seconds=3600,
        state=State.RUNNING, namespace="gpuportal-vision", k8s_name="notebook-x",
    )  # fmt: skip
    recording = Recording(ServiceProxy(endpoints=lambda namespace, service: ("127.0.0.1", backend.port)))
    server, thread = serve(recording, proxy_port)
    yield {
        "origin": settings.PROXY_ORIGIN,
        "portal": live_server.url,
        "workload": workload,
        "people": people,
        "recording": recording,
    }
    server.should_exit = True
    thread.join(10)
    access.reset_caches()


def redeem(apps, ticket: str, next_path: str = "") -> requests.Response:
    query = {"ticket": ticket, "next": next_path or f"/w/{apps['workload'].uid}/"}
    return requests.get(f"{apps['origin']}/w/_login", params=query, allow_redirects=False, timeout=10)


def mint(apps, who: str = "owner", workload: Workload | None = None) -> str:
    return opening.ticket_mint(user=apps["people"][who], workload=workload or apps["workload"])


# --- the ticket ------------------------------------------------------------------------------------------
def test_a_ticket_becomes_the_proxys_own_cookie_for_that_service_only(apps):
    uid = apps["workload"].uid
    response = redeem(apps, mint(apps), f"/w/{uid}/lab?x=1")
    assert response.status_code == 302
    assert response.headers["Location"] == f"/w/{uid}/lab?x=1"
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith("gpuportal_open=")
    assert f"Path=/w/{uid}/" in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie
    assert "Domain" not in cookie  # host-only: never the portal's host, never a parent domain
    value = cookie.split(";", 1)[0].split("=", 1)[1]
    seen = requests.get(f"{apps['origin']}/w/{uid}/lab", cookies={"gpuportal_open": value}, timeout=10)
    assert seen.status_code == 200
    assert seen.json()["path"] == f"/w/{uid}/lab"
    assert "gpuportal_open" not in seen.json()["headers"].get("cookie", "")  # the app never sees it


def test_a_ticket_signs_in_once(apps):
    ticket = mint(apps)
    assert redeem(apps, ticket).status_code == 302
    again = redeem(apps, ticket)
    assert again.status_code == 403
    assert opening.TICKET_USED in again.text
    assert "Set-Cookie" not in again.headers


def test_an_expired_ticket_signs_no_one_in(apps, settings):
    with time_machine.travel(timezone.now() - timezone.timedelta(seconds=settings.PROXY_TICKET_SECONDS + 5)):
        ticket = mint(apps)
    refused = redeem(apps, ticket)
    assert refused.status_code == 403
    assert opening.TICKET_EXPIRED in refused.text
    assert not RedeemedTicket.objects.exists()  # it never got as far as being used


def test_a_tampered_ticket_signs_no_one_in(apps):
    ticket = mint(apps)
    payload, rest = ticket.split(":", 1)
    forged = ("A" if payload[0] != "A" else "B") + payload[1:] + ":" + rest
    refused = redeem(apps, forged)
    assert refused.status_code == 403
    assert opening.TICKET_INVALID in refused.text
    assert redeem(apps, "not-a-ticket").status_code == 403
    assert redeem(apps, "").status_code == 403


def test_a_ticket_for_someone_who_may_not_open_the_service_opens_nothing(apps):
    # Minted directly (the portal's view would refuse): the proxy decides again when it is redeemed.
    for who in ("outsider", "teammate"):  # the teammate: not shared yet
        refused = redeem(apps, mint(apps, who))
        assert refused.status_code == 404
        assert "Set-Cookie" not in refused.headers
    Workload.objects.filter(id=apps["workload"].id).update(shared_with_team=True)
    assert redeem(apps, mint(apps, "teammate")).status_code == 302


def test_a_ticket_for_one_service_lands_only_in_that_service(apps):
    uid = apps["workload"].uid
    response = redeem(apps, mint(apps), "/w/ffffffffffffffff/steal")
    assert response.headers["Location"] == f"/w/{uid}/"
    assert redeem(apps, mint(apps), "https://elsewhere.example/").headers["Location"] == f"/w/{uid}/"
    value = response.headers["Set-Cookie"].split(";", 1)[0].split("=", 1)[1]
    other = Workload.objects.create(
        team=apps["workload"].team, owner=apps["people"]["owner"], name="board", kind=Kind.SERVICE,
        image="docker.io/x:1", gpu_type=apps["workload"].gpu_type, gpu_count=1, port=6006,
        time_limit_seconds=3600, state=State.RUNNING, namespace="gpuportal-vision", k8s_name="board-x",
    )  # fmt: skip
    # The cookie names its service: replayed on another path it is no one (off to the portal to sign in).
    elsewhere = requests.get(
        f"{apps['origin']}/w/{other.uid}/", cookies={"gpuportal_open": value}, allow_redirects=False, timeout=10
    )
    assert elsewhere.status_code == 302
    assert elsewhere.headers["Location"].startswith(f"{apps['portal']}/workloads/{other.uid}/open/?next=")


def test_the_portals_session_is_no_key_on_the_apps_origin(apps):
    uid = apps["workload"].uid
    client = Client()
    client.force_login(apps["people"]["owner"])
    session = client.cookies["sessionid"].value
    refused = requests.get(
        f"{apps['origin']}/w/{uid}/", cookies={"sessionid": session}, allow_redirects=False, timeout=10
    )
    assert refused.status_code == 302  # to the portal's handoff, which asks the portal's own origin
    location = urlsplit(refused.headers["Location"])
    assert f"{location.scheme}://{location.netloc}" == apps["portal"]
    assert location.path == f"/workloads/{uid}/open/"
    assert parse_qs(location.query)["next"] == [f"/w/{uid}/"]


def test_the_portal_hands_over_only_to_whoever_may_open_the_service(apps):
    uid, people = apps["workload"].uid, apps["people"]
    assert opening.open_url(apps["workload"]) == f"{apps['portal']}/workloads/{uid}/open/"  # API, CLI, buttons
    owner = Client()
    owner.force_login(people["owner"])
    response = owner.get(f"/workloads/{uid}/open/", {"next": f"/w/{uid}/lab"})
    assert response.status_code == 302
    assert response["Referrer-Policy"] == "no-referrer"
    location = urlsplit(response["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{apps['origin']}/w/_login"
    query = parse_qs(location.query)
    assert query["next"] == [f"/w/{uid}/lab"]
    assert opening.ticket_redeem(query["ticket"][0]) == (people["owner"].id, uid)
    for who in ("outsider", "teammate"):
        other = Client()
        other.force_login(people[who])
        assert other.get(f"/workloads/{uid}/open/").status_code == 404
    assert Client().get(f"/workloads/{uid}/open/")["Location"].startswith("/login/?next=")


# --- the whole way, in a browser -------------------------------------------------------------------------
@pytest.mark.browser
def test_open_in_the_browser_never_sends_the_portals_cookies_to_the_apps_origin(apps, page, live_server):
    uid = apps["workload"].uid
    sign_in(page, "olivia", "correct horse battery staple")
    page.goto(f"/workloads/{uid}/open/")
    page.wait_for_url(f"{apps['origin']}/w/{uid}/")
    assert page.evaluate("() => document.body.innerText").find(f"/w/{uid}/") >= 0
    page.goto(f"{apps['origin']}/w/{uid}/cookies")
    assert "sessionid" not in page.content()
    assert "csrftoken" not in page.content()
    portal_cookies = {c["name"] for c in page.context.cookies(live_server.url)}
    apps_cookies = page.context.cookies(f"{apps['origin']}/w/{uid}/")
    assert "sessionid" in portal_cookies
    theirs = {c["name"]: (c["path"], c["httpOnly"]) for c in apps_cookies}
    assert theirs["gpuportal_open"] == (f"/w/{uid}/", True)
    assert "sessionid" not in theirs
    assert "csrftoken" not in theirs  # (`theme` is the test app's own cookie)
    sent = apps["recording"].cookies
    assert sent, "the browser sent nothing to the apps' origin"
    assert not [c for c in sent if "sessionid" in c or "csrftoken" in c]
    # Signed out of the portal, the apps' origin sends the browser back to the portal to sign in.
    anonymous = page.context.browser.new_context()
    try:
        tab = anonymous.new_page()
        tab.goto(f"{apps['origin']}/w/{uid}/lab")
        tab.wait_for_url(f"{live_server.url}/login/**")
    finally:
        anonymous.close()


# --- one origin per service ------------------------------------------------------------------------------
def _another_service(world, *, owner: str = "owner", name: str = "board") -> Workload:
    first = world["workload"]
    return Workload.objects.create(
        team=first.team, owner=world["people"][owner], name=name, kind=Kind.SERVICE, image="docker.io/x:1",
        gpu_type=first.gpu_type, gpu_count=1, port=6006, time_limit_seconds=3600, state=State.RUNNING,
        namespace="gpuportal-vision", k8s_name=f"{name}-x",
    )  # fmt: skip


def _origin(world, workload: Workload) -> str:
    return world["origin"].replace("{uid}", workload.uid)


def _at(world, host_of: Workload, path: str, **kwargs) -> requests.Response:
    """A request to the proxy as if to `host_of`'s origin (the Host header; no DNS needed)."""
    origin = urlsplit(_origin(world, host_of))
    return requests.get(
        f"http://127.0.0.1:{origin.port}{path}", headers={"Host": origin.netloc}, allow_redirects=False, timeout=10,
        **kwargs,
    )  # fmt: skip


def test_a_services_origin_serves_that_service_and_no_other(service_origins):
    world = service_origins
    first, second = world["workload"], _another_service(world)
    cookie = access.app_cookie_value(world["people"]["owner"], second.uid)
    # Second's own cookie, on second's origin: open. The same request on first's origin: not found.
    assert _at(world, second, f"/w/{second.uid}/", cookies={"gpuportal_open": cookie}).status_code == 200
    elsewhere = _at(world, first, f"/w/{second.uid}/", cookies={"gpuportal_open": cookie})
    assert elsewhere.status_code == 404
    assert "Set-Cookie" not in elsewhere.headers
    # A ticket for second, redeemed on first's origin, sets no cookie there.
    ticket = mint(world, workload=second)
    wrong = _at(world, first, "/w/_login", params={"ticket": ticket, "next": f"/w/{second.uid}/"})
    assert wrong.status_code == 404
    assert "Set-Cookie" not in wrong.headers
    # Open sends the browser to the service's own origin.
    owner = Client()
    owner.force_login(world["people"]["owner"])
    location = urlsplit(owner.get(f"/workloads/{second.uid}/open/")["Location"])
    assert f"{location.scheme}://{location.netloc}" == _origin(world, second)


@pytest.mark.browser
def test_one_origin_per_service_in_the_browser(service_origins, page, live_server):
    """Open hands over to each service's own origin; the portal's cookies never go there, and one service's
    cookie opens no other service."""
    world = service_origins
    first, second = world["workload"], _another_service(world)
    private = _another_service(world, owner="teammate", name="private")  # not shared: olivia may not open it
    sign_in(page, "olivia", "correct horse battery staple")
    for workload in (first, second):
        page.goto(f"/workloads/{workload.uid}/open/")
        page.wait_for_url(f"{_origin(world, workload)}/w/{workload.uid}/")
        assert f"/w/{workload.uid}/" in page.evaluate("() => document.body.innerText")
    cookies = {}
    for workload in (first, second):
        at = f"{_origin(world, workload)}/w/{workload.uid}/"
        [cookie] = [c for c in page.context.cookies(at) if c["name"] == "gpuportal_open"]
        assert cookie["domain"] == urlsplit(_origin(world, workload)).hostname  # host-only: that service's host
        assert (cookie["path"], cookie["httpOnly"]) == (f"/w/{workload.uid}/", True)
        cookies[workload.uid] = cookie["value"]
    assert {c["name"] for c in page.context.cookies(live_server.url)} >= {"sessionid", "csrftoken"}
    # Signed in to both, first's origin still does not serve second.
    assert page.goto(f"{_origin(world, first)}/w/{second.uid}/").status == 404
    # A service she may not open: its origin sends her to the portal, which says not found.
    refused = page.goto(f"{_origin(world, private)}/w/{private.uid}/")
    assert refused.status == 404
    assert page.url.startswith(f"{live_server.url}/workloads/{private.uid}/open/")
    # First's cookie, planted on second's origin in a browser not signed in to the portal, opens nothing:
    # the browser is sent to the portal's sign-in.
    stranger = page.context.browser.new_context()
    try:
        planted_at = f"{_origin(world, second)}/w/{second.uid}/"
        stranger.add_cookies([{"name": "gpuportal_open", "value": cookies[first.uid], "url": planted_at}])
        tab = stranger.new_page()
        tab.goto(f"{_origin(world, second)}/w/{second.uid}/")
        tab.wait_for_url(f"{live_server.url}/login/**")
    finally:
        stranger.close()
    # Every request that reached an apps origin: never the portal's cookies, and a proxy cookie only ever for
    # the service whose host it was sent to (the planted one excepted: it was refused above).
    requests_seen = world["recording"].requests
    assert {host.split(".", 1)[0] for host, _, _ in requests_seen} >= {first.uid, second.uid, private.uid}
    planted = 0
    for host, _path, sent in requests_seen:
        joined = "; ".join(sent)
        assert "sessionid" not in joined, (host, joined)
        assert "csrftoken" not in joined, (host, joined)
        for value in re.findall(r"gpuportal_open=([^;]+)", joined):
            owner_of = signing.loads(value, salt=access.APP_COOKIE_SALT)["w"]
            if owner_of != host.split(".", 1)[0]:
                planted += 1
                assert (value, host.split(".", 1)[0]) == (cookies[first.uid], second.uid)
    assert planted == 1
