"""A burst of 100 followed log streams from one person, against the real app server (gunicorn with
threaded workers, as the image and the chart run it), leaves the pages answering for everyone; and the
per-user and site-wide caps hold across processes with Redis stopped."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.test import Client

from devtools.services import RedisServer
from jobs.models import State

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PER_USER = 4
THREADS = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def gunicorn(engine, tmp_path, *, workers: int = 1, threads: int = THREADS, **env_extra: str) -> Iterator[str]:
    """The production app server on a free port, against the engine's database; yields its URL."""
    port = free_port()
    env = {
        **engine.processes.env,
        # DEBUG only so that pages render without a collectstatic step; the server is the production one.
        "DEBUG": "1",
        # Sessions made here (force_login) are signed with this process's key.
        "SECRET_KEY": settings.SECRET_KEY,
        "ALLOWED_HOSTS": "127.0.0.1",
        "LOG_FOLLOW_PAGE_SECONDS": "60",
        **env_extra,
    }
    log = open(tmp_path / "gunicorn.log", "wb")  # noqa: SIM115 - the child owns it
    argv = [sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind", f"127.0.0.1:{port}",
            "--workers", str(workers), "--worker-class", "gthread", "--threads", str(threads),
            "--timeout", "120"]  # fmt: skip
    server = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(f"{url}/login/", timeout=2).status_code == 200:
                break
        except requests.RequestException:
            pass
        assert server.poll() is None, (tmp_path / "gunicorn.log").read_text()
        assert time.monotonic() < deadline, "gunicorn did not answer within 60 s"
        time.sleep(0.3)
    try:
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()


@pytest.fixture
def app_server(engine, tmp_path):
    with gunicorn(
        engine, tmp_path, LOG_FOLLOW_MAX_PER_USER=str(PER_USER), LOG_FOLLOW_MAX_PER_PROCESS=str(THREADS // 2)
    ) as url:
        yield url


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def test_100_follows_from_one_user_leave_pages_answering_for_everyone(engine, app_server):
    workload = engine.submit(kind="service", port=8888, gpu_type="k2", gpu_count=1)
    engine.wait_for(workload, State.RUNNING, timeout=180)
    owner = {"Cookie": f"sessionid={session_cookie(engine.owner)}"}
    teammate = {"Cookie": f"sessionid={session_cookie(engine.teammate)}"}
    stream_url = f"{app_server}/workloads/{workload.uid}/logs/stream/"
    held: list[requests.Response] = []
    lock = threading.Lock()

    def follow(_: int) -> str:
        try:
            response = requests.get(stream_url, headers=owner, stream=True, timeout=(5, 20), allow_redirects=False)
        except requests.RequestException as exc:
            return f"error {exc.__class__.__name__}"
        if response.status_code != 200:
            return f"status {response.status_code}"
        first = next(response.iter_content(chunk_size=None), b"").decode()
        if "event: unavailable" in first and "log streams" in first:
            response.close()
            return "refused"
        with lock:
            held.append(response)  # kept open to the end of the test: it holds its slot
        return "following"

    try:
        with ThreadPoolExecutor(max_workers=100) as pool:
            burst = [pool.submit(follow, i) for i in range(100)]
            # While the burst is under way, the teammate's pages answer promptly.
            time.sleep(0.5)
            for path in ("/", f"/workloads/{workload.uid}/"):
                started = time.monotonic()
                page = requests.get(f"{app_server}{path}", headers=teammate, timeout=10, allow_redirects=False)
                assert page.status_code == 200, (path, page.status_code)
                # Without the caps every thread would hold a stream until its 60 s deadline and the page
                # would wait for one; with them it waits only behind the burst's quick refusals.
                assert time.monotonic() - started < 30, f"{path} took {time.monotonic() - started:.1f} s"
            outcomes = [f.result(timeout=60) for f in burst]
        assert outcomes.count("following") <= PER_USER, sorted(set(outcomes))
        assert outcomes.count("refused") >= 100 - PER_USER, sorted(set(outcomes))
        # ... and after it, too, and the owner's other pages still work.
        assert requests.get(f"{app_server}/", headers=owner, timeout=10, allow_redirects=False).status_code == 200
    finally:
        for response in held:
            response.close()


def test_the_user_and_site_caps_hold_across_processes_with_redis_stopped(engine, tmp_path):
    """Two gunicorn processes whose Redis is stopped (the one started here, then stopped: connections are
    refused). Each process alone would admit 8 streams; the person and the site are still capped."""
    redis = RedisServer()
    redis.start()
    dead = redis.url
    redis.stop()
    workload = engine.submit(kind="service", port=8888, gpu_type="k2", gpu_count=1)
    engine.wait_for(workload, State.RUNNING, timeout=180)
    people = {
        "owner": {"Cookie": f"sessionid={session_cookie(engine.owner)}"},
        "teammate": {"Cookie": f"sessionid={session_cookie(engine.teammate)}"},
    }
    held: list[requests.Response] = []
    lock = threading.Lock()
    caps = {"LOG_FOLLOW_MAX_PER_USER": "3", "LOG_FOLLOW_MAX_TOTAL": "5", "LOG_FOLLOW_MAX_PER_PROCESS": "8"}
    with gunicorn(engine, tmp_path, workers=2, threads=12, REDIS_URL=dead, CELERY_BROKER_URL=dead, **caps) as url:
        stream_url = f"{url}/workloads/{workload.uid}/logs/stream/"

        def follow(who: str) -> tuple[str, str]:
            try:
                response = requests.get(stream_url, headers=people[who], stream=True, timeout=(5, 20))
                assert response.status_code == 200, response.status_code
                first = next(response.iter_content(chunk_size=None), b"").decode()
            except requests.RequestException as exc:
                return who, f"error {exc.__class__.__name__}"
            if "event: unavailable" in first:
                response.close()
                return who, "you have" if "You have 3 log streams" in first else "site"
            with lock:
                held.append(response)  # kept open to the end: it holds its slot
            return who, "following"

        try:
            with ThreadPoolExecutor(max_workers=20) as pool:
                outcomes = list(pool.map(follow, ["owner", "teammate"] * 10))
        finally:
            for response in held:
                response.close()
    following = [who for who, outcome in outcomes if outcome == "following"]
    assert len(following) == 5, outcomes  # the site-wide cap, across both processes
    assert following.count("owner") <= 3, outcomes  # the per-user cap
    assert following.count("teammate") <= 3, outcomes
    assert {outcome for _, outcome in outcomes} <= {"following", "you have", "site"}
