"""localcluster.hostrelay: the relays that put loopback services (PostgreSQL, Redis, the API server) on the real
nodes' bridge gateway for pods, here between two loopback sockets of this process."""

from __future__ import annotations

import socket
import socketserver
import ssl
import threading
from collections.abc import Iterator

import pytest

from localcluster.hostrelay import HostRelays
from localcluster.pki import Pki


class Echo(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        while line := self.rfile.readline():
            self.wfile.write(b"echo " + line)


@pytest.fixture
def echo_server() -> Iterator[socketserver.ThreadingTCPServer]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_tcp_relay_carries_both_ways_and_many_connections(echo_server) -> None:
    with HostRelays("127.0.0.1") as relays:
        port = relays.tcp(echo_server.server_address)
        assert port != echo_server.server_address[1]
        for i in range(3):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                conn.sendall(f"hello {i}\n".encode() + b"x" * 200_000 + b"\n")
                received = b""
                while received.count(b"\n") < 2:
                    received += conn.recv(65536)
                assert received.startswith(f"echo hello {i}\n".encode())
                assert len(received) == len(f"echo hello {i}\n") + 5 + 200_001


def test_the_tls_relay_shows_a_cluster_ca_certificate_for_its_address_and_verifies_the_server(tmp_path) -> None:
    pki = Pki(tmp_path / "pki")
    pki.ensure()
    # The "API server": TLS with a certificate of the cluster's CA for 127.0.0.1 only.
    pki.issue(tmp_path / "srv.crt", tmp_path / "srv.key", "api", None, [], ["127.0.0.1"], server=True)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "srv.crt", tmp_path / "srv.key")
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve_once() -> None:
        conn, _ = listener.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            data = tls.recv(1024)
            seen.append(data)
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    threading.Thread(target=serve_once, daemon=True).start()
    with HostRelays("127.0.0.2") as relays:
        port = relays.tls(listener.getsockname(), pki=pki)
        client_ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        # A pod's client checks the relay's address against the certificate, as load_incluster_config does.
        with (
            socket.create_connection(("127.0.0.2", port), timeout=10) as raw,
            client_ctx.wrap_socket(raw, server_hostname="127.0.0.2") as tls,
        ):
            tls.sendall(b"GET /version HTTP/1.1\r\nAuthorization: Bearer pod-token\r\n\r\n")
            answer = tls.recv(1024)
    listener.close()
    assert answer.endswith(b"ok")
    assert b"Authorization: Bearer pod-token" in seen[0]  # the pod's own token, passed through
