"""Throwaway PostgreSQL and Redis servers, for the test suite and `make run`.

Each server gets a free loopback port and a temporary directory of its own, and is stopped (and its
directory removed) by `stop()`. Nothing touches a system-wide server.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from localcluster.procs import die_with_parent


class ServiceError(RuntimeError):
    """A throwaway server could not be started; the message says why and what to do."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, *, timeout: float, process: subprocess.Popen | None = None, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ServiceError(f"{what} exited with code {process.returncode} while starting")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise ServiceError(f"{what} did not open port {port} within {timeout:.0f}s")


class RedisServer:
    def __init__(self) -> None:
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.directory: Path | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, port: int | None = None) -> str:
        """Start on a free port, or on `port` again (a restart keeps clients' URL valid)."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise ServiceError("redis-server is not installed: run `devtools/system-deps.sh redis-server`")
        self.directory = self.directory or Path(tempfile.mkdtemp(prefix="gpuportal-redis-"))
        self.port = port or self.port or free_port()
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                "--logfile",
                str(self.directory / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGKILL),  # no Redis outlives a run or test session killed -9
        )
        wait_for_port(self.port, timeout=15, process=self.process, what="redis-server")
        return self.url

    def stop(self, *, keep: bool = False) -> None:
        """Stop the server; with keep=True its port and directory stay ours for a later start()."""
        _terminate(self.process)
        self.process = None
        if not keep and self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


class PostgresServer:
    """A disposable cluster tuned for tests (no fsync unless GPUPORTAL_PG_DURABLE=1); trust auth on loopback only."""

    def __init__(self, database: str = "gpuportal") -> None:
        self.database = database
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.directory: Path | None = None

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{self.database}"

    def _bin(self, name: str) -> str:
        candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
        if not candidates:
            raise ServiceError(f"PostgreSQL's {name} was not found: run `devtools/system-deps.sh postgresql`")
        return candidates[0]

    def start(self) -> str:
        initdb, postgres = self._bin("initdb"), self._bin("postgres")
        self.directory = Path(tempfile.mkdtemp(prefix="gpuportal-pg-"))
        data = self.directory / "data"
        run_as: list[str] = []
        if os.geteuid() == 0:
            # PostgreSQL refuses to run as root; hand the directory to the postgres system user.
            try:
                account = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise ServiceError("running as root needs the 'postgres' user (from the postgresql package)") from exc
            os.chown(self.directory, account.pw_uid, account.pw_gid)
            self.directory.chmod(0o700)
            run_as = ["runuser", "-u", "postgres", "--"]
        subprocess.run(
            [*run_as, initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.port = free_port()
        # Tests trade durability for speed; benchmarks that compare against the API server (whose etcd
        # fsyncs every write) keep PostgreSQL's defaults with GPUPORTAL_PG_DURABLE=1.
        durability = (
            []
            if os.environ.get("GPUPORTAL_PG_DURABLE") == "1"
            else ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        )
        self.process = subprocess.Popen(
            [
                *run_as,
                postgres,
                "-D",
                str(data),
                "-p",
                str(self.port),
                "-k",
                str(self.directory),
                "-c",
                "listen_addresses=127.0.0.1",
                *durability,
                "-c",
                "max_connections=300",
                "-c",
                "shared_buffers=256MB",
                *os.environ.get("GPUPORTAL_PG_OPTIONS", "").split(),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.directory / "postgres.log", "wb"),  # noqa: SIM115
            start_new_session=True,
        )
        wait_for_port(self.port, timeout=30, process=self.process, what="postgres")
        # The server accepts TCP a moment before it accepts logins; wait until it answers a query.
        deadline = time.monotonic() + 30
        while True:
            result = subprocess.run(
                [
                    *run_as,
                    self._bin("psql"),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-U",
                    "postgres",
                    "-Atc",
                    f"CREATE DATABASE {self.database}",
                ],
                capture_output=True,
                text=True,
            )
            if result.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise ServiceError(f"postgres did not accept connections: {result.stderr.strip()}")
            time.sleep(0.2)
        return self.url

    def stop(self) -> None:
        _terminate(self.process)
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)


def _terminate(process: subprocess.Popen | None, timeout: float = 10) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)
