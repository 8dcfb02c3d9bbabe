"""A minimal, fast client for the node simulator: raw JSON over keep-alive HTTPS, one connection per thread.

The official client deserialises every object into models, which costs more CPU than the simulator can
spare at hundreds of pods per second on two cores; here a status PATCH is one small JSON body.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit


class ApiError(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:300].decode(errors='replace')}")
        self.status = status
        self.body = body


class ApiUnavailable(Exception):
    """The API server could not be reached (stopped, restarting); callers retry later."""


class Api:
    def __init__(self, server: str, token: str, ca_file: str, *, timeout: float = 15.0) -> None:
        parts = urlsplit(server)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 443
        self.timeout = timeout
        self.ssl = ssl.create_default_context(cafile=ca_file)
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.ssl)
            self._local.conn = conn
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        """Send one request; returns the decoded JSON body. Raises ApiError on HTTP >= 400 and
        ApiUnavailable when the server cannot be reached (after one reconnect)."""
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = dict(self.headers)
        if payload is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=payload, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                # A kept-alive connection the server closed, or the server is down: reconnect once.
                self._drop()
                if attempt == 2:
                    raise ApiUnavailable(str(exc)) from exc
                continue
            if resp.status >= 400:
                raise ApiError(resp.status, data)
            return json.loads(data) if data else None
        raise AssertionError("unreachable")

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def patch(self, path: str, body: Any, *, kind: str = "merge") -> Any:
        content_type = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[kind]
        return self.request("PATCH", path, body, content_type=content_type)

    def watch(self, path: str, *, read_timeout: float = 90.0) -> http.client.HTTPResponse:
        """Open a watch stream on a connection of its own; read it line by line (one JSON event each)."""
        conn = http.client.HTTPSConnection(self.host, self.port, timeout=read_timeout, context=self.ssl)
        try:
            conn.request("GET", path, headers=self.headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ApiUnavailable(str(exc)) from exc
        if resp.status >= 400:
            data = resp.read()
            conn.close()
            raise ApiError(resp.status, data)
        return resp


def rfc3339(ts: float) -> str:
    """Kubernetes metav1.Time: whole seconds, UTC."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def rfc3339_nano(ts: float) -> str:
    whole = int(ts)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((ts - whole) * 1e9):09d}Z"


def parse_rfc3339(text: str) -> float:
    import calendar

    return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
