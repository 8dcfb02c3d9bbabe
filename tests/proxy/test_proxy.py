"""The service proxy against a real backend on loopback: who gets in, what crosses, and every failure page."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time

import pytest
import requests
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from jobs.models import State, Workload
from proxy import app as app_module

pytestmark = pytest.mark.django_db(transaction=True)


def get(world, rest: str, who: str | None = "owner", **kwargs) -> requests.Response:
    return requests.get(world.url(rest), cookies=world.cookies(who), allow_redirects=False, timeout=30, **kwargs)


# --- who gets through ------------------------------------------------------------------------------
def test_owner_reaches_the_app_under_its_prefix(proxy_world):
    response = get(proxy_world, "lab/tree?x=1")
    assert response.status_code == 200
    seen = response.json()
    assert seen["path"] == f"/w/{proxy_world.workload.uid}/lab/tree"
    assert seen["query"] == "x=1"
    assert seen["headers"]["x-forwarded-prefix"] == f"/w/{proxy_world.workload.uid}"
    assert seen["headers"]["x-forwarded-for"] == "127.0.0.1"
    assert seen["headers"]["host"] == proxy_world.base.removeprefix("http://")


def test_anonymous_goes_to_sign_in_and_comes_back(proxy_world):
    response = get(proxy_world, "lab?x=1", who=None)
    assert response.status_code == 302
    assert response.headers["Location"] == f"/login/?next=%2Fw%2F{proxy_world.workload.uid}%2Flab%3Fx%3D1"


def test_outsider_gets_the_portals_404(proxy_world):
    response = get(proxy_world, "", who="outsider")
    assert response.status_code == 404
    assert "Not found" in response.text
    assert "not been shared" not in response.text  # outsiders learn nothing
    assert get(proxy_world, "", who=None).status_code == 302
    nowhere = f"{proxy_world.base}/w/ffffffffffffffff/"
    assert requests.get(nowhere, allow_redirects=False, timeout=10).status_code == 302  # anonymous: sign in first
    assert requests.get(nowhere, cookies=proxy_world.cookies("outsider"), timeout=10).status_code == 404


def test_teammate_is_refused_until_the_owner_shares(proxy_world):
    refused = get(proxy_world, "", who="teammate")
    assert refused.status_code == 404
    assert "not been shared with your team" in refused.text
    Workload.objects.filter(id=proxy_world.workload.id).update(shared_with_team=True)
    assert get(proxy_world, "", who="teammate").status_code == 200


def test_no_trailing_slash_redirects_into_the_prefix(proxy_world):
    response = requests.get(f"{proxy_world.base}/w/{proxy_world.workload.uid}?a=b", allow_redirects=False, timeout=10)
    assert response.status_code == 308
    assert response.headers["Location"] == f"/w/{proxy_world.workload.uid}/?a=b"


# --- what crosses ----------------------------------------------------------------------------------
def test_portal_cookies_are_stripped_both_ways(proxy_world):
    cookies = {**proxy_world.cookies("owner"), "csrftoken": "secret-csrf", "messages": "m", "app": "kept"}
    response = requests.get(proxy_world.url("cookies"), cookies=cookies, timeout=10)
    assert response.json()["cookie"] == "app=kept"
    set_cookies = response.raw.headers.getlist("Set-Cookie")
    assert set_cookies == ["theme=dark; Path=/w/"]


def test_hop_by_hop_headers_stay_on_their_hop(proxy_world):
    sent = get(
        proxy_world,
        "echo",
        headers={"Connection": "keep-alive, X-Client-Secret", "X-Client-Secret": "1", "X-Forwarded-For": "10.9.9.9",
                 "TE": "trailers", "Proxy-Authorization": "Basic eA==", "X-End-To-End": "yes"},
    ).json()["headers"]  # fmt: skip
    for name in ("x-client-secret", "te", "proxy-authorization", "keep-alive"):
        assert name not in sent
    assert sent["x-end-to-end"] == "yes"
    assert sent["x-forwarded-for"] == "127.0.0.1"  # written by the proxy: a client's own is dropped
    back = get(proxy_world, "hop")
    assert back.text == "hop"
    assert "X-Backend-Secret" not in back.headers
    assert "Keep-Alive" not in back.headers
    assert back.headers["X-Kept"] == "1"
    # Issue 33.7: in one-origin mode a service could widen its service worker's scope over the portal's pages.
    assert "Service-Worker-Allowed" not in back.headers


def test_redirect_to_the_backends_own_address_stays_on_the_portal(proxy_world):
    response = get(proxy_world, "redirect")
    assert response.status_code == 302
    assert response.headers["Location"] == f"/w/{proxy_world.workload.uid}/tree?x=1"


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
def test_every_method_passes(proxy_world, method):
    response = requests.request(
        method, proxy_world.url("api/x"), data=b"abc", cookies=proxy_world.cookies("owner"), timeout=10
    )
    assert response.json()["method"] == method
    assert response.json()["size"] == 3


def test_response_streams_as_the_backend_writes(proxy_world):
    started = time.monotonic()
    with requests.get(
        proxy_world.url("stream"), cookies=proxy_world.cookies("owner"), stream=True, timeout=10
    ) as response:
        lines = response.iter_lines()
        first = next(lines)
        first_at = time.monotonic() - started
        rest = list(lines)
    assert first == b"part 0"
    assert rest == [b"part 1", b"part 2"]
    assert first_at < 1.0  # the backend needs 1.4 s for all of it: the first part came before the end


def test_upload_of_100_megabytes_streams_through(proxy_world):
    block = os.urandom(1024 * 1024)
    digest = hashlib.sha256()

    def chunks():
        for _ in range(100):
            digest.update(block)
            yield block

    response = requests.post(
        proxy_world.url("upload"), data=chunks(), cookies=proxy_world.cookies("owner"), timeout=120
    )
    seen = response.json()
    assert seen["size"] == 100 * 1024 * 1024
    assert seen["sha256"] == digest.hexdigest()
    assert seen["headers"]["transfer-encoding"] == "chunked"  # streamed, never held whole


def test_large_download_arrives_whole(proxy_world):
    response = get(proxy_world, "download?bytes=20000000")
    assert len(response.content) == 20_000_000


def test_head_answers_with_the_length_and_no_body(proxy_world):
    response = requests.head(proxy_world.url("download?bytes=12345"), cookies=proxy_world.cookies("owner"), timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Length"] == "12345"
    assert response.content == b""


def test_a_body_that_ends_when_the_app_closes_arrives_whole(proxy_world, raw_backend):
    proxy_world.target["address"] = ("127.0.0.1", raw_backend.port)
    response = get(proxy_world, "until-close")
    assert response.status_code == 200
    assert response.content == b"u" * 300_000


@pytest.mark.parametrize("rest", ["cut", "cut-chunked"])
def test_a_body_the_app_cuts_short_never_looks_whole(proxy_world, raw_backend, rest):
    proxy_world.target["address"] = ("127.0.0.1", raw_backend.port)
    server_log = ListHandler()
    logging.getLogger("uvicorn.error").addHandler(server_log)
    try:
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            get(proxy_world, rest)
        time.sleep(0.2)  # the server logs once the app has returned
    finally:
        logging.getLogger("uvicorn.error").removeHandler(server_log)
    # The pod cut it, not the proxy: the server's "returned without completing response" is not an ERROR.
    assert [r.getMessage() for r in server_log.records if r.levelno >= logging.ERROR] == []


def test_an_app_of_ours_that_leaves_an_answer_unfinished_is_still_an_error():
    """The server's complaint is only softened for answers the proxy cut on purpose."""
    record = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, app_module._INCOMPLETE, None, None)
    assert app_module._CUT_FILTER.filter(record) is True
    assert record.levelno == logging.ERROR


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_an_interim_100_continue_is_not_the_answer(proxy_world, raw_backend):
    proxy_world.target["address"] = ("127.0.0.1", raw_backend.port)
    response = get(proxy_world, "continue")
    assert response.status_code == 200
    assert response.text == "final"


def test_kept_alive_connections_are_reused_and_one_the_app_drops_is_retried(proxy_world, raw_backend):
    proxy_world.target["address"] = ("127.0.0.1", raw_backend.port)
    answers = [get(proxy_world, "page") for _ in range(3)]
    assert [(a.status_code, a.text) for a in answers] == [(200, "hello")] * 3
    assert raw_backend.connections == 2  # the first carried two answers, dropped the third: asked again anew


# --- every failure is a portal page ----------------------------------------------------------------
def test_a_hanging_backend_gets_the_timeout_page(proxy_world):
    started = time.monotonic()
    response = get(proxy_world, "hang")
    assert response.status_code == 504
    assert "did not answer in time" in response.text
    assert time.monotonic() - started < 10


def test_a_backend_that_is_down_gets_a_clear_page(proxy_world):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    proxy_world.target["address"] = ("127.0.0.1", dead)
    response = get(proxy_world, "")
    assert response.status_code == 502
    assert "cannot be reached" in response.text
    assert f"/workloads/{proxy_world.workload.uid}/" in response.text


def test_no_ready_pod_yet_is_the_starting_page(proxy_world):
    proxy_world.target["address"] = None
    response = get(proxy_world, "")
    assert response.status_code == 503
    assert 'data-refresh-seconds="3"' in response.text  # js/proxy-starting.js reloads it, and can be stopped
    assert "is starting" in response.text
    # A running workload whose pod is not Ready yet (its readiness probe has not answered): said in words.
    assert "the program inside is starting up and does not answer on its port yet" in response.text
    assert "cannot be reached" not in response.text


@pytest.mark.parametrize("state", [State.QUEUED, State.PENDING])
def test_starting_states_refresh_themselves(proxy_world, state):
    Workload.objects.filter(id=proxy_world.workload.id).update(state=state)
    response = get(proxy_world, "")
    assert response.status_code == 503
    assert response.headers["Retry-After"]
    assert "js/proxy-starting.js" in response.text


@pytest.mark.parametrize("pod", ["gone", "no longer answering"])
def test_a_service_cancelled_a_moment_ago_says_it_ended_not_starting(proxy_world, settings, pod):
    """The proxy keeps who may enter for a few seconds; a cancel inside that window still ends in the
    ended page (the pod's silence makes it ask the database again), not "starting" or "cannot be reached"."""
    import http.server
    import threading

    settings.PROXY_ACCESS_CACHE_SECONDS = 60
    settings.PROXY_ENDPOINT_CACHE_SECONDS = 0 if pod == "gone" else 60

    class Lab(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args) -> None:
            pass

    app = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Lab)
    threading.Thread(target=app.serve_forever, daemon=True).start()
    proxy_world.target["address"] = ("127.0.0.1", app.server_address[1])
    try:
        assert get(proxy_world, "").status_code == 200  # the door (and the pod's address) cached: open
    finally:
        app.shutdown()
        app.server_close()
    Workload.objects.filter(id=proxy_world.workload.id).update(state=State.CANCELLED)
    if pod == "gone":
        proxy_world.target["address"] = None  # its EndpointSlice lists no ready pod any more
    response = get(proxy_world, "")
    assert response.status_code == 410
    assert "has ended" in response.text


def test_ended_service_says_so_with_a_link(proxy_world):
    Workload.objects.filter(id=proxy_world.workload.id).update(state=State.CANCELLED, finished_at=None, started_at=None)
    response = get(proxy_world, "lab")
    assert response.status_code == 410
    assert "has ended" in response.text
    assert "cancelled" in response.text
    assert f'href="/workloads/{proxy_world.workload.uid}/"' in response.text


@pytest.mark.parametrize(
    ("state", "words"),
    [
        (State.FAILED, "This service failed,"),
        (State.CANCELLED, "This service was cancelled,"),
        (State.SUCCEEDED, "This service finished on its own,"),
        (State.PREEMPTED, "This service was stopped so that the team that lent its GPUs could have them back,"),
    ],
)
def test_the_ended_page_says_how_it_ended_in_words(proxy_world, state, words):
    """Issue 32: the ended page said "This service is failed"."""
    Workload.objects.filter(id=proxy_world.workload.id).update(state=state)
    response = get(proxy_world, "")
    assert response.status_code == 410
    text = " ".join(re.sub(r"<[^>]+>", "", response.text).split())
    assert words in text
    assert "This service is " not in text


def test_traffic_records_activity(proxy_world):
    assert Workload.objects.get(id=proxy_world.workload.id).last_activity_at is None
    get(proxy_world, "")
    deadline = time.monotonic() + 5
    while Workload.objects.get(id=proxy_world.workload.id).last_activity_at is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert Workload.objects.get(id=proxy_world.workload.id).last_activity_at is not None


# --- WebSocket -------------------------------------------------------------------------------------
def ws(world, who: str | None = "owner", rest: str = "ws", **kwargs):
    headers = {"Cookie": f"sessionid={world.sessions[who]}; csrftoken=x"} if who else {}
    return connect(world.url(rest).replace("http://", "ws://"), additional_headers=headers, open_timeout=10, **kwargs)


def test_websocket_echoes_text_and_binary_with_the_subprotocol(proxy_world):
    with ws(proxy_world, subprotocols=["jupyter"]) as socket:
        assert socket.subprotocol == "jupyter"
        socket.send("hello")
        assert socket.recv(timeout=5) == "echo: hello"
        socket.send(b"\x01\x02\x03")
        assert socket.recv(timeout=5) == b"\x03\x02\x01"


def test_websocket_close_codes_pass_both_ways(proxy_world):
    with ws(proxy_world) as socket:
        socket.send("close:4001")
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=5)
    assert closed.value.rcvd.code == 4001
    assert closed.value.rcvd.reason == "asked to"
    with ws(proxy_world) as socket:
        socket.send("hi")
        socket.recv(timeout=5)
        socket.close(code=4002, reason="bye")
    deadline = time.monotonic() + 5
    while 4002 not in proxy_world.backend.close_codes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 4002 in proxy_world.backend.close_codes


@pytest.mark.parametrize("who", ["outsider", "teammate", None])
def test_websocket_refused_to_others(proxy_world, who):
    with pytest.raises(InvalidStatus) as refused:
        ws(proxy_world, who=who)
    assert refused.value.response.status_code == 403


@pytest.mark.parametrize("origin", ["https://evil.example", "http://127.0.0.1:1", "http://localhost:{port}", "null"])
def test_a_websocket_from_another_origin_is_refused_even_with_the_owners_cookie(proxy_world, origin):
    """Issue 33.4: a page elsewhere (another site, another port of this host, a sandboxed frame) cannot
    use the owner's cookie to open their service's WebSocket; the portal's own pages can."""
    port = proxy_world.base.rsplit(":", 1)[1]
    opened = len(proxy_world.backend.close_codes)
    with pytest.raises(InvalidStatus) as refused:
        ws(proxy_world, origin=origin.replace("{port}", port))
    assert refused.value.response.status_code == 403
    with ws(proxy_world, origin=proxy_world.base) as socket:  # the page it came to: the portal's own
        socket.send("hello")
        assert socket.recv(timeout=5) == "echo: hello"
    assert len(proxy_world.backend.close_codes) <= opened + 1  # the refused one never reached the service


# --- a pod with an IPv6 address (dual-stack clusters give EndpointSlices bare IPv6 addresses) --------
@pytest.fixture
def ipv6_backend():
    from tests.proxy.backend import Backend

    server = Backend(host="::1").start()
    yield server
    server.stop()


def test_an_ipv6_pod_serves_pages_redirects_and_websockets(proxy_world, ipv6_backend):
    proxy_world.target["address"] = ("::1", ipv6_backend.port)
    page = get(proxy_world, "lab?x=1")
    assert page.status_code == 200
    assert page.json()["path"] == f"/w/{proxy_world.workload.uid}/lab"
    assert get(proxy_world, "download?bytes=3000000").content == b"x" * 3_000_000
    redirect = get(proxy_world, "redirect")
    assert redirect.headers["Location"] == f"/w/{proxy_world.workload.uid}/tree?x=1"
    with ws(proxy_world) as socket:
        socket.send("over six")
        assert socket.recv(timeout=5) == "echo: over six"
