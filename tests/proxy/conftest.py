"""The proxy served by uvicorn in a thread, a real loopback backend behind it, and the three people.

The workload's pod address is pinned to the loopback backend (the `endpoints` seam); the EndpointSlice
lookup itself is exercised end to end by tests/proxy/test_open_e2e.py against the local cluster.
Django work in the proxy runs in other threads, so these tests use committed data (transactional_db).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

import pytest
import uvicorn
from django.test import Client

from identity.models import Role
from jobs.models import Kind, State, Workload
from proxy import access
from proxy.app import ServiceProxy
from proxy.handshake import RefusalAwareWebSocketProtocol
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory, UserFactory
from tests.proxy.backend import Backend, RawBackend


@dataclass
class ProxyWorld:
    base: str  # http://127.0.0.1:PORT of the proxy
    workload: Workload
    backend: Backend
    sessions: dict  # role -> session cookie value
    target: dict  # {"address": (ip, port) | None}: where the pinned endpoint points

    def url(self, rest: str = "") -> str:
        return f"{self.base}/w/{self.workload.uid}/{rest}"

    def cookies(self, who: str | None) -> dict:
        return {"sessionid": self.sessions[who]} if who else {}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ThreadedServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # not the main thread
        pass


def serve(app, port: int) -> tuple[ThreadedServer, threading.Thread]:
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", ws=RefusalAwareWebSocketProtocol, ws_per_message_deflate=False,
        lifespan="on", proxy_headers=False,
    )  # fmt: skip
    server = ThreadedServer(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    return server, thread


@pytest.fixture
def backend():
    server = Backend().start()
    yield server
    server.stop()


@pytest.fixture
def raw_backend():
    server = RawBackend().start()
    yield server
    server.stop()


@pytest.fixture
def proxy_world(transactional_db, settings, backend) -> ProxyWorld:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.PROXY_ACCESS_CACHE_SECONDS = 0  # sharing changes show at once
    settings.PROXY_RESPONSE_TIMEOUT = 2
    settings.PROXY_ACTIVITY_WRITE_SECONDS = 1
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
    sessions = {}
    for who, user in people.items():
        client = Client()
        client.force_login(user)
        sessions[who] = client.cookies["sessionid"].value
    target = {"address": ("127.0.0.1", backend.port)}
    app = ServiceProxy(endpoints=lambda namespace, service: target["address"])
    port = _free_port()
    server, thread = serve(app, port)
    yield ProxyWorld(f"http://127.0.0.1:{port}", workload, backend, sessions, target)
    server.should_exit = True
    thread.join(10)
    access.reset_caches()
