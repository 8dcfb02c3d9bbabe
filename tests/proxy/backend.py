"""A real backend for the proxy's tests: aiohttp on loopback, in a thread, with the routes the tests need.

Every route sits under /w/<uid>/, as an app told its base path would serve it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import threading

from aiohttp import WSMsgType, web


def noise(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


class Backend:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host  # "::1": a pod with an IPv6 address, as on a dual-stack cluster
        self.close_codes: list[int | None] = []  # codes the browser's side closed with, as the app saw them
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    # --- routes -------------------------------------------------------------------------------------
    async def echo(self, request: web.Request) -> web.Response:
        digest, size = hashlib.sha256(), 0
        async for chunk in request.content.iter_any():
            digest.update(chunk)
            size += len(chunk)
        body = {
            "method": request.method,
            "path": request.path,
            "query": request.query_string,
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "size": size,
            "sha256": digest.hexdigest(),
        }
        return web.json_response(body)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        for n in range(3):
            await response.write(f"part {n}\n".encode())
            await asyncio.sleep(0.7)
        await response.write_eof()
        return response

    async def download(self, request: web.Request) -> web.Response:
        size = int(request.query.get("bytes", "1048576"))
        return web.Response(body=b"x" * size, content_type="application/octet-stream")

    async def blob(self, request: web.Request) -> web.Response:
        """`bytes` of noise from `seed`: a body where a byte lost, doubled or moved shows in its digest."""
        size, seed = int(request.query["bytes"]), int(request.query.get("seed", "0"))
        return web.Response(body=noise(size, seed), content_type="application/octet-stream")

    async def cookies(self, request: web.Request) -> web.Response:
        response = web.json_response({"cookie": request.headers.get("Cookie", "")})
        response.headers.add("Set-Cookie", "sessionid=planted; Path=/")
        response.headers.add("Set-Cookie", "csrftoken=planted; Path=/")
        response.headers.add("Set-Cookie", "theme=dark; Path=/w/")
        return response

    async def hop(self, request: web.Request) -> web.Response:
        return web.Response(
            text="hop",
            headers={
                "Connection": "X-Backend-Secret",
                "X-Backend-Secret": "1",
                "Keep-Alive": "timeout=5",
                "X-Kept": "1",
                "Service-Worker-Allowed": "/",  # a worker over every page of the origin: never passed on
            },
        )

    async def redirect(self, request: web.Request) -> web.Response:
        uid = request.match_info["uid"]
        here = f"[{self.host}]" if ":" in self.host else self.host
        raise web.HTTPFound(f"http://{here}:{self.port}/w/{uid}/tree?x=1")  # its own address, not the Host

    async def hang(self, request: web.Request) -> web.Response:
        await asyncio.sleep(60)
        return web.Response(text="too late")

    async def ws(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(protocols=("jupyter", "other"))
        await socket.prepare(request)
        async for message in socket:
            if message.type == WSMsgType.TEXT and message.data.startswith("close:"):
                await socket.close(code=int(message.data.split(":")[1]), message=b"asked to")
                break
            if message.type == WSMsgType.TEXT:
                await socket.send_str(f"echo: {message.data}")
            elif message.type == WSMsgType.BINARY:
                await socket.send_bytes(message.data[::-1])
        self.close_codes.append(socket.close_code)
        return socket

    async def closes(self, request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(self.close_codes), content_type="application/json")

    # --- life ---------------------------------------------------------------------------------------
    def _app(self) -> web.Application:
        app = web.Application(client_max_size=0)
        app.router.add_get("/w/{uid}/stream", self.stream)
        app.router.add_get("/w/{uid}/download", self.download)
        app.router.add_get("/w/{uid}/blob", self.blob)
        app.router.add_get("/w/{uid}/cookies", self.cookies)
        app.router.add_get("/w/{uid}/hop", self.hop)
        app.router.add_get("/w/{uid}/redirect", self.redirect)
        app.router.add_get("/w/{uid}/hang", self.hang)
        app.router.add_get("/w/{uid}/ws", self.ws)
        app.router.add_get("/w/{uid}/closes", self.closes)
        app.router.add_route("*", "/w/{uid}/{tail:.*}", self.echo)
        return app

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=0.5)
        self.loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, self.host, 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._started.set()
        self.loop.run_forever()

    def start(self) -> Backend:
        self._thread.start()
        self._started.wait(10)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


class RawBackend:
    """A pod that speaks HTTP/1.1 by hand, for what a framework backend never does on purpose: bodies that
    end when it closes, bodies cut short, interim 100 answers, and kept-alive connections it drops.

    Routes (the last path segment): `until-close` (no length, the body ends at close), `cut` (announces
    1000 bytes, sends 500, closes), `cut-large` (the same at 8 MB announced, 3 MB sent), `cut-chunked` (a
    chunked body that stops without its last chunk), `continue` (a 100 Continue, then the answer), anything
    else: `hello` with a Content-Length, keeping the connection open, except that the third request on one
    connection is dropped unanswered (a keep-alive timeout striking just as a request arrives)."""

    def __init__(self) -> None:
        self.connections = 0  # accepted so far
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._server: asyncio.AbstractServer | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                served += 1
                path = head.split(b" ", 2)[1].rsplit(b"/", 1)[-1]
                if path == b"until-close":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + b"u" * 300_000)
                    await writer.drain()
                    break
                if path == b"cut":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"c" * 500)
                    await writer.drain()
                    break
                if path == b"cut-large":  # announces 8 MB, sends 3 MB, closes
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 8388608\r\n\r\n" + b"c" * 3_145_728)
                    await writer.drain()
                    break
                if path == b"cut-chunked":
                    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
                    await writer.drain()
                    break
                if path == b"continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfinal")
                elif served == 3:
                    break  # dropped unanswered
                else:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._started.set()
        self.loop.run_forever()

    def start(self) -> RawBackend:
        self._thread.start()
        self._started.wait(10)
        return self

    async def _shut(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shut(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
