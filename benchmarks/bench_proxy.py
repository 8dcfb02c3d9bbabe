"""The service proxy (/w/<uid>/): what it adds to a request, how much of a download's speed it keeps, and
how many idle WebSockets one proxy process holds.

Three processes on loopback: a backend (aiohttp: a small page, a large download, a WebSocket echo), the
proxy (the real ServiceProxy under uvicorn, signed-in through the portal's real session and policy checks
against the run's database; only the pod's address is pinned to the backend instead of read from
Kubernetes), and this client. Direct and proxied requests alternate, so load on the machine hits both.

Lines printed:
  proxy_overhead_p95_ms     p95 of proxied minus p95 of direct latency, small GET, keep-alive (goal <= 5)
  proxy_latency_p95_ms      p95 latency through the proxy (context for the line above)
  direct_latency_p95_ms     p95 latency straight to the backend
  proxy_throughput_ratio    MB/s of a 256 MB download through the proxy / straight to the backend, the median
                            over 7 rounds of each round's pair (goal >= 0.8)
  proxy_throughput_cpu_ratio  CPU seconds per GB direct (client + backend) / proxied (client + backend +
                            proxy): the ratio when the CPU is what limits (a `#` line has the parts)
  proxy_bare_relay_ratio    the same download through the barest relay there is (a fourth process: per
                            connection, two threads moving bytes between the sockets with splice(2); no
                            HTTP, no sign-in, no Python per byte) / straight to the backend, in the same
                            rounds: what one more process in the path leaves on this machine
  proxy_vs_bare_relay       MB/s through the proxy / through the bare relay, the median of the rounds'
                            pairs: the part of the gap the proxy's own code is responsible for
  proxy_ws_concurrent       WebSockets opened through one proxy process, left idle, that all still echo
                            afterwards (WS_TARGET tried; goal >= 1000); 0 if any one of them failed
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

FIGURES = [
    "proxy_overhead_p95_ms",
    "proxy_latency_p95_ms",
    "direct_latency_p95_ms",
    "proxy_throughput_ratio",
    "proxy_throughput_cpu_ratio",
    "proxy_bare_relay_ratio",
    "proxy_vs_bare_relay",
    "proxy_ws_concurrent",
]
SMALL_REQUESTS = 600  # per side
BLOB_MB = 256  # at loopback speeds (1-4 GB/s) a smaller body is over before TCP's windows have grown
THROUGHPUT_ROUNDS = 7  # per side, alternating: each round's pair gives one ratio
WS_TARGET = 1000
UID = "b0c0ffee00000001"  # hex, like every workload uid (the proxy routes only those)


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port} after {timeout:.0f} s")


# --- the two helper processes ---------------------------------------------------------------------------
def serve_backend(port: int) -> None:
    from aiohttp import WSMsgType, web

    blob = os.urandom(256 * 1024)

    async def small(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def large(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = BLOB_MB * 1024 * 1024
        await response.prepare(request)
        for _ in range(BLOB_MB * 4):
            await response.write(blob)
        return response

    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=None)
        await ws.prepare(request)
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                await ws.send_str(message.data)
        return ws

    app = web.Application()
    app.router.add_get("/w/{uid}/small", small)
    app.router.add_get("/w/{uid}/blob", large)
    app.router.add_get("/w/{uid}/ws", echo)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, backlog=4096)


def serve_proxy(port: int, backend_port: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    import uvicorn

    from proxy.app import ServiceProxy

    app = ServiceProxy(endpoints=lambda namespace, service: ("127.0.0.1", backend_port))
    uvicorn.run(
        app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio",
        ws_per_message_deflate=False, lifespan="on", backlog=4096,
    )  # fmt: skip


def serve_relay(port: int, backend_port: int) -> None:
    """The barest relay: each connection accepted is joined to a new one to the backend by two threads
    that splice(2) bytes across through a pipe, blocking; the kernel does all the waiting."""
    import threading

    def pump(source: socket.socket, target: socket.socket) -> None:
        read_end, write_end = os.pipe()
        with contextlib.suppress(OSError):
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1 << 20)
        try:
            while moved := os.splice(source.fileno(), write_end, 1 << 20):
                while moved:
                    moved -= os.splice(read_end, target.fileno(), moved)
        except OSError:
            pass
        finally:
            os.close(read_end)
            os.close(write_end)
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)

    def join(browser: socket.socket) -> None:
        with browser, socket.create_connection(("127.0.0.1", backend_port)) as pod:
            upstream = threading.Thread(target=pump, args=(browser, pod), daemon=True)
            upstream.start()
            pump(pod, browser)
            upstream.join()

    with socket.create_server(("127.0.0.1", port), backlog=128) as server:
        while True:
            browser, _ = server.accept()
            threading.Thread(target=join, args=(browser,), daemon=True).start()


# --- the run ---------------------------------------------------------------------------------------------
def _prepare_service() -> str:
    """A running service owned by a signed-in researcher; returns the session cookie's value."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from identity.models import Membership
    from jobs.models import GpuType, Kind, State, Team, Workload

    user, _ = get_user_model().objects.get_or_create(username="bench-proxy")
    team, _ = Team.objects.get_or_create(slug="bench-proxy", defaults={"name": "Bench proxy"})
    Membership.objects.get_or_create(user=user, team=team)
    gpu_type, _ = GpuType.objects.get_or_create(
        slug="bench-proxy", defaults={"display_name": "Bench", "node_label_value": "bench-proxy"}
    )
    Workload.objects.filter(uid=UID).delete()
    Workload.objects.create(
        uid=UID, team=team, owner=user, name="bench-notebook", kind=Kind.SERVICE, image="docker.io/x:1",
        gpu_type=gpu_type, gpu_count=1, port=8888, time_limit_seconds=3600, state=State.RUNNING,
        namespace="gpuportal-bench", k8s_name="bench-notebook",
    )  # fmt: skip
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def _cleanup() -> None:
    from jobs.models import Workload

    Workload.objects.filter(uid=UID).delete()


async def _latencies(proxy: str, direct: str, cookies: dict) -> tuple[list[float], list[float]]:
    import aiohttp

    through, straight = [], []
    async with (
        aiohttp.ClientSession(cookies=cookies) as via,
        aiohttp.ClientSession() as plain,
    ):
        for _ in range(20):  # warm both connections and the proxy's caches
            await (await via.get(f"{proxy}/w/{UID}/small")).read()
            await (await plain.get(f"{direct}/w/{UID}/small")).read()
        for _ in range(SMALL_REQUESTS):
            for session, url, sink in ((via, proxy, through), (plain, direct, straight)):
                started = time.perf_counter()
                async with session.get(f"{url}/w/{UID}/small") as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{url}: HTTP {response.status}")
                sink.append((time.perf_counter() - started) * 1000)
    return through, straight


async def _throughput(url: str, cookies: dict) -> float:
    import aiohttp

    async with aiohttp.ClientSession(cookies=cookies, auto_decompress=False) as session:
        started = time.perf_counter()
        size = 0
        async with session.get(f"{url}/w/{UID}/blob") as response:
            async for chunk in response.content.iter_chunked(1 << 20):
                size += len(chunk)
        elapsed = time.perf_counter() - started
    if size != BLOB_MB * 1024 * 1024:
        raise RuntimeError(f"{url}: downloaded {size} bytes, expected {BLOB_MB} MB")
    return size / elapsed / 1e6


async def _websockets(proxy: str, session_id: str) -> int:
    import aiohttp

    url = proxy.replace("http://", "ws://") + f"/w/{UID}/ws"
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, cookies={"sessionid": session_id}) as session:
        sockets = []
        try:
            for batch in range(0, WS_TARGET, 100):  # in batches: a burst of 1000 handshakes is not "idle"
                opened = await asyncio.gather(
                    *(
                        session.ws_connect(url, heartbeat=None, autoping=True)
                        for _ in range(batch, min(batch + 100, WS_TARGET))
                    ),
                    return_exceptions=True,
                )
                failures = [o for o in opened if isinstance(o, BaseException)]
                sockets += [o for o in opened if not isinstance(o, BaseException)]
                if failures:
                    print(f"# proxy_ws: {len(failures)} handshakes failed: {failures[0]!r}", flush=True)
                    return 0
            await asyncio.sleep(5)  # idle, all of them open at once

            async def echoes(n: int, ws: aiohttp.ClientWebSocketResponse) -> bool:
                await ws.send_str(f"still there {n}")
                message = await asyncio.wait_for(ws.receive(), timeout=30)
                return message.type == aiohttp.WSMsgType.TEXT and message.data == f"still there {n}"

            results = await asyncio.gather(*(echoes(n, ws) for n, ws in enumerate(sockets)), return_exceptions=True)
            alive = sum(1 for r in results if r is True)
            return alive if alive == WS_TARGET else 0
        finally:
            await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)


def _cpu_seconds(children: list[subprocess.Popen], since: dict[str, float] | None = None) -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process (the client) and the children (backend,
    proxy, bare relay); with `since`, the difference from that earlier reading."""
    tick = os.sysconf("SC_CLK_TCK")
    now = {"client": time.process_time()}
    for name, child in zip(("backend", "proxy", "relay"), children, strict=True):
        with open(f"/proc/{child.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        now[name] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return {k: v - since[k] for k, v in now.items()} if since else now


def _cpu_per_gb(cpu: dict[str, dict[str, float]]) -> tuple[dict[str, dict[str, int]], float]:
    """CPU milliseconds per GB moved, per side and process; and the ratio the CPU alone allows: direct
    costs client + backend per GB, proxied costs client + backend + proxy. When the processes must share
    the cores (a loaded or small machine), MB/s follows that total."""
    gigabytes = THROUGHPUT_ROUNDS * BLOB_MB / 1024
    per_gb = {side: {k: round(v / gigabytes * 1000) for k, v in used.items()} for side, used in cpu.items()}
    direct_total = per_gb["direct"]["client"] + per_gb["direct"]["backend"]
    proxy_total = per_gb["proxy"]["client"] + per_gb["proxy"]["backend"] + per_gb["proxy"]["proxy"]
    return per_gb, (direct_total / proxy_total if proxy_total else 0.0)


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[94]


def run(ctx: Any) -> Iterator[tuple[str, float | int]]:
    ctx.django()
    _raise_fd_limit()
    session_id = _prepare_service()
    backend_port, proxy_port, relay_port = _free_port(), _free_port(), _free_port()
    env = {**os.environ, "PROXY_ACTIVITY_WRITE_SECONDS": "60", "LOG_LEVEL": "WARNING"}
    me = [sys.executable, "-m", "benchmarks.bench_proxy"]
    children = [
        subprocess.Popen([*me, "--backend", str(backend_port)], env=env),
        subprocess.Popen([*me, "--proxy", str(proxy_port), str(backend_port)], env=env),
        subprocess.Popen([*me, "--relay", str(relay_port), str(backend_port)], env=env),
    ]
    try:
        for port in (backend_port, proxy_port, relay_port):
            _wait_port(port)
        proxy, direct = f"http://127.0.0.1:{proxy_port}", f"http://127.0.0.1:{backend_port}"
        relay = f"http://127.0.0.1:{relay_port}"
        cookies = {"sessionid": session_id}
        through, straight = asyncio.run(_latencies(proxy, direct, cookies))
        yield "proxy_overhead_p95_ms", round(_p95(through) - _p95(straight), 3)
        yield "proxy_latency_p95_ms", round(_p95(through), 3)
        yield "direct_latency_p95_ms", round(_p95(straight), 3)
        speeds: dict[str, list[float]] = {"proxy": [], "direct": [], "relay": []}
        cpu = {side: {"client": 0.0, "backend": 0.0, "proxy": 0.0, "relay": 0.0} for side in speeds}
        sides = [("direct", direct, {}), ("proxy", proxy, cookies), ("relay", relay, {})]
        for turn in range(THROUGHPUT_ROUNDS):
            for side, url, jar in sides[turn % 3 :] + sides[: turn % 3]:  # each side goes first in turn
                before = _cpu_seconds(children)
                speeds[side].append(asyncio.run(_throughput(url, jar)))
                for process, spent in _cpu_seconds(children, since=before).items():
                    cpu[side][process] += spent
        rounded = {side: [round(v) for v in values] for side, values in speeds.items()}
        print(
            f"# proxy_throughput MB/s per round: proxy {rounded['proxy']}, direct {rounded['direct']},"
            f" bare relay {rounded['relay']}",
            flush=True,
        )
        print(f"# proxy_throughput best of each side: {max(speeds['proxy']) / max(speeds['direct']):.3f}", flush=True)
        per_gb, bound = _cpu_per_gb(cpu)
        print(
            f"# proxy_throughput CPU ms/GB: direct {per_gb['direct']}, proxy {per_gb['proxy']},"
            f" bare relay {per_gb['relay']}",
            flush=True,
        )
        pairs = [p / d for p, d in zip(speeds["proxy"], speeds["direct"], strict=True)]
        yield "proxy_throughput_ratio", round(statistics.median(pairs), 3)
        yield "proxy_throughput_cpu_ratio", round(bound, 3)
        bare = [r / d for r, d in zip(speeds["relay"], speeds["direct"], strict=True)]
        yield "proxy_bare_relay_ratio", round(statistics.median(bare), 3)
        versus = [p / r for p, r in zip(speeds["proxy"], speeds["relay"], strict=True)]
        yield "proxy_vs_bare_relay", round(statistics.median(versus), 3)
        yield "proxy_ws_concurrent", asyncio.run(_websockets(proxy, session_id))
    finally:
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        _cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_proxy")
    parser.add_argument("--backend", type=int, metavar="PORT")
    parser.add_argument("--proxy", type=int, nargs=2, metavar=("PORT", "BACKEND_PORT"))
    parser.add_argument("--relay", type=int, nargs=2, metavar=("PORT", "BACKEND_PORT"))
    options = parser.parse_args()
    _raise_fd_limit()
    if options.backend:
        serve_backend(options.backend)
    elif options.proxy:
        serve_proxy(*options.proxy)
    elif options.relay:
        serve_relay(*options.relay)
    else:
        parser.error("the benchmark runs through `python -m benchmarks proxy`")


if __name__ == "__main__":
    main()
