"""Django's PostgreSQL backend, whose health check of a kept connection asks the socket, not the server.

With CONN_HEALTH_CHECKS Django checks a kept connection before the first query of every request and every
Celery task with a `SELECT 1`: a round trip and a statement on the one primary per request and per task
(about two per workload, issue 41). What that round trip finds out, the socket says already: when
PostgreSQL ends a backend (a restart, a failover that closes connections, `pg_terminate_backend`, an idle
timeout) it sends the client a FATAL message and closes the connection, so the idle socket becomes
readable. An idle connection between requests expects nothing from the server; so here:
- a connection psycopg knows to be closed or broken is unusable (no round trip);
- one whose socket has nothing to read is usable (no round trip);
- one whose socket has something to read (the server's goodbye, or anything else unasked) gets Django's
  own `SELECT 1`, which settles it either way.
A server that vanished without a word (a host lost, a cable pulled) is not found out by either check
before the request's own query: a `SELECT 1` sent into a dead TCP connection waits as long as the query
would.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        if self.connection is None:
            return False
        connection = self.connection
        if connection.closed or connection.broken:
            return False
        try:
            # poll, not select: a process with over 1024 files open has sockets select() cannot take.
            poller = select.poll()
            poller.register(connection.fileno(), select.POLLIN)
            waiting = poller.poll(0)
        except (OSError, ValueError):  # no socket to ask: let the server answer
            return super().is_usable()
        return not waiting or super().is_usable()
