"""Large downloads take the kernel's short way (proxy/zerocopy.py) and arrive exactly as the app sent them.

The proxy runs under the uvicorn the project pins, as in production; a spy on `Sink.relay` tells whether
the short way was taken, so an upgrade that quietly loses it fails here rather than only in `make bench`.
"""

from __future__ import annotations

import hashlib
import time

import pytest
import requests

from proxy import zerocopy
from tests.proxy.backend import noise

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def relays(monkeypatch) -> list[int]:
    """The length of every body relayed through the kernel, in order."""
    seen: list[int] = []
    real = zerocopy.Sink.relay

    async def spy(self, pod_fd, first, length):
        seen.append(length)
        await real(self, pod_fd, first, length)

    monkeypatch.setattr(zerocopy.Sink, "relay", spy)
    return seen


def test_a_large_download_is_spliced_and_arrives_byte_for_byte(proxy_world, relays):
    size = 24 * 1024 * 1024 + 7  # not a multiple of any buffer
    response = requests.get(
        proxy_world.url(f"blob?bytes={size}&seed=3"), cookies=proxy_world.cookies("owner"), timeout=60
    )
    assert response.status_code == 200
    assert response.headers["Content-Length"] == str(size)
    assert hashlib.sha256(response.content).digest() == hashlib.sha256(noise(size, 3)).digest()
    assert relays == [size]


def test_a_small_answer_takes_the_ordinary_way(proxy_world, relays):
    response = requests.get(proxy_world.url("blob?bytes=200000"), cookies=proxy_world.cookies("owner"), timeout=10)
    assert response.content == noise(200_000, 0)
    assert relays == []


def test_the_browsers_connection_carries_more_requests_after_a_spliced_one(proxy_world, relays):
    sizes = [3 * 1024 * 1024, 150, 5 * 1024 * 1024 + 1]
    with requests.Session() as browser:
        browser.cookies.update(proxy_world.cookies("owner"))
        bodies = [browser.get(proxy_world.url(f"blob?bytes={n}&seed={n}"), timeout=30).content for n in sizes]
        stats = browser.get(proxy_world.url("x"), timeout=10)  # and the echo after them, same connection
    assert [len(b) for b in bodies] == sizes
    assert all(body == noise(n, n) for body, n in zip(bodies, sizes, strict=True))
    assert stats.status_code == 200
    assert relays == [sizes[0], sizes[2]]


def test_a_browser_that_reads_slowly_still_gets_every_byte(proxy_world, relays):
    size = 8 * 1024 * 1024
    digest, got = hashlib.sha256(), 0
    with requests.get(
        proxy_world.url(f"blob?bytes={size}&seed=9"), cookies=proxy_world.cookies("owner"), stream=True, timeout=60
    ) as response:
        for n, piece in enumerate(response.iter_content(256 * 1024)):
            if n < 8:
                time.sleep(0.1)  # the browser's socket fills up: the relay has to wait for room
            digest.update(piece)
            got += len(piece)
    assert got == size
    assert digest.digest() == hashlib.sha256(noise(size, 9)).digest()
    assert relays == [size]


def test_a_large_body_the_app_cuts_short_never_looks_whole(proxy_world, raw_backend, relays):
    proxy_world.target["address"] = ("127.0.0.1", raw_backend.port)
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        requests.get(proxy_world.url("cut-large"), cookies=proxy_world.cookies("owner"), timeout=30)
    assert relays == [8 * 1024 * 1024]
    assert requests.get(proxy_world.url("page"), cookies=proxy_world.cookies("owner"), timeout=10).text == "hello"


def test_only_the_pinned_servers_own_send_offers_the_short_way():
    async def someone_elses_send(message):
        pass

    scope = {"type": "http", "method": "GET"}
    assert zerocopy.sink_for(scope, someone_elses_send) is None
    assert zerocopy.sink_for({**scope, "method": "HEAD"}, someone_elses_send) is None
