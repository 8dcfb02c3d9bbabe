"""Host services on the real nodes' pod network: TCP relays from the bridge's gateway to loopback.

    with HostRelays(gateway) as relays:
        db_port = relays.tcp(("127.0.0.1", 5432))                    # PostgreSQL, as <gateway>:<db_port>
        api_port = relays.tls(("127.0.0.1", 6443), pki=cluster.pki)  # the API server, re-encrypted

Why: the local cluster has no kube-proxy and no cluster DNS, so a pod reaches neither a Service's ClusterIP nor
its name; and the API server, PostgreSQL and Redis of a dev machine or a test session listen on loopback,
which a pod (in its own network namespace) cannot reach. A pod can reach its node's bridge gateway, an address
of this machine that only the cluster's pods and the host itself see. A relay listens there and copies bytes
to the loopback service: pod traffic stays on this machine, nothing is changed in the kernel (no iptables rule,
no sysctl), and everything ends with the relays' thread: a cluster's `down` has nothing to clean up.

The API server's certificate names 127.0.0.1 and 10.96.0.1, not the gateway; so its relay is TLS on both sides:
it serves a certificate for the gateway signed by the cluster's CA (the CA every pod's service-account
ca.crt names), and connects to the API server over TLS verified against the same CA. The bearer token in
the pod's requests passes through untouched; the relay holds no credential of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import tempfile
import threading
from pathlib import Path
from typing import Any

CHUNK = 64 * 1024


class HostRelays:
    """Relays on one listen address (a bridge gateway), served by one asyncio loop in a daemon thread."""

    def __init__(self, listen_host: str) -> None:
        self.listen_host = listen_host
        self._loop = asyncio.new_event_loop()
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="host-relays", daemon=True)
        self._thread.start()
        self._workdir = tempfile.TemporaryDirectory(prefix="gpuportal-relay-")

    def __enter__(self) -> HostRelays:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tcp(self, target: tuple[str, int]) -> int:
        """Relay plain TCP from a free port on the listen address to `target`; returns that port."""
        return self._serve(target, server_ssl=None, client_ssl=None)

    def tls(self, target: tuple[str, int], *, pki: Any) -> int:
        """A TLS relay to a TLS server whose certificate the cluster's CA signed (the API server): pods see a
        certificate for the listen address from the same CA."""
        work = Path(self._workdir.name)
        cert, key = work / f"relay-{len(self._servers)}.crt", work / f"relay-{len(self._servers)}.key"
        pki.issue(cert, key, "gpuportal-host-relay", None, [], [self.listen_host], server=True)
        server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ssl.load_cert_chain(cert, key)
        client_ssl = ssl.create_default_context(cafile=str(pki.ca_cert))
        return self._serve(target, server_ssl=server_ssl, client_ssl=client_ssl)

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            for server in self._servers:
                server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._workdir.cleanup()

    # -- inside the loop ---------------------------------------------------------------------------------
    def _serve(
        self, target: tuple[str, int], *, server_ssl: ssl.SSLContext | None, client_ssl: ssl.SSLContext | None
    ) -> int:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            try:
                try:
                    up_reader, up_writer = await asyncio.open_connection(
                        *target, ssl=client_ssl, server_hostname=target[0] if client_ssl else None
                    )
                except OSError:
                    writer.close()
                    return
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)
            finally:
                self._tasks.discard(task)

        async def start() -> asyncio.AbstractServer:
            return await asyncio.start_server(handle, self.listen_host, 0, ssl=server_ssl)

        server = asyncio.run_coroutine_threadsafe(start(), self._loop).result(timeout=30)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
    finally:
        with contextlib.suppress(Exception):
            writer.close()
