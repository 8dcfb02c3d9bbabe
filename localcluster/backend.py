"""Real backends for simulated service pods: a small HTTP + WebSocket app on the pod's IP and ports.

Nothing runs a pod's image here, but a service (a Deployment's pod whose containers declare ports) should
be something a client can really connect to: the portal's reverse proxy, a browser, a test. So while such
a pod runs, the node simulator serves on <pod IP>:<containerPort>:

- any path, any method: an HTML page naming the method and path it was asked for, the pod, and the
  `GPUPORTAL_BASE_URL` the container was given (if any);
- a WebSocket upgrade at any path: every message is echoed back (text as text, binary as binary);
- `<anything>/_files/<container path>`: the simulated container's view of its mounted volumes.
  GET reads the file, PUT writes the request body into it; only paths under a volume mount exist (the
  rest of the container's filesystem is not simulated: 404), and a read-only mount refuses writes (403,
  "Read-only file system"). This is how tests prove that a workspace really persists.

Pod IPs are loopback addresses (Linux answers on all of 127.0.0.0/8), from a /24 chosen at random per
cluster (localcluster.cluster keeps it in the state directory), so clusters side by side never share one.
The backend stops (its port closes, open WebSockets get 1001 "going away") when the pod stops running.

All backends share one asyncio loop in a daemon thread; the simulator's threads call `start`/`stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import os
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from aiohttp import WSCloseCode, WSMsgType, web

log = logging.getLogger("node-simulator")
FILES_MARKER = "/_files/"
MAX_FILE_BYTES = 16 << 20
START_TIMEOUT = 10.0


@dataclass(frozen=True)
class Mount:
    """A volume as the simulated container sees it: its path inside, and the directory that backs it."""

    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True)
class BackendSpec:
    """What one service pod's backend serves."""

    namespace: str
    pod: str
    ip: str
    ports: tuple[int, ...]
    base_url: str = ""
    mounts: tuple[Mount, ...] = field(default=())


class FileAccessError(Exception):
    """A container-path access the simulated container could not make; `status` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def resolve_container_path(mounts: tuple[Mount, ...], path: str) -> tuple[Path, Mount]:
    """The host file behind a container path, by the longest mount prefix. Refuses paths that leave it."""
    pure = PurePosixPath("/" + path.lstrip("/"))
    if ".." in pure.parts:
        raise FileAccessError(400, f"{pure}: '..' is not allowed")
    best: Mount | None = None
    for mount in mounts:
        root = PurePosixPath(mount.container_path)
        if (pure == root or root in pure.parents) and (
            best is None or len(root.parts) > len(PurePosixPath(best.container_path).parts)
        ):
            best = mount
    if best is None:
        raise FileAccessError(404, f"{pure}: no such file (only mounted volumes are simulated)")
    relative = pure.relative_to(PurePosixPath(best.container_path))
    return Path(best.host_path, *relative.parts), best


def read_container_file(mounts: tuple[Mount, ...], path: str) -> bytes:
    target, _ = resolve_container_path(mounts, path)
    try:
        with open(target, "rb") as fh:
            return fh.read(MAX_FILE_BYTES)
    except FileNotFoundError as exc:
        raise FileAccessError(404, f"{path}: No such file or directory") from exc
    except IsADirectoryError as exc:
        raise FileAccessError(400, f"{path}: Is a directory") from exc


def write_container_file(mounts: tuple[Mount, ...], path: str, data: bytes) -> None:
    target, mount = resolve_container_path(mounts, path)
    if mount.read_only:
        # The kubelet mounts readOnly volumes read-only; we enforce the same here (the simulator may run
        # as root, for whom file modes would not).
        raise FileAccessError(403, f"{path}: Read-only file system")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        tmp.write_bytes(data)
        tmp.replace(target)
    except IsADirectoryError as exc:
        raise FileAccessError(400, f"{path}: Is a directory") from exc
    except OSError as exc:
        raise FileAccessError(500, f"{path}: {exc.strerror}") from exc


def _page(spec: BackendSpec, request: web.Request) -> str:
    base = spec.base_url or "(not set)"
    return (
        "<!doctype html>\n<html><head><meta charset=utf-8><title>Simulated service</title></head><body>\n"
        "<h1>Simulated service</h1>\n"
        "<p>Served by the local cluster's node simulator for a service pod (no real image runs).</p>\n"
        "<dl>\n"
        f"<dt>Method</dt><dd id=method>{html.escape(request.method)}</dd>\n"
        f"<dt>Path</dt><dd id=path>{html.escape(request.path_qs)}</dd>\n"
        f"<dt>Pod</dt><dd id=pod>{html.escape(spec.namespace)}/{html.escape(spec.pod)}</dd>\n"
        f"<dt>GPUPORTAL_BASE_URL</dt><dd id=base-url>{html.escape(base)}</dd>\n"
        "</dl>\n</body></html>\n"
    )


class _Backend:
    """One pod's app and its listening sites."""

    def __init__(self, spec: BackendSpec) -> None:
        self.spec = spec
        self.sockets: weakref.WeakSet[web.WebSocketResponse] = weakref.WeakSet()
        app = web.Application(client_max_size=MAX_FILE_BYTES)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)

    async def start(self) -> None:
        await self.runner.setup()
        for port in self.spec.ports:
            await web.TCPSite(self.runner, self.spec.ip, port, reuse_address=True).start()

    async def stop(self) -> None:
        # Stop listening first, so the port is closed at once even while WebSockets say goodbye.
        for site in list(self.runner.sites):
            await site.stop()
        for ws in list(self.sockets):
            with contextlib.suppress(Exception):
                await ws.close(code=WSCloseCode.GOING_AWAY, message=b"pod stopped")
        await self.runner.cleanup()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self.echo(request)
        if FILES_MARKER in request.path:
            return await self.files(request, request.path.split(FILES_MARKER, 1)[1])
        body = _page(self.spec, request)
        return web.Response(text=body, content_type="text/html")

    async def echo(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(timeout=2.0)  # the close handshake: do not hold a stopping pod long
        await ws.prepare(request)
        self.sockets.add(ws)
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                await ws.send_str(message.data)
            elif message.type == WSMsgType.BINARY:
                await ws.send_bytes(message.data)
        return ws

    async def files(self, request: web.Request, path: str) -> web.Response:
        try:
            if request.method in ("PUT", "POST"):
                data = await request.read()
                await asyncio.to_thread(write_container_file, self.spec.mounts, path, data)
                return web.Response(status=201, text=f"wrote {len(data)} bytes to /{path.lstrip('/')}\n")
            if request.method in ("GET", "HEAD"):
                data = await asyncio.to_thread(read_container_file, self.spec.mounts, path)
                return web.Response(body=data, content_type="application/octet-stream")
            return web.Response(status=405, text="GET reads a file, PUT writes one\n")
        except FileAccessError as exc:
            return web.Response(status=exc.status, text=f"{exc}\n")


class ServiceBackends:
    """The running backends of one simulator, by pod UID."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.backends: dict[str, _Backend] = {}
        self.guard = threading.Lock()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="service-backends").start()

    def start(self, uid: str, spec: BackendSpec) -> str | None:
        """Start serving for a pod (a no-op if it already is). Returns an error message if a port could
        not be bound, else None."""
        with self.guard:
            if uid in self.backends:
                return None
            backend = _Backend(spec)
            self.backends[uid] = backend
        future = asyncio.run_coroutine_threadsafe(backend.start(), self.loop)
        try:
            future.result(timeout=START_TIMEOUT)
        except Exception as exc:  # OSError (address in use) or a timeout: the app "failed to listen"
            with self.guard:
                self.backends.pop(uid, None)
            asyncio.run_coroutine_threadsafe(backend.stop(), self.loop)
            return f"{spec.ip}:{','.join(map(str, spec.ports))}: {exc}"
        log.info("service backend for %s/%s on %s ports %s", spec.namespace, spec.pod, spec.ip, spec.ports)
        return None

    def stop(self, uid: str) -> None:
        """Close a pod's ports (if it has a backend); returns without waiting for open connections."""
        with self.guard:
            backend = self.backends.pop(uid, None)
        if backend is not None:
            asyncio.run_coroutine_threadsafe(backend.stop(), self.loop)
            log.info("service backend for %s/%s stopped", backend.spec.namespace, backend.spec.pod)

    def running(self) -> set[str]:
        with self.guard:
            return set(self.backends)
