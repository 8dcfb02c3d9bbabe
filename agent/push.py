"""Pushing reports to the portal: a bounded buffer, drop-oldest, retry with backoff.

Reports are encoded to compact JSON when they are queued, so a buffer of an hour of reports costs a
few megabytes at most. The buffer is bounded: when it is full the oldest report is dropped and
counted, because the newest readings are what the portal's pages and policies need. Sending happens
on its own thread so a slow or unreachable portal never delays sampling.

What a response means:
    2xx                         accepted; the next buffered report follows at once
    401, 403                    the token is wrong; kept and retried with backoff (a rotated token
                                file is re-read at every attempt)
    408, 429, 5xx, no answer    the portal is down or busy; kept and retried with backoff
    other 4xx                   the portal refuses this report for good (e.g. schema); dropped and
                                counted as rejected so one bad report cannot block the queue
The token goes into the Authorization header and nowhere else: not into logs, not into errors.
"""

from __future__ import annotations

import collections
import enum
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

import agent
from agent.report import Report
from agent.stats import AgentStats

log = logging.getLogger(__name__)

REPORTS_PATH = "/api/v1/agent/reports"
_RETRY_STATUSES = {401, 403, 408, 429}


class Outcome(enum.Enum):
    SENT = "sent"
    REJECTED = "rejected"
    RETRY = "retry"


def encode_report(report: Report) -> bytes:
    return json.dumps(report.to_dict(), separators=(",", ":")).encode()


class Pusher:
    def __init__(
        self,
        portal_url: str,
        token: Callable[[], str | None],
        stats: AgentStats,
        *,
        max_reports: int,
        timeout_seconds: float = 5.0,
        backoff_initial_seconds: float = 1.0,
        backoff_max_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_reports < 1:
            raise ValueError("max_reports must be at least 1")
        parts = urllib.parse.urlsplit(portal_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("the portal URL must be http(s)://host[:port][/prefix]")
        self.url = portal_url.rstrip("/") + REPORTS_PATH
        # For logs: never the user:password@ part, should someone put credentials in the URL.
        self.url_for_logs = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        self.url_for_logs = self.url_for_logs.rstrip("/") + REPORTS_PATH
        self._token = token
        self._stats = stats
        self._max_reports = max_reports
        self._timeout = timeout_seconds
        self._backoff_initial = backoff_initial_seconds
        self._backoff_max = backoff_max_seconds
        self._clock = clock
        self._buffer: collections.deque[bytes] = collections.deque()
        self._lock = threading.Condition()
        self._backoff = 0.0
        self._next_attempt = 0.0
        self._failing = False
        self._stopping = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._buffer)

    def enqueue(self, report: Report) -> None:
        body = encode_report(report)
        with self._lock:
            dropped = 0
            while len(self._buffer) >= self._max_reports:
                self._buffer.popleft()
                dropped += 1
            self._buffer.append(body)
            self._stats.set(buffer_length=len(self._buffer))
            self._lock.notify_all()
        if dropped:
            self._stats.add(reports_dropped_total=dropped)

    def due(self) -> bool:
        """Whether the backoff after the last failure has passed."""
        return self._clock() >= self._next_attempt

    def flush(self) -> bool:
        """Send buffered reports oldest first until one fails; True when the buffer is empty."""
        while True:
            with self._lock:
                if not self._buffer:
                    return True
                body = self._buffer[0]
            outcome = self._send(body)
            if outcome is Outcome.RETRY:
                return False
            with self._lock:
                # Identity, not equality: enqueue may have dropped this very report while it was in flight.
                if self._buffer and self._buffer[0] is body:
                    self._buffer.popleft()
                self._stats.set(buffer_length=len(self._buffer))
            if outcome is Outcome.SENT:
                self._stats.add(reports_sent_total=1)
            else:
                self._stats.add(reports_rejected_total=1)

    def run(self, stop: threading.Event) -> None:
        """The pusher thread: send whenever there is something to send and the backoff allows."""
        while not stop.is_set() and not self._stopping:
            with self._lock:
                if not self._buffer:
                    self._lock.wait(timeout=1.0)
                    continue
            wait = self._next_attempt - self._clock()
            if wait > 0:
                stop.wait(min(wait, 1.0))
                continue
            try:
                self.flush()
            except Exception:
                # Nothing in a push may end the thread; the next attempt backs off as after a failure.
                log.exception("unexpected error while pushing reports")
                self._failed("unexpected error")

    def wake(self) -> None:
        """Stop waiting (called at shutdown, after setting the stop event)."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()

    def _send(self, body: bytes) -> Outcome:
        try:
            token = self._token()
        except (OSError, ValueError) as exc:
            # Say which kind of problem without echoing anything read from the file.
            self._failed(f"cannot read the agent token: {type(exc).__name__}")
            return Outcome.RETRY
        headers = {"Content-Type": "application/json", "User-Agent": f"gpuportal-agent/{agent.__version__}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        # S310 (file:// and custom schemes): PORTAL_URL is checked to be http(s) when it is read.
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:  # noqa: S310
                response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
            detail = exc.read(300).decode("utf-8", "replace")
            exc.close()
            if status in _RETRY_STATUSES or status >= 500:
                reason = "the portal refused the agent's token" if status in (401, 403) else "portal busy"
                self._failed(f"HTTP {status}: {reason}")
                return Outcome.RETRY
            log.warning("portal rejected a report (HTTP %d), dropping it: %s", status, detail)
            self._succeeded()
            return Outcome.REJECTED
        except (OSError, ValueError) as exc:  # URLError, timeouts and resets are all OSErrors
            self._failed(str(getattr(exc, "reason", exc)))
            return Outcome.RETRY
        if 200 <= status < 300:
            self._succeeded()
            return Outcome.SENT
        self._failed(f"HTTP {status}")
        return Outcome.RETRY

    def _failed(self, reason: str) -> None:
        self._stats.add(push_failures_total=1)
        self._backoff = self._backoff_initial if self._backoff == 0 else min(self._backoff * 2, self._backoff_max)
        # Jitter spreads the retries of a whole cluster of agents after a portal outage.
        delay = self._backoff * random.uniform(0.8, 1.2)
        self._next_attempt = self._clock() + delay
        with self._lock:
            buffered = len(self._buffer)
        if not self._failing or self._backoff >= self._backoff_max:
            log.warning(
                "cannot push to %s (%s); %d reports buffered, next try in %.1fs",
                self.url_for_logs,
                reason,
                buffered,
                delay,
            )
        self._failing = True

    def _succeeded(self) -> None:
        if self._failing:
            log.info("pushing to %s again", self.url_for_logs)
        self._failing = False
        self._backoff = 0.0
        self._next_attempt = 0.0
