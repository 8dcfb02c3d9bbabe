"""Pushing to a real local HTTP server: buffering while the portal is down, drop-oldest, backoff."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.config import AgentConfig
from agent.push import Pusher
from agent.readings import RawSample
from agent.report import Report, build_report
from agent.stats import AgentStats
from tests.agent.conftest import FakePortal
from tests.agent.fakes import p100

TOKEN = "s3cret-agent-token"
T0 = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)


class Clock:
    """A monotonic clock the test moves by hand, so backoff is checked without sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _report(n: int) -> Report:
    raw = RawSample("535.104.05", 12020, gpus=(p100(0),))
    return build_report(
        raw,
        node="gpu-node-1",
        simulated=False,
        timestamp=T0 + timedelta(seconds=5 * n),
        interval_seconds=5,
        agent_version="0.1.0",
    )


def _pusher(portal: FakePortal, stats: AgentStats, clock: Clock, max_reports: int = 3) -> Pusher:
    return Pusher(portal.url, lambda: TOKEN, stats, max_reports=max_reports, timeout_seconds=2, clock=clock)


def test_portal_down_then_up_buffers_drops_oldest_and_delivers_in_order(down_portal: FakePortal, caplog):
    caplog.set_level(logging.DEBUG)
    stats, clock = AgentStats(), Clock()
    pusher = _pusher(down_portal, stats, clock)
    for n in range(5):
        pusher.enqueue(_report(n))

    assert pusher.flush() is False  # nothing listens on the port
    snapshot = stats.snapshot()
    assert snapshot.reports_dropped_total == 2  # bounded at 3: reports 0 and 1 went first
    assert snapshot.buffer_length == 3
    assert snapshot.push_failures_total == 1
    assert snapshot.reports_sent_total == 0
    assert not pusher.due()  # backing off

    down_portal.start()
    clock.now += 5
    assert pusher.due()
    assert pusher.flush() is True

    received = down_portal.received
    assert [Report.from_dict(r.body).timestamp for r in received] == [T0 + timedelta(seconds=5 * n) for n in (2, 3, 4)]
    assert {r.path for r in received} == {"/api/v1/agent/reports"}
    assert {r.authorization for r in received} == {f"Bearer {TOKEN}"}
    assert {r.content_type for r in received} == {"application/json"}
    snapshot = stats.snapshot()
    assert snapshot.reports_sent_total == 3
    assert snapshot.buffer_length == 0
    assert TOKEN not in caplog.text


def test_backoff_doubles_up_to_the_maximum_and_resets_on_success(down_portal: FakePortal):
    stats, clock = AgentStats(), Clock()
    pusher = Pusher(down_portal.url, lambda: TOKEN, stats, max_reports=10, backoff_max_seconds=8, clock=clock)
    pusher.enqueue(_report(0))
    for expected in (1, 2, 4, 8, 8):
        start = clock.now
        assert pusher.flush() is False
        clock.now = start + expected * 0.79  # jitter is +-20 %
        assert not pusher.due()
        clock.now = start + expected * 1.21
        assert pusher.due()
    down_portal.start()
    assert pusher.flush() is True
    assert pusher.due()  # no backoff left after a success
    assert stats.snapshot().push_failures_total == 5


@pytest.mark.parametrize("status", [401, 403, 429, 500, 503])
def test_auth_and_server_errors_keep_the_report_for_a_retry(portal: FakePortal, status: int, caplog):
    stats, clock = AgentStats(), Clock()
    pusher = _pusher(portal, stats, clock)
    portal.status = status
    pusher.enqueue(_report(0))
    assert pusher.flush() is False
    assert len(pusher) == 1
    assert stats.snapshot().reports_rejected_total == 0
    assert f"HTTP {status}" in caplog.text
    assert TOKEN not in caplog.text

    portal.status = 201
    clock.now += 100
    assert pusher.flush() is True
    assert len(portal.received) == 1


def test_a_report_the_portal_refuses_for_good_is_dropped_not_retried_forever(portal: FakePortal, caplog):
    stats, clock = AgentStats(), Clock()
    pusher = _pusher(portal, stats, clock)
    portal.status = 400
    pusher.enqueue(_report(0))
    pusher.enqueue(_report(1))
    assert pusher.flush() is True
    snapshot = stats.snapshot()
    assert snapshot.reports_rejected_total == 2
    assert snapshot.reports_sent_total == 0
    assert snapshot.buffer_length == 0
    assert "HTTP 400" in caplog.text


def test_a_rotated_token_file_is_read_at_each_push(portal: FakePortal, tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    config = AgentConfig.from_env({"NODE_NAME": "n1", "PORTAL_URL": portal.url, "AGENT_TOKEN_FILE": str(token_file)})
    pusher = Pusher(portal.url, config.token, AgentStats(), max_reports=5)
    pusher.enqueue(_report(0))
    pusher.flush()
    token_file.write_text("second-token\n")
    pusher.enqueue(_report(1))
    pusher.flush()
    assert [r.authorization for r in portal.received] == ["Bearer first-token", "Bearer second-token"]


def test_unreadable_token_file_is_a_retry_not_a_crash(portal: FakePortal, tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text("t")
    config = AgentConfig.from_env({"NODE_NAME": "n1", "PORTAL_URL": portal.url, "AGENT_TOKEN_FILE": str(token_file)})
    token_file.unlink()
    stats = AgentStats()
    pusher = Pusher(portal.url, config.token, stats, max_reports=5)
    pusher.enqueue(_report(0))
    assert pusher.flush() is False
    assert stats.snapshot().push_failures_total == 1
    assert portal.received == []


def test_pusher_thread_delivers_once_the_portal_comes_up(down_portal: FakePortal):
    stats = AgentStats()
    pusher = Pusher(
        down_portal.url,
        lambda: TOKEN,
        stats,
        max_reports=100,
        backoff_initial_seconds=0.05,
        backoff_max_seconds=0.2,
    )
    stop = threading.Event()
    thread = threading.Thread(target=pusher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        for n in range(4):
            pusher.enqueue(_report(n))
        deadline = time.monotonic() + 5
        while stats.snapshot().push_failures_total == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stats.snapshot().push_failures_total >= 1
        down_portal.start()
        while len(down_portal.received) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(down_portal.received) == 4
    finally:
        stop.set()
        pusher.wake()
        thread.join(timeout=5)
    assert not thread.is_alive()
    assert stats.snapshot().buffer_length == 0


def test_credentials_in_the_portal_url_stay_out_of_the_logs(down_portal: FakePortal, caplog):
    url = down_portal.url.replace("http://", "http://agent:url-password@")
    pusher = Pusher(url, lambda: TOKEN, AgentStats(), max_reports=1)
    pusher.enqueue(_report(0))
    assert pusher.flush() is False
    assert "cannot push to" in caplog.text
    assert "url-password" not in caplog.text
    assert TOKEN not in caplog.text


def test_a_non_http_portal_url_is_refused():
    with pytest.raises(ValueError, match="http"):
        Pusher("file:///etc/passwd", lambda: TOKEN, AgentStats(), max_reports=1)
