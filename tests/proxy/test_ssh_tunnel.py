"""The SSH tunnel through the proxy (issue 39): `/w/_ssh/<uid>`, opened with an API token, carries bytes to
the pod's sshd port and back. The pod's sshd is a loopback echo server here (the tunnel never reads SSH);
tests/integration/test_real_ssh.py runs Debian's OpenSSH client against a real sshd on the real nodes.

Who gets in is Open's rule: the owner; a teammate only while the owner shares; an outsider, a bad or a
revoked token: 404. A revoked token cuts a tunnel that is already open; an open tunnel counts as activity.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from api.tokens import token_create, token_revoke
from jobs.models import Workload
from jobs.services.opening import workload_share
from proxy import access
from proxy.app import ServiceProxy
from tests.proxy.conftest import _free_port, serve

pytestmark = pytest.mark.django_db(transaction=True)


class EchoServer:
    """A stand-in for the pod's sshd: echoes every byte, counts connections."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def tunnel(proxy_world, settings):
    settings.SSH_RECHECK_SECONDS = 1
    echo = EchoServer()
    app = ServiceProxy(endpoints=lambda namespace, service: ("127.0.0.1", 1), ssh_port=echo.port)
    port = _free_port()
    server, thread = serve(app, port)
    users = get_user_model().objects
    tokens = {who: token_create(user=users.get(username=name), name="ssh").raw
              for who, name in (("owner", "olivia"), ("teammate", "tom"), ("outsider", "oscar"))}  # fmt: skip
    proxy_world.ssh_base = f"ws://127.0.0.1:{port}"
    proxy_world.http_base = f"http://127.0.0.1:{port}"
    proxy_world.tokens = tokens
    proxy_world.echo = echo
    yield proxy_world
    server.should_exit = True
    thread.join(10)
    echo.close()
    access.reset_caches()


def _open(world, token: str):
    return connect(
        f"{world.ssh_base}/w/_ssh/{world.workload.uid}",
        additional_headers={"Authorization": f"Bearer {token}"} if token else {},
        open_timeout=20,
        compression=None,
    )


def _refused_status(world, token: str) -> int:
    with pytest.raises(InvalidStatus) as refused:
        _open(world, token)
    return refused.value.response.status_code


def test_the_owner_s_bytes_reach_the_pod_s_sshd_and_come_back(tunnel):
    with _open(tunnel, tunnel.tokens["owner"]) as ws:
        ws.send(b"SSH-2.0-OpenSSH_9.2\r\n")
        assert ws.recv(timeout=20) == b"SSH-2.0-OpenSSH_9.2\r\n"
        big = os.urandom(3 * 1024 * 1024)
        ws.send(big)
        got = b""
        while len(got) < len(big):
            got += ws.recv(timeout=20)
        assert got == big
    assert tunnel.echo.connections == 1


def test_a_teammate_is_refused_until_the_owner_shares(tunnel):
    assert _refused_status(tunnel, tunnel.tokens["teammate"]) == 404
    workload = Workload.objects.get(id=tunnel.workload.id)
    workload_share(workload=workload, by=workload.owner, shared=True)
    with _open(tunnel, tunnel.tokens["teammate"]) as ws:
        ws.send(b"hello")
        assert ws.recv(timeout=20) == b"hello"


@pytest.mark.parametrize("who", ["outsider", "bad", "none"])
def test_an_outsider_a_bad_token_and_no_token_get_404(tunnel, who):
    token = {"outsider": tunnel.tokens["outsider"], "bad": "gpp_not-a-real-token", "none": ""}[who]
    assert _refused_status(tunnel, token) == 404
    assert tunnel.echo.connections == 0


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_log():
    """Every line the proxy and its server write at INFO or above (uvicorn's loggers do not reach pytest's)."""
    lines = _Lines()
    watched = [logging.getLogger(name) for name in ("uvicorn.error", "proxy", "websockets")]
    levels = [logger.level for logger in watched]
    for logger in watched:
        logger.addHandler(lines)
        logger.setLevel(logging.INFO)
    yield lines.records
    for logger, level in zip(watched, levels, strict=True):
        logger.removeHandler(lines)
        logger.setLevel(level)


@pytest.mark.parametrize("why", ["bad token", "sshd down"])
def test_a_refused_tunnel_is_one_log_line_and_no_error(tunnel, server_log, why):
    """A refused tunnel logged uvicorn's "ASGI callable returned without completing handshake." at ERROR, and
    websockets' "connection rejected" and uvicorn's bare status beside the proxy's reason: up to four lines."""
    if why == "sshd down":
        tunnel.echo.sock.shutdown(socket.SHUT_RDWR)  # nothing listens on the pod's sshd port any more
        assert _refused_status(tunnel, tunnel.tokens["owner"]) == 502
    else:
        assert _refused_status(tunnel, "gpp_not-a-token") == 404
    time.sleep(0.5)  # the server's thread may log just after the client has its answer
    said = [(record.levelno, record.getMessage()) for record in server_log if record.levelno >= logging.INFO]
    assert [message for level, message in said if level >= logging.WARNING] == []
    assert len(said) == 1, said
    status, reason = (502, "the pod's sshd is not reachable") if why == "sshd down" else (404, "no such service")
    assert said[0][1].startswith(f'"WebSocket /w/_ssh/{tunnel.workload.uid}" {status}: {reason}'), said


def test_a_revoked_token_cuts_the_open_session(tunnel):
    from api.models import ApiToken

    with _open(tunnel, tunnel.tokens["owner"]) as ws:
        ws.send(b"before")
        assert ws.recv(timeout=20) == b"before"
        token = ApiToken.objects.get(user__username="olivia")
        token_revoke(token=token, by=token.user)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=60)  # nothing more comes: the proxy rechecks every SSH_RECHECK_SECONDS (1 s here)
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 4403


def test_an_open_idle_session_counts_as_activity(tunnel):
    Workload.objects.filter(id=tunnel.workload.id).update(last_activity_at=None)
    with _open(tunnel, tunnel.tokens["owner"]):
        deadline = time.monotonic() + 60
        while Workload.objects.get(id=tunnel.workload.id).last_activity_at is None:
            assert time.monotonic() < deadline, "an open SSH session never counted as activity"
            time.sleep(0.5)


def _idle_gpu_minutes(workload, start, end) -> None:
    """The agent's per-minute rows for `workload`: its GPU at 1 % every minute from start to end."""
    from telemetry.models import WorkloadGpuMinute

    minute = start.replace(second=0, microsecond=0)
    rows = []
    while minute < end:
        rows.append(WorkloadGpuMinute(workload=workload, team=workload.team, minute=minute,
                                      node_name=workload.node_name, reports=1, gpu_readings=1, utilization_sum=1.0,
                                      utilization_max=1, observed_gpu_seconds=60.0, busy_gpu_seconds=0.6))  # fmt: skip
        minute += timedelta(minutes=1)
    WorkloadGpuMinute.objects.bulk_create(rows)


def test_the_idle_policy_leaves_a_service_alone_while_an_ssh_session_is_open(tunnel):
    """GPUs idle for three hours, a two-hour policy: no warning while someone is connected over SSH; two hours
    after the session ends, the warning comes and says since when."""
    from decimal import Decimal

    import time_machine
    from django.utils import timezone

    from telemetry.models import IdlePolicy
    from telemetry.services.idle import idle_check

    now = timezone.now()
    workload = Workload.objects.get(id=tunnel.workload.id)
    Workload.objects.filter(id=workload.id).update(started_at=now - timedelta(hours=3), last_activity_at=None)
    workload.refresh_from_db()
    IdlePolicy.objects.create(team=workload.team, threshold_percent=5, warn_after_hours=Decimal(2))
    _idle_gpu_minutes(workload, now - timedelta(hours=3), now + timedelta(hours=3))
    with _open(tunnel, tunnel.tokens["owner"]) as ws:
        ws.send(b"SSH-2.0-OpenSSH_9.2\r\n")
        assert ws.recv(timeout=20) == b"SSH-2.0-OpenSSH_9.2\r\n"
        time.sleep(1.5)  # idle: no byte moves, only the proxy's recheck (every second here)
        deadline = time.monotonic() + 60
        while Workload.objects.get(id=workload.id).last_activity_at is None:
            assert time.monotonic() < deadline, "an open SSH session never counted as activity"
            time.sleep(0.5)
        assert idle_check()["warned"] == 0  # three idle GPU hours, but someone is connected
    connected_until = Workload.objects.get(id=workload.id).last_activity_at
    with time_machine.travel(connected_until + timedelta(hours=1, minutes=50), tick=False):
        assert idle_check()["warned"] == 0
    with time_machine.travel(connected_until + timedelta(hours=2, minutes=5), tick=False):
        assert idle_check()["warned"] == 1
    warning = workload.events.get(reason="IdleWarning")
    assert "held an SSH session to it through the portal since" in warning.message
    assert f"since {connected_until:%Y-%m-%d %H:%M} UTC" in warning.message


def _ssh_proxy_echoes(tunnel, portal_url: str, args: list[str], line: bytes) -> None:
    """Run `gpuportal ssh-proxy ARGS` as ssh would: `line` on stdin comes back on stdout from the pod's echo,
    and the command exits 0 once stdin ends."""
    env = {**os.environ, "GPUPORTAL_URL": portal_url, "GPUPORTAL_TOKEN": tunnel.tokens["owner"]}
    child = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "ssh-proxy", *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        child.stdin.write(line)
        child.stdin.flush()
        assert child.stdout.read(len(line)) == line
        child.stdin.close()
        assert child.wait(timeout=60) == 0, child.stderr.read().decode()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_gpuportal_ssh_proxy_carries_stdin_to_the_pod_and_back(tunnel):
    """The ProxyCommand itself, as ssh runs it: stdin in, stdout out; it ends when stdin ends."""
    _ssh_proxy_echoes(tunnel, tunnel.http_base, [f"gpuportal-{tunnel.workload.uid}"], b"through the portal\n")


def test_gpuportal_ssh_proxy_dials_the_services_origin_when_they_have_their_own(tunnel):
    """With services on an origin of their own the portal's host has no /w/: `--origin` (which ssh-config
    writes from the API's ssh_origin) is where the tunnel goes, whatever GPUPORTAL_URL says."""
    args = ["--origin", tunnel.http_base, tunnel.workload.uid]
    _ssh_proxy_echoes(tunnel, "http://127.0.0.1:9", args, b"over the apps origin\n")


def test_gpuportal_ssh_proxy_says_404_for_someone_else_s_service(tunnel):
    env = {**os.environ, "GPUPORTAL_URL": tunnel.http_base, "GPUPORTAL_TOKEN": tunnel.tokens["outsider"]}
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "ssh-proxy", tunnel.workload.uid],
        input=b"", capture_output=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "404" in done.stderr.decode()
