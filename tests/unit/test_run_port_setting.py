"""`PORT=... make run` with a value that is no port, and a second `make run` told which port to use instead:
one line naming PORT and what it takes, exit 1, nothing started, no traceback; the port suggested for a
second portal is one that is free."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _make_run(tmp_path: Path, port: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PORT": port,
        "DEBUG": "1",
        # Were it to go on, it would use these and start no cluster or Redis of its own.
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        "REDIS_URL": "redis://127.0.0.1:1/0",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "PORTAL_VAR_DIR": str(tmp_path),
    }
    return subprocess.run(
        [sys.executable, "-m", "devtools.run"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("port", ["abc", "8000x", "99999", "65536", "-1", "0", "80.5"])
def test_a_port_that_is_no_port_is_refused_naming_port(tmp_path, port):
    done = _make_run(tmp_path, port)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert f"PORT must be a port number from 1 to 65535 (got {port!r})" in done.stderr
    assert "migrate" not in done.stdout  # nothing was set up
    assert not (tmp_path / "db.sqlite3").exists()


def test_the_port_suggested_for_a_second_portal_is_free(tmp_path):
    with contextlib.ExitStack() as stack:
        held = []
        # Two ports side by side held (a first make run on 8000, a second on 8001): the advice skips both.
        for _ in range(50):
            first = stack.enter_context(socket.socket())
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            second = stack.enter_context(socket.socket())
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            first.listen()
            second.listen()
            held = [port, port + 1]
            break
        assert held, "no two free ports side by side"
        done = _make_run(tmp_path, str(held[0]))
    assert done.returncode == 1, done.stderr
    assert f"port {held[0]} is in use" in done.stderr
    assert f"PORT={held[0] + 1} make run" not in done.stderr
    assert f"PORT={held[0] + 2} make run" in done.stderr
