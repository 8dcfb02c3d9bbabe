"""Child processes of the local cluster: start, health-wait, stop, and clean up after a crashed run.

Every component runs in a session of its own (so Ctrl-C reaches only our supervisor, which stops the
components in order) and, when started from the main thread, with PR_SET_PDEATHSIG so that a supervisor
killed with -9 takes its components with it: `down` must never leave an orphan etcd behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1


class ClusterError(RuntimeError):
    """The cluster could not start. The message names the cause and the fix; callers print it as is."""


try:  # loaded here, once: between fork and exec a child only calls it (no import, no dlopen)
    _LIBC: ctypes.CDLL | None = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:
    _LIBC = None


def die_with_parent(signum: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A `preexec_fn` that has the child get `signum` when this process dies, however it dies (SIGKILL too), so
    a child in a session of its own is not left running; None where it cannot work. The kernel sends it when
    the *thread* that forked the child ends: only children started from the main thread get it (None from any
    other). A parent that died before the child asked is caught too (the child then signals itself)."""
    if _LIBC is None or threading.current_thread() is not threading.main_thread():
        return None
    parent = os.getpid()

    def preexec() -> None:
        _LIBC.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)

    return preexec


def ask_to_die_with_parent(signum: int) -> None:
    """The same request for this process itself (the parent that started it, e.g. make, dying)."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As Go's listeners do: a port with connections in TIME_WAIT is free to listen on.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_owner(port: int) -> str:
    """Best effort: 'pid 123 (redis-server)' for the process listening on 127.0.0.1:port."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as fh:
            next(fh, None)
            for line in fh:
                parts = line.split()
                if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(parts[9])
    if not inodes:
        return "another process"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:[") and target[8:-1] in inodes:
                        return f"pid {pid} ({process_name(int(pid))})"
    return "another process"


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive for our purposes.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def kill_pid(pid: int, *, timeout: float = 10.0) -> None:
    """SIGTERM, wait, then SIGKILL the process group led by pid (our components lead their own)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for target in (lambda s: os.killpg(pid, s), lambda s: os.kill(pid, s)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                target(sig)
        deadline = time.monotonic() + (timeout if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            if not pid_alive(pid):
                return
            time.sleep(0.05)


def log_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a component's log, from its latest start only."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    marker = text.rfind("=== localcluster: starting ")
    if marker >= 0:
        text = text[marker:]
    tail = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join("    " + line for line in tail) or "(empty log)"


class Component:
    """One long-running child process with a log file and a pid file in the state directory."""

    def __init__(
        self,
        name: str,
        argv: Callable[[], list[str]],
        *,
        log_dir: Path,
        run_dir: Path,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self._argv = argv
        self.log_path = log_dir / f"{name}.log"
        self.pid_path = run_dir / f"{name}.pid"
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.expected_stop = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        argv = self._argv()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            log.write(f"\n=== localcluster: starting {self.name} at {stamp}: {' '.join(argv)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGKILL),
            )
        self.expected_stop = False
        self.pid_path.parent.mkdir(parents=True, exist_ok=True)
        self.pid_path.write_text(f"{self.process.pid}\n")

    def stop(self, timeout: float = 10.0) -> None:
        self.expected_stop = True
        if self.process is not None:
            if self.process.poll() is None:
                kill_pid(self.process.pid, timeout=timeout)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)
        self.pid_path.unlink(missing_ok=True)

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def failure(self, what: str) -> ClusterError:
        tail = log_tail(self.log_path)
        code = self.exit_code()
        cause = f"{self.name} {what}" + (f" (exit code {code})" if code is not None else "")
        hint = ""
        if "address already in use" in tail:
            hint = "\n  cause: a port it was given is already in use; rerun (free ports are picked anew)."
        return ClusterError(f"{cause}.{hint}\n  last lines of {self.log_path}:\n{tail}")

    def wait_until(self, check: Callable[[], bool], *, timeout: float, what: str) -> None:
        """Poll `check` until true; fail fast if the process dies, and never wait past `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                raise self.failure("exited while starting")
            with contextlib.suppress(Exception):
                if check():
                    return
            if time.monotonic() > deadline:
                raise self.failure(f"did not become {what} within {timeout:.0f}s")
            time.sleep(0.1)


def reap_stale(run_dir: Path, marker: str, log: Callable[[str], None]) -> None:
    """Stop processes a crashed earlier run left behind (pid files whose process still runs with our
    state directory on its command line) and drop stale pid files."""
    if not run_dir.is_dir():
        return
    for pid_file in sorted(run_dir.glob("*.pid")):
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            pid_file.unlink(missing_ok=True)
            continue
        if pid != os.getpid() and pid_alive(pid) and marker in cmdline(pid):
            log(f"stopping {pid_file.stem} (pid {pid}) left running by an earlier run")
            kill_pid(pid, timeout=5)
        pid_file.unlink(missing_ok=True)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (children, their children, ...), read from /proc."""
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError):
                for child in (task / "children").read_text().split():
                    if int(child) not in found:
                        found.add(int(child))
                        frontier.append(int(child))
    return found
