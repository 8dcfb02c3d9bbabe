"""The proxy's pure rules: hop-by-hop headers, the portal's cookies, redirects, EndpointSlice reading."""

from __future__ import annotations

from jobs.kube.client import _first_ready
from proxy import headers

BLOCKED = frozenset({"sessionid", "csrftoken"})


def test_connection_named_headers_are_hop_by_hop_too():
    sent = [("Connection", "keep-alive, X-Secret"), ("X-Secret", "1"), ("Keep-Alive", "5"), ("Accept", "*/*"),
            ("Upgrade", "h2c"), ("TE", "trailers"), ("Transfer-Encoding", "chunked")]  # fmt: skip
    out = headers.request_headers(sent, blocked_cookies=BLOCKED, client_ip="10.0.0.9", scheme="https", prefix="/w/a/")
    assert out == [
        ("Accept", "*/*"),
        ("X-Forwarded-For", "10.0.0.9"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Prefix", "/w/a"),
    ]


def test_forwarded_headers_from_the_client_are_replaced_not_trusted():
    sent = [("Host", "gpus.example.org"), ("X-Forwarded-Host", "evil"), ("X-Forwarded-Proto", "gopher"),
            ("X-Forwarded-For", "1.2.3.4"), ("X-Forwarded-Prefix", "/")]  # fmt: skip
    out = dict(
        headers.request_headers(sent, blocked_cookies=BLOCKED, client_ip="10.0.0.9", scheme="http", prefix="/w/a/")
    )
    assert out == {
        "Host": "gpus.example.org",
        "X-Forwarded-For": "10.0.0.9",
        "X-Forwarded-Proto": "http",
        "X-Forwarded-Host": "gpus.example.org",
        "X-Forwarded-Prefix": "/w/a",
    }
    trusted = dict(
        headers.request_headers(sent, blocked_cookies=BLOCKED, client_ip="10.0.0.9", scheme="http", prefix="/w/a/",
                                from_trusted_proxy=True)
    )  # fmt: skip
    assert trusted["X-Forwarded-For"] == "1.2.3.4, 10.0.0.9"  # a trusted proxy's chain goes on


def test_the_portal_gets_the_forwarding_headers_the_proxy_writes():
    sent = [("Host", "gpus.example.org"), ("X-Forwarded-For", "203.0.113.5"), ("X-Forwarded-Proto", "https"),
            ("Forwarded", "for=1.2.3.4"), ("Connection", "close"), ("Cookie", "sessionid=s")]  # fmt: skip
    out = headers.portal_request_headers(sent, client_ip="198.51.100.2", scheme="http", from_trusted_proxy=False)
    assert out == [("Host", "gpus.example.org"), ("Cookie", "sessionid=s"), ("X-Forwarded-For", "198.51.100.2"),
                   ("X-Forwarded-Proto", "http")]  # fmt: skip
    behind = dict(headers.portal_request_headers(sent, client_ip="10.0.0.2", scheme="http", from_trusted_proxy=True))
    assert (behind["X-Forwarded-For"], behind["X-Forwarded-Proto"]) == ("203.0.113.5, 10.0.0.2", "https")


def test_portal_cookies_never_reach_the_app():
    assert headers.strip_cookies("sessionid=s; _xsrf=x; csrftoken=c;theme=dark", BLOCKED) == "_xsrf=x; theme=dark"
    out = headers.request_headers([("Cookie", "sessionid=s; csrftoken=c")], blocked_cookies=BLOCKED, client_ip="h",
                                  scheme="http", prefix="/w/a/")  # fmt: skip
    assert not [v for k, v in out if k == "Cookie"]  # nothing left: no empty Cookie header either


def test_the_app_cannot_set_or_delete_portal_cookies():
    got = [("Set-Cookie", "sessionid=x; Path=/"), ("Set-Cookie", " csrftoken=; Max-Age=0"),
           ("Set-Cookie", "_xsrf=2|abc; Path=/w/a/"), ("Set-Cookie", "=novalue"), ("Content-Type", "text/html")]  # fmt: skip
    out = headers.response_headers(got, blocked_cookies=BLOCKED, backend_origin="http://10.1.2.3:8888")
    assert out == [("Set-Cookie", "_xsrf=2|abc; Path=/w/a/"), ("Content-Type", "text/html")]


def test_a_redirect_to_the_pods_own_address_stays_on_the_portal():
    origin = "http://10.1.2.3:8888"
    assert headers.relative_location("http://10.1.2.3:8888/w/a/lab?x=1#y", origin) == "/w/a/lab?x=1#y"
    assert headers.relative_location("https://elsewhere.org/x", origin) == "https://elsewhere.org/x"
    assert headers.relative_location("/w/a/tree", origin) == "/w/a/tree"


def test_a_redirect_to_an_ipv6_pods_own_address_stays_on_the_portal():
    origin = headers.origin("fd00:10::7", 8888)
    assert origin == "http://[fd00:10::7]:8888"
    assert headers.relative_location("http://[fd00:10::7]:8888/w/a/tree?x=1", origin) == "/w/a/tree?x=1"
    assert headers.relative_location("http://[fd00:10::8]:8888/w/a/tree", origin) == "http://[fd00:10::8]:8888/w/a/tree"
    assert headers.origin("10.1.2.3", 8888) == "http://10.1.2.3:8888"
    assert headers.authority("fd00:10::7", 8888) == "[fd00:10::7]:8888"


def test_subprotocols_in_the_browsers_order():
    assert headers.subprotocols([("Sec-WebSocket-Protocol", "v2.jupyter, jupyter"), ("X", "y")]) == [
        "v2.jupyter",
        "jupyter",
    ]


def test_first_ready_endpoint_of_the_slices():
    slices = [
        {"ports": [{"name": "http", "port": 8888}], "endpoints": [
            {"addresses": ["10.0.0.1"], "conditions": {"ready": False}},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": True}},
        ]},
    ]  # fmt: skip
    assert _first_ready(slices, "http") == ("10.0.0.2", 8888)
    assert _first_ready([{"ports": [{"port": 6006}], "endpoints": [{"addresses": ["10.0.0.3"]}]}], "http") == (
        "10.0.0.3",
        6006,
    )  # no name: the one port; no condition: ready
    assert _first_ready([{"ports": [{"name": "http", "port": 1}], "endpoints": []}], "http") is None
    assert _first_ready([], "http") is None


def test_a_websocket_may_come_only_from_the_page_origin_it_was_sent_to_or_the_portals():
    allowed = headers.websocket_origin_allowed
    one = {"portal_origin": "https://gpus.example.org", "https_only": True}
    assert allowed("https://gpus.example.org", "gpus.example.org", **one)
    assert allowed(None, "gpus.example.org", **one)  # no browser: no one else's cookie
    for origin in ("https://evil.example", "https://gpus.example.org:8443", "https://x.gpus.example.org",
                   "http://gpus.example.org", "null", "", "gpus.example.org"):  # fmt: skip
        assert not allowed(origin, "gpus.example.org", **one), origin
    # One origin per service: only the service's own page (its host), never a sibling service or the portal.
    apps = {"portal_origin": "", "https_only": True}
    assert allowed("https://abc123.apps.example.org", "abc123.apps.example.org", **apps)
    assert not allowed("https://zzz999.apps.example.org", "abc123.apps.example.org", **apps)
    assert not allowed("https://gpus.example.org", "abc123.apps.example.org", **apps)
    # Loopback pages are secure contexts to browsers: Secure cookies reach them over http.
    assert allowed("http://127.0.0.1:8000", "127.0.0.1:8000", portal_origin="", https_only=True)
    assert not allowed("http://10.0.0.5:8000", "10.0.0.5:8000", portal_origin="", https_only=True)
    # Plain-HTTP trials (no secure cookies): the same rule over http.
    assert allowed("http://localhost:8000", "localhost:8000", portal_origin="http://127.0.0.1:8000", https_only=False)
    assert not allowed(
        "http://localhost:8001", "localhost:8000", portal_origin="http://127.0.0.1:8000", https_only=False
    )
