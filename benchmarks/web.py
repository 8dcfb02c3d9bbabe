"""The portal's web process for benchmarks that go through HTTP, as the chart runs it (gunicorn, gthread)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

# How the chart runs the web process (helm/templates/web.yaml): gunicorn, gthread workers and threads.
GUNICORN_WORKERS = 3
GUNICORN_THREADS = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def gunicorn(ctx, *, env: dict[str, str] | None = None, workers: int = GUNICORN_WORKERS) -> Iterator[str]:
    """The portal's web process on the bench database, started as the chart starts it; yields its URL and
    stops it afterwards. Its log is `gunicorn.log` in the run's directory. API throttles are lifted: a
    benchmark's clients submit far faster than any rate a site would allow one token. `workers`: gunicorn
    processes (the chart's count unless a benchmark weighs replicas)."""
    from django.db import connection

    s = connection.settings_dict
    port = _free_port()
    full_env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{s['USER'] or 'postgres'}:{s['PASSWORD'] or ''}@{s['HOST']}:{s['PORT']}/{s['NAME']}",
        "DEBUG": "0",
        "SECRET_KEY": "bench-secret-key",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "API_THROTTLE_RATE": "1000000/min",
        "API_USER_THROTTLE_RATE": "1000000/min",
        **(env or {}),
    }
    log = open(ctx.work_dir / "gunicorn.log", "ab")  # noqa: SIM115 - the child owns it
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind", f"127.0.0.1:{port}",
         "--workers", str(workers), "--worker-class", "gthread", "--threads", str(GUNICORN_THREADS),
         "--worker-tmp-dir", "/dev/shm", "--log-level", "warning"],
        env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"gunicorn did not start (see {ctx.work_dir / 'gunicorn.log'})") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Api:
    """A team's scripts calling the portal's REST API: kept-alive HTTP connections (one per client thread
    at most, `clients` of them) through urllib3, the client library under `requests` and the Kubernetes
    client, without `requests`' own per-call work: both sides of a comparison pay the same for their
    clients, and the machine's cores go to what is measured."""

    def __init__(self, base_url: str, clients: int) -> None:
        import urllib3

        self.pool = urllib3.PoolManager(maxsize=clients, block=True, retries=False).connection_from_url(base_url)

    def submit(self, token: str, spec: dict, key: str) -> tuple[int, bytes]:
        """POST /api/v1/workloads/ with an Idempotency-Key, as the `gpuportal` CLI sends it."""
        response = self.pool.urlopen(
            "POST",
            "/api/v1/workloads/",
            body=json.dumps(spec).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Idempotency-Key": key},
            timeout=60,
        )
        return response.status, response.data

    def submit_many(self, token: str, team_slug: str, specs: list[dict], key: str) -> tuple[int, bytes]:
        """POST /api/v1/workloads/batch/ with an Idempotency-Key, as `gpuportal submit --array` sends it."""
        response = self.pool.urlopen(
            "POST",
            "/api/v1/workloads/batch/",
            body=json.dumps({"team": team_slug, "workloads": specs}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Idempotency-Key": key},
            timeout=120,
        )
        return response.status, response.data
