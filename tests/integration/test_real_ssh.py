"""SSH through the portal on real containers (issue 39), with Debian's real OpenSSH client.

The dev-environment catalog entry (localcluster/images.py `devenv`: JupyterLab and Debian's sshd, run as the
pod's own uid) is launched on a real node (tests/realnode_fixtures.py); the portal's proxy runs as in
production (uvicorn, the Endpoints read from the cluster); `ssh`, `scp` and `ssh -L` go through
`gpuportal ssh-proxy` as their ProxyCommand with a person's API token. Proved here:
- `ssh <uid> env` prints the container's NVIDIA_VISIBLE_DEVICES (a device of the real node's plugin);
- a file sent with scp lands in the home workspace, and JupyterLab (through Open's path) reads it back;
- `ssh -L` reaches JupyterLab's port in the pod;
- a teammate's key is refused until the owner shares, then let in; an outsider's token gets 404;
- a revoked token cuts an open session within a minute.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from django.test import Client
from rest_framework.test import APIClient

from api.tokens import token_create, token_revoke
from identity.sshkeys import key_add
from jobs.kube import client as kube
from jobs.models import CatalogImage, State, Workload
from jobs.services.logs.container_logs import LogsUnavailable, workload_logs
from jobs.services.opening import workload_share
from localcluster import images
from proxy import access
from proxy.app import ServiceProxy
from tests.proxy.conftest import _free_port, serve
from tests.ui.test_browser_open import proxy_api  # noqa: F401 (fixture)

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def devenv_on_real_nodes(real_nodes):
    path = images.ensure(["devenv"])["devenv"]
    for spec in real_nodes.specs:
        real_nodes.import_image(spec, path)
    real_nodes.wait_until_listed()  # the portal refuses images its nodes do not list
    return real_nodes


@pytest.fixture
def portal_proxy(real_engine, devenv_on_real_nodes, proxy_api, settings):  # noqa: F811
    """The proxy as the chart runs it: its own service account reads the EndpointSlices."""
    settings.PROXY_ACCESS_CACHE_SECONDS = 0
    settings.PROXY_ENDPOINT_CACHE_SECONDS = 1
    settings.SSH_RECHECK_SECONDS = 5
    settings.WORKSPACE_STORAGE_CLASS = "gpuportal-local"
    access.reset_caches()
    port = _free_port()
    app = ServiceProxy(endpoints=lambda namespace, service: kube.ready_endpoint(namespace, service, api=proxy_api))
    server, thread = serve(app, port)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


class Person:
    """Someone with an ssh key pair (made by Debian's ssh-keygen) and an API token."""

    def __init__(self, user, home: Path, proxy: str, *, with_key: bool = True) -> None:
        self.user = user
        self.dir = home / user.username
        self.dir.mkdir()
        self.key = self.dir / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)], check=True)
        if with_key:
            key_add(user=user, name="test machine", public_key=(self.dir / "id_ed25519.pub").read_text())
        self.issued = token_create(user=user, name="ssh test")
        self.proxy = proxy

    def ssh_options(self) -> list[str]:
        # ssh runs it as `exec <command>` in a shell: the client from this checkout (PYTHONPATH in env()).
        proxy_command = f"{shlex.quote(sys.executable)} -m cli.main ssh-proxy %h"
        return [
            "-F", "/dev/null", "-i", str(self.key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", f"ProxyCommand={proxy_command}", "-o", f"UserKnownHostsFile={self.dir / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=accept-new", "-o", "ConnectTimeout=60",
        ]  # fmt: skip

    def env(self) -> dict:
        return {**os.environ, "GPUPORTAL_URL": self.proxy, "GPUPORTAL_TOKEN": self.issued.raw, "PYTHONPATH": str(REPO)}

    def ssh(self, uid: str, *command: str, timeout: float = 90) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ssh", *self.ssh_options(), f"user@{uid}", *command],
            capture_output=True, text=True, env=self.env(), timeout=timeout, check=False,
        )  # fmt: skip

    def scp(self, source: str, target: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["scp", *self.ssh_options(), source, target],
            capture_output=True, text=True, env=self.env(), timeout=120, check=False,
        )  # fmt: skip


def _launch_devenv(engine, name: str) -> Workload:
    entry = CatalogImage.objects.get(reference=images.IMAGES["devenv"])
    api = APIClient()
    api.force_authenticate(engine.owner)
    body = {"name": name, "kind": "service", "catalog_image": entry.id, "image": entry.reference,
            "gpu_type": "real-p100", "gpu_count": 1, "port": 8888, "time_limit_seconds": 900}  # fmt: skip
    answer = api.post("/api/v1/workloads/", body, format="json")
    assert answer.status_code == 201, answer.content
    workload = Workload.objects.get(uid=answer.json()["uid"])
    engine.wait_for(workload, State.RUNNING, State.FAILED, timeout=240)
    assert workload.state == State.RUNNING, workload.message
    return workload


def _until(what: str, check, workload: Workload, timeout: float = 120):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last is not None and getattr(last, "returncode", 0) == 0:
            return last
        time.sleep(2)
    logs = ""
    with contextlib.suppress(LogsUnavailable):
        logs = workload_logs(workload)[-3000:]  # sshd logs there (images/devenv-entrypoint.sh)
    pytest.fail(f"{what} within {timeout} s; last: {getattr(last, 'stderr', last)}\ncontainer log:\n{logs}")


def test_ssh_scp_and_port_forwarding_through_the_portal_on_a_real_node(real_engine, portal_proxy, tmp_path):
    owner = Person(real_engine.owner, tmp_path, portal_proxy)
    workload = _launch_devenv(real_engine, "devbox")
    uid = workload.uid

    # sshd starts beside JupyterLab; the first tries may find it not listening yet.
    shown = _until("ssh into the service", lambda: owner.ssh(uid, "env"), workload)
    env = dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)
    assert env["NVIDIA_VISIBLE_DEVICES"] in real_engine.real_nodes.device_ids("real-p100-1"), shown.stdout
    assert env["HOME"] == f"/home/{real_engine.owner.username}"  # the home workspace
    assert env["GPUPORTAL_WORKLOAD"] == uid
    assert owner.ssh(uid, "id", "-u").stdout.strip() == "1000"  # the pod's own non-root uid

    # scp into the home workspace; JupyterLab, whose file browser opens in that workspace, reads it back
    # through Open's path at the top of its tree.
    sent = tmp_path / "hello.txt"
    sent.write_text("sent with scp through the portal\n")
    home = f"/home/{real_engine.owner.username}"
    copied = owner.scp(str(sent), f"user@{uid}:{home}/hello.txt")
    assert copied.returncode == 0, copied.stderr
    browser = Client()
    browser.force_login(real_engine.owner)
    cookies = {"sessionid": browser.cookies["sessionid"].value}
    # JupyterLab starts after sshd: until it listens, Open's path answers 502 (the "cannot be reached" page).
    deadline = time.monotonic() + 120
    while True:
        read = requests.get(f"{portal_proxy}/w/{uid}/api/contents/hello.txt",
                            params={"content": "1"}, cookies=cookies, timeout=30)  # fmt: skip
        if read.status_code != 502 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert read.status_code == 200, read.text[:300]
    assert read.json()["content"] == "sent with scp through the portal\n"

    # ssh -L: a local port reaches JupyterLab's port inside the pod.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        local = probe.getsockname()[1]
    forward = subprocess.Popen(
        ["ssh", *owner.ssh_options(), "-N", "-L", f"{local}:127.0.0.1:8888", f"user@{uid}"],
        env=owner.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(requests.ConnectionError):
                status = requests.get(f"http://127.0.0.1:{local}/w/{uid}/api/status", timeout=10)
                break
            assert forward.poll() is None, forward.stderr.read()
            assert time.monotonic() < deadline, "ssh -L never forwarded"
            time.sleep(1)
        assert status.status_code == 200
        assert "kernels" in status.json()
    finally:
        forward.terminate()
        forward.wait(10)


def test_teammates_outsiders_and_revoked_tokens(real_engine, portal_proxy, tmp_path):
    owner = Person(real_engine.owner, tmp_path, portal_proxy)
    mate = Person(real_engine.teammate, tmp_path, portal_proxy)
    stranger = Person(real_engine.outsider, tmp_path, portal_proxy)
    workload = _launch_devenv(real_engine, "devbox-shared")
    uid = workload.uid
    _until("ssh into the service", lambda: owner.ssh(uid, "true"), workload)

    refused = mate.ssh(uid, "true")
    assert refused.returncode != 0
    assert "404" in refused.stderr
    outsider = stranger.ssh(uid, "true")
    assert outsider.returncode != 0
    assert "404" in outsider.stderr

    # Shared: the proxy lets the teammate through at once, and their key reaches the pod's authorized_keys
    # (the engine rewrites the Secret; the kubelet updates the mounted file).
    workload_share(workload=workload, by=real_engine.owner, shared=True)
    who = _until("the teammate's key let in after sharing", lambda: mate.ssh(uid, "whoami"), workload, timeout=180)
    assert who.stdout.strip() == "user"

    # A revoked token cuts an open session within a minute.
    session = subprocess.Popen(["ssh", *owner.ssh_options(), f"user@{uid}", "sleep", "600"], env=owner.env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        time.sleep(8)
        assert session.poll() is None, session.stderr.read()
        revoked_at = time.monotonic()
        token_revoke(token=owner.issued.token, by=real_engine.owner)
        session.wait(timeout=60)
        assert time.monotonic() - revoked_at < 60
        assert session.returncode != 0
        assert "revoked" in session.stderr.read().decode()
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
