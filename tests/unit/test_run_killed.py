"""`make run` killed outright (SIGKILL: the OOM killer, `kill -9`, a CI runner's timeout), or its parent (make)
killed so: every process it started ends within seconds, its port frees, and a later `make run` on the same port
starts. The children run in sessions of their own (so Ctrl-C reaches the run only, which stops them in order) and
used to run on without it: worker, beat, tracker, web, proxy and the throwaway Redis, the proxy holding the port.
Here with the run's own Redis, without a cluster (KUBECONFIG given)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from localcluster.procs import descendants, pid_alive, port_is_free

REPO = Path(__file__).resolve().parents[2]


def _start(env: dict[str, str], *, under_make: bool) -> tuple[subprocess.Popen[bytes], list[str]]:
    argv = [sys.executable, "-m", "devtools.run"]
    if under_make:  # as `make run` does: make's child, which make execs without a shell
        argv = ["make", "-s", "--no-print-directory", "-f", "-", "run"]
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdin=subprocess.PIPE if under_make else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    if under_make:
        assert proc.stdin is not None
        proc.stdin.write(f"run:\n\t{sys.executable} -m devtools.run\n".encode())
        proc.stdin.close()
    output: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            output.append(line.decode(errors="replace"))

    threading.Thread(target=read, daemon=True).start()
    return proc, output


def _wait_served(proc: subprocess.Popen[bytes], output: list[str]) -> None:
    deadline = time.monotonic() + 240
    while "Press Ctrl-C to stop everything" not in "".join(output):
        assert proc.poll() is None, "".join(output)[-3000:]
        assert time.monotonic() < deadline, "".join(output)[-3000:]
        time.sleep(0.5)


def _names(pids: set[int]) -> list[str]:
    found = []
    for pid in sorted(pids):
        with contextlib.suppress(OSError):
            found.append(f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
    return found


@pytest.mark.parametrize("victim", ["run", "make"])
def test_a_killed_run_takes_every_process_it_started_with_it(tmp_path, victim):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CELERY_BROKER_URL", "MAKEFLAGS", "MFLAGS")}
    env.update({
        "PORT": str(port),
        "DEBUG": "1",
        "KUBECONFIG": str(tmp_path / "kubeconfig"),  # a cluster that is not there: the portal starts anyway
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "PORTAL_VAR_DIR": str(tmp_path),
    })  # fmt: skip
    proc, output = _start(env, under_make=victim == "make")
    children: set[int] = set()
    left: set[int] = set()
    again = None
    try:
        _wait_served(proc, output)
        children = descendants(proc.pid)
        run_pid = proc.pid
        if victim == "make":
            runs = [p for p in children if "devtools.run" in " ".join(_names({p}))]
            assert len(runs) == 1, _names(children)
            run_pid = runs[0]
        assert any("redis-server" in n for n in _names(children)), _names(children)  # its own Redis
        assert len(children) >= 7  # worker, provisioner, beat, track, web, proxy, redis (and their own children)
        os.kill(proc.pid, signal.SIGKILL)  # make, or the run itself
        proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        while any(pid_alive(p) for p in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = {p for p in children if pid_alive(p)}
        assert not left, f"still running 30 s after the kill: {_names(left)}\n" + "".join(output)[-3000:]
        assert not pid_alive(run_pid)
        assert port_is_free(port)
        # A later `make run` on the same port starts cleanly.
        again, again_output = _start(env, under_make=False)
        _wait_served(again, again_output)
        again.send_signal(signal.SIGINT)
        assert again.wait(timeout=90) == 0, "".join(again_output)[-3000:]
    finally:
        for process in (proc, again):
            if process is not None and process.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(process.pid, signal.SIGKILL)
        for pid in children | left:  # what the run left behind (each the leader of a session of its own)
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
