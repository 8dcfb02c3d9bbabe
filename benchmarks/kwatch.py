"""The benchmarks' own eye on the API server: a watch, with admin credentials, that records when each
object was first seen. Figures count what Kubernetes actually holds, never the portal's own rows."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from typing import Any
from urllib.parse import urlencode

import urllib3


class ObjectWatch:
    """List+watch one collection (e.g. /apis/batch/v1/namespaces/ns/jobs) in a thread.

    `first_seen[name]` is the wall-clock time (time.time()) the watch first saw an object of that name;
    `uids_by_label[value]` collects the object uids carrying `label` (to count pods ever created per
    workload, including ones deleted again before the benchmark looked).
    """

    def __init__(self, api_client: Any, path: str, *, label: str | None = None, selector: str = "") -> None:
        self.api_client = api_client
        self.path = path
        self.label = label
        self.selector = selector
        self.first_seen: dict[str, float] = {}
        self.uids_by_label: dict[str, set[str]] = defaultdict(set)
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"watch {path}", daemon=True)
        self.thread.start()
        if not self.ready.wait(60):
            raise TimeoutError(f"the watch of {path} did not start")
        if self.error:
            raise RuntimeError(f"the watch of {path} failed: {self.error}")

    def _get(self, params: dict[str, str], read_timeout: float):
        configuration = self.api_client.configuration
        headers = {"Accept": "application/json"}
        token = configuration.get_api_key_with_prefix("authorization") or configuration.get_api_key_with_prefix(
            "BearerToken"
        )
        if token:
            headers["Authorization"] = token
        if self.selector:
            params = {**params, "labelSelector": self.selector}
        response = self.api_client.rest_client.pool_manager.request(
            "GET",
            f"{configuration.host}{self.path}?{urlencode(params)}",
            headers=headers,
            preload_content=False,
            timeout=urllib3.Timeout(connect=10, read=read_timeout),
            retries=False,
        )
        if response.status >= 400:
            raise RuntimeError(f"GET {self.path}: HTTP {response.status} {response.read()[:200]!r}")
        return response

    def _record(self, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        with self.lock:
            self.first_seen.setdefault(meta.get("name", ""), now)
            if self.label:
                value = (meta.get("labels") or {}).get(self.label)
                if value:
                    self.uids_by_label[value].add(meta.get("uid", ""))

    def _run(self) -> None:
        try:
            listing = json.loads(self._get({}, 60).read())
            now = time.time()
            for item in listing.get("items") or []:
                self._record(item, now)
            version = listing["metadata"]["resourceVersion"]
            self.ready.set()
            while not self.stop_event.is_set():
                response = self._get(
                    {"watch": "true", "resourceVersion": version, "timeoutSeconds": "600",
                     "allowWatchBookmarks": "true"},
                    read_timeout=620,
                )  # fmt: skip
                buffer = b""
                for chunk in response.stream(65536, decode_content=False):
                    now = time.time()
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            raise RuntimeError(f"watch of {self.path} ended: {obj.get('message')}")
                        version = (obj.get("metadata") or {}).get("resourceVersion", version)
                        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                            self._record(obj, now)
                    if self.stop_event.is_set():
                        # The watch's chunked body is still open: close its socket. Handing it back to the
                        # shared pool would let the next request read the stream's leftovers as a status
                        # line (seen as BadStatusLine('1115\r\n') in a following round's list).
                        response.close()
                        return
        except BaseException as exc:  # reported by whoever reads the watch
            self.error = exc
            self.ready.set()

    def count(self) -> int:
        with self.lock:
            return len(self.first_seen)

    def wait_for(self, n: int, timeout: float, what: str) -> float:
        """Wait until n objects were seen; returns the time the n-th was first seen."""
        deadline = time.monotonic() + timeout
        while self.count() < n:
            if self.error:
                raise RuntimeError(f"the watch of {self.path} failed: {self.error}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: the API server holds {self.count()} of {n} after {timeout:.0f} s")
            time.sleep(0.02)
        with self.lock:
            return sorted(self.first_seen.values())[n - 1]

    def stop(self) -> None:
        self.stop_event.set()
