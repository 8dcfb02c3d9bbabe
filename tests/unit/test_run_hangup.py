"""`make run` in a terminal that goes away (its window closed, an SSH session dropped): the terminal's
hang-up stops the portal as Ctrl-C does, every process it started ends and its port frees, instead of the
worker, beat, tracker, web and proxy (each in a session of its own) running on without it, holding the port
the next `make run` wants. Here without a cluster or Redis of its own (KUBECONFIG and REDIS_URL given)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import signal
import socket
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from localcluster.procs import descendants, pid_alive, port_is_free

REPO = Path(__file__).resolve().parents[2]


def _in_a_terminal() -> None:
    # In the child, after setsid: the pty becomes its controlling terminal, as a shell's would be.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.mark.parametrize("how", ["hang-up", "ctrl-c"])
def test_a_hang_up_stops_everything_the_run_started(tmp_path, how):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "PORT": str(port),
        "DEBUG": "1",
        "KUBECONFIG": str(tmp_path / "kubeconfig"),  # a cluster that is not there: the portal starts anyway
        "REDIS_URL": "redis://127.0.0.1:1/0",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "PORTAL_VAR_DIR": str(tmp_path),
    }
    terminal, tty = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "devtools.run"], cwd=REPO, env=env, stdin=tty, stdout=tty, stderr=tty,
        start_new_session=True, preexec_fn=_in_a_terminal,
    )  # fmt: skip
    os.close(tty)
    output: list[str] = []

    def read() -> None:
        with contextlib.suppress(OSError):  # EIO once the terminal is hung up
            while chunk := os.read(terminal, 65536):
                output.append(chunk.decode(errors="replace"))

    threading.Thread(target=read, daemon=True).start()
    children: set[int] = set()
    left: list[int] = []
    try:
        deadline = time.monotonic() + 240
        while "Press Ctrl-C to stop everything" not in "".join(output):
            assert proc.poll() is None, "".join(output)[-3000:]
            assert time.monotonic() < deadline, "".join(output)[-3000:]
            time.sleep(0.5)
        children = descendants(proc.pid)
        assert len(children) >= 5  # worker, provisioner, beat, track, web, proxy (and their own children)
        assert not port_is_free(port)
        if how == "hang-up":
            os.close(terminal)  # the window closes: the kernel hangs up the terminal (SIGHUP, then EIO)
        else:
            os.write(terminal, b"\x03")  # Ctrl-C: the terminal's SIGINT to its foreground process group
        code = proc.wait(timeout=90)
        deadline = time.monotonic() + 10
        while any(pid_alive(p) for p in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [p for p in children if pid_alive(p)]
        port_freed = port_is_free(port)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in children:  # what the run left behind (each the leader of a session of its own)
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.close(terminal)
    assert left == [], "".join(output)[-3000:]
    assert port_freed
    assert code == 0
    if how == "ctrl-c":
        assert "stopped: nothing this run started is left running" in "".join(output)
