"""A second `make run` on a port another one already serves (the default 8000 twice): it says so at once,
naming the port, who holds it and how to pick another, and starts nothing (no Redis, no cluster, no
migrations), rather than setting everything up and dying when its proxy cannot listen."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_port_already_served_is_refused_before_anything_starts(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = {
            **os.environ,
            "PORT": str(port),
            "DEBUG": "1",
            # Were it to go on, it would use these and start no cluster or Redis of its own.
            "KUBECONFIG": str(tmp_path / "kubeconfig"),
            "REDIS_URL": "redis://127.0.0.1:1/0",
            "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
            "PORTAL_VAR_DIR": str(tmp_path),
        }
        done = subprocess.run(
            [sys.executable, "-m", "devtools.run"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
        )
    assert done.returncode == 1, done.stderr
    assert f"port {port} is in use by pid {os.getpid()}" in done.stderr
    assert f"PORT={port + 1} make run" in done.stderr
    assert "migrate" not in done.stdout  # nothing was set up
    assert not (tmp_path / "db.sqlite3").exists()
    assert "Traceback" not in done.stderr + done.stdout
