"""A kept database connection is checked before each request and each task without a round trip
(portal/postgresql/base.py), and one whose backend PostgreSQL ended in between is still replaced: the
next request and the next task succeed. Real PostgreSQL; the backend is ended with `pg_terminate_backend`
from another session, as a restart or a failover ends it (the server says goodbye and closes the socket)."""

from __future__ import annotations

import io
import threading
import time
from wsgiref.util import setup_testing_defaults

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections, connection, connections

from portal.celery import connections_as_between_requests

pytestmark = pytest.mark.django_db(transaction=True)  # each request and task on a connection of its own


@pytest.fixture(autouse=True)
def fresh_connection():
    """A connection opened by the test itself: the one that made the test database may be older than
    CONN_MAX_AGE by now (a slow machine), and would be closed as too old whatever its health."""
    connection.close()


def in_another_session(sql: str, params: list) -> list[tuple]:
    """Run one statement on a connection of its own (a thread's) and return its rows."""
    rows: list[tuple] = []

    def run() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                rows.extend(cursor.fetchall())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return rows


def terminate(pid: int) -> None:
    assert in_another_session("SELECT pg_terminate_backend(%s)", [pid]) == [(True,)]
    deadline = time.monotonic() + 10
    while in_another_session("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]):
        assert time.monotonic() < deadline, "the backend did not end"
        time.sleep(0.05)


def last_statement_of(pid: int) -> str:
    (row,) = in_another_session("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid])
    return row[0]


def get(path: str) -> tuple[str, bytes]:
    """One request through Django's WSGI handler, as gunicorn hands it over (request_started and
    request_finished sent: the connection is checked as between a web process's requests)."""
    environ: dict = {"PATH_INFO": path, "HTTP_HOST": "testserver", "wsgi.input": io.BytesIO()}
    setup_testing_defaults(environ)
    answered: list[str] = []
    body = b"".join(WSGIHandler()(environ, lambda status, headers, *rest: answered.append(status)))
    return answered[0], body


def test_a_healthy_kept_connection_is_checked_without_a_round_trip():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 'the last statement before the check'")
    pid = connection.connection.info.backend_pid
    close_old_connections()  # as at a request's start
    with connection.cursor():  # the health check runs as the request's first cursor is made
        pass
    assert connection.connection.info.backend_pid == pid  # kept
    assert last_statement_of(pid) == "SELECT 'the last statement before the check'"  # no SELECT 1 was sent


def test_a_backend_ended_between_two_requests_is_replaced_and_the_next_request_succeeds():
    assert get("/healthz")[0].startswith("200")
    pid = connection.connection.info.backend_pid
    terminate(pid)
    status, body = get("/healthz")
    assert status.startswith("200"), body
    assert connection.connection.info.backend_pid != pid


def test_a_backend_ended_between_two_tasks_is_replaced_and_the_next_task_succeeds():
    from django.contrib.auth import get_user_model

    connections_as_between_requests()  # task_prerun
    get_user_model().objects.count()
    connections_as_between_requests()  # task_postrun: a healthy connection is kept for the next task
    pid = connection.connection.info.backend_pid
    terminate(pid)
    connections_as_between_requests()  # the next task's prerun
    assert get_user_model().objects.count() == 0
    assert connection.connection.info.backend_pid != pid
