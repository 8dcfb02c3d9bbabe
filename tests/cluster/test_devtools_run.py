"""`make run` (python -m devtools.run) as a real process tree: it starts its own cluster and Redis, serves the
portal, and Ctrl-C leaves nothing running."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from devtools.services import free_port
from localcluster import default_bin_dir
from localcluster.procs import descendants, pid_alive

REPO = Path(__file__).resolve().parents[2]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # surface the 302 itself


def _portal_processes(pids: set[int]) -> dict[str, tuple[int, dict[str, str]]]:
    """The portal's own processes among `pids` (by role), each with its environment as the kernel has it."""
    found: dict[str, tuple[int, dict[str, str]]] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            env = dict(e.decode(errors="replace").split("=", 1) for e in environ if b"=" in e)
            role = _role_of(argv)
            if role and role not in found:
                found[role] = (pid, env)
    return found


def _role_of(argv: list[str]) -> str | None:
    """A process's role from its arguments, word by word: as root, Celery's are `-W ignore:You're running the
    worker with superuser privileges...` first, so beat's command line holds " worker " too (matching on the
    joined line named beat the worker, by the order the pids came in, and the test missed beat now and then)."""
    if "runserver" in argv:
        return "web"
    if "manage.py" in argv and "track" in argv:
        return "track"
    if "-m" in argv and argv[argv.index("-m") + 1 :][:1] == ["proxy"]:
        return "proxy"
    if "celery" in argv:
        command = argv[argv.index("celery") + 1 :]
        if "beat" in command:
            return "beat"
        if "worker" in command:
            return "provisioner" if "--queues=provision" in command else "worker"
    return None


def _may_create_namespace(kubeconfig: str) -> tuple[bool, int]:
    """Try it for real with these credentials: (created?, HTTP status)."""
    from kubernetes import client as k8s
    from kubernetes import config
    from kubernetes.client.exceptions import ApiException

    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name="run-escalation-probe")))
    except ApiException as exc:
        return False, exc.status
    finally:
        api.close()
    return True, 201


def _open_a_notebook_and_cancel_it(base: str, *, local_images: bool = False) -> str:
    """What a newcomer does first: sign in as the demo's alice, launch the catalog's notebook, open it through
    the portal (the node simulator's backend answers under /w/<uid>/), then cancel it."""
    import re

    import requests

    web = requests.Session()
    form = web.get(f"{base}/login/", timeout=30)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)[1]
    signed_in = web.post(
        f"{base}/login/",
        data={"csrfmiddlewaretoken": token, "username": "alice", "password": "gpuportal-demo"},
        headers={"Referer": f"{base}/login/"},
        timeout=30,
    )
    assert signed_in.url == f"{base}/", signed_in.url
    unsafe = {"X-CSRFToken": web.cookies["csrftoken"], "Referer": f"{base}/"}
    images = web.get(f"{base}/api/v1/images/", timeout=30).json()
    titles = {i.get("title") for i in images}
    assert ("JupyterLab (local)" in titles) == local_images, titles  # with real nodes, the images built here
    notebook = next(i for i in images if "jupyter" in str(i).lower())
    launched = web.post(
        f"{base}/api/v1/workloads/",
        json={"team": "demo", "catalog_image": notebook["id"], "gpu_type": "p100", "kind": "service"},
        headers=unsafe,
        timeout=30,
    )
    assert launched.status_code == 201, launched.text
    uid = launched.json()["uid"]
    deadline = time.monotonic() + 90
    while True:
        opened = web.get(f"{base}/w/{uid}/", timeout=30)
        if opened.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert opened.status_code == 200, opened.text[:300]
    assert "Simulated service" in opened.text
    assert f"/w/{uid}/" in opened.text
    detail = web.get(f"{base}/api/v1/workloads/{uid}/", timeout=30).json()
    assert detail["state"] == "RUNNING"
    assert detail["open_url"] == f"{base}/w/{uid}/"  # on the port this portal serves (PORT)
    assert web.post(f"{base}/api/v1/workloads/{uid}/cancel/", headers=unsafe, timeout=30).status_code in (200, 202)
    deadline = time.monotonic() + 60
    while web.get(f"{base}/api/v1/workloads/{uid}/", timeout=30).json()["state"] != "CANCELLED":
        assert time.monotonic() < deadline, "the cancelled notebook never reached CANCELLED"
        time.sleep(1)
    # The proxy keeps who may open what for PROXY_ACCESS_CACHE_SECONDS (2) and a pod's address a little longer,
    # so a page asked for in the moment the cancel lands may still reach the pod: soon after, it is ended.
    deadline = time.monotonic() + 30
    while (ended := web.get(f"{base}/w/{uid}/", timeout=30)).status_code == 200:
        assert time.monotonic() < deadline, "the cancelled notebook was still served 30 s after it ended"
        time.sleep(0.5)
    assert "ended" in ended.text.lower(), ended.text[:300]
    return uid


@pytest.mark.cluster
@pytest.mark.slow
def test_make_run_serves_the_portal_and_ctrl_c_stops_everything(tmp_path):
    if not (default_bin_dir() / "SHA256SUMS").exists():
        pytest.skip("Kubernetes binaries not built (make cluster-build)")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"KUBECONFIG", "REDIS_URL", "CELERY_BROKER_URL", "DEBUG"}}
    # Short: the real nodes' unix sockets live under it (107 bytes at most); pytest's tmp_path is too deep.
    state_dir = Path(tempfile.mkdtemp(prefix="mr-", dir="/tmp"))
    env.update(
        PORT=str(port),
        LOCALCLUSTER_STATE_DIR=str(state_dir / "cluster"),
        PORTAL_VAR_DIR=str(tmp_path / "var"),
        DATABASE_URL=f"sqlite:///{tmp_path / 'portal.sqlite3'}",
    )
    (tmp_path / "var").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "devtools.run"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    output: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(
        target=lambda: output.extend(line.decode(errors="replace") for line in proc.stdout), daemon=True
    )
    reader.start()
    children: set[int] = set()
    try:
        deadline = time.monotonic() + 400  # the real nodes' kubelets start and import the local images
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            children |= descendants(proc.pid)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as resp:
                    status = resp.status
                    break
            except urllib.error.HTTPError as exc:
                status = exc.code
                break
            except OSError:
                time.sleep(0.5)
        assert status is not None, "".join(output[-40:])
        assert status < 500
        # One origin: the service proxy answers /w/<uid>/ on the same port (anonymous: to the sign-in page).
        opener = urllib.request.build_opener(_NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as redirected:
            opener.open(f"http://127.0.0.1:{port}/w/0123456789abcdef/", timeout=10)
        assert redirected.value.code == 302
        assert redirected.value.headers["Location"].startswith("/login/?next=%2Fw%2F0123456789abcdef%2F")
        time.sleep(1)  # let the last children appear in the tree
        children |= descendants(proc.pid)
        text = "".join(output)
        assert "worker  |" in text
        # Real nodes by default where the machine can run them, else one line saying why not.
        said = re.findall(r"\[run\] (.*real nodes.*)", text)
        assert said, text[-3000:]
        assert not [line for line in said if "did not start" in line], said  # it could, so it must
        if said[0].startswith("2 real nodes"):
            assert "waiting for 2 real nodes to be Ready" in text
        else:
            assert said[0].startswith("real nodes off, simulated nodes only: "), said
        local_images = said[0].startswith("2 real nodes")
        assert "web     |" in text
        assert f"http://127.0.0.1:{port}/" in text
        # Least privilege: the admin kubeconfig set the cluster up; no portal process holds it, and the web
        # process's own credentials cannot create a namespace (nor can the worker's).
        admin_kubeconfig = str(state_dir / "cluster" / "kubeconfig")
        processes = _portal_processes(children)
        assert {"web", "proxy", "worker", "beat", "provisioner"} <= set(processes), processes.keys()
        for role, (_, process_env) in processes.items():
            assert process_env.get("KUBECONFIG") not in (None, admin_kubeconfig), role
        assert _may_create_namespace(admin_kubeconfig) == (True, 201)  # the probe itself can succeed
        web_kubeconfig = processes["web"][1]["KUBECONFIG"]
        assert web_kubeconfig.endswith("web-kubeconfig")
        assert _may_create_namespace(web_kubeconfig) == (False, 403)
        assert _may_create_namespace(processes["worker"][1]["KUBECONFIG"]) == (False, 403)
        assert processes["provisioner"][1]["KUBECONFIG"].endswith("provisioner-kubeconfig")
        assert processes["proxy"][1]["KUBECONFIG"].endswith("proxy-kubeconfig")  # its own, as in the chart
        # The first thing a newcomer tries works on this database (SQLite, as `make run` starts without
        # DATABASE_URL), and leaves no failed task behind in the worker's log.
        _open_a_notebook_and_cancel_it(f"http://127.0.0.1:{port}", local_images=local_images)
        time.sleep(3)  # the cancel's delete task
        text = "".join(output)
        failures = [n for n, line in enumerate(text.splitlines()) if "raised unexpected" in line or "Traceback" in line]
        assert failures == [], "\n".join(text.splitlines()[failures[0] - 5 : failures[0] + 40])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert code == 0, "".join(output[-40:])
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in children if pid_alive(p)] == []
    assert len(children) >= 9  # etcd, 3 kube binaries, simulator, redis, worker, beat, web, proxy
    shutil.rmtree(state_dir, ignore_errors=True)


class _Stack:
    """One `make run` (python -m devtools.run) in a directory of its own, on a free PORT, started as a
    newcomer's shell would: no REDIS_URL, no KUBECONFIG."""

    def __init__(self, root: Path) -> None:
        root.mkdir()
        (root / "var").mkdir()
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in {"KUBECONFIG", "REDIS_URL", "CELERY_BROKER_URL",
                                                                 "DEBUG", "SITE_URL"}}  # fmt: skip
        env.update(
            PORT=str(self.port),
            LOCALCLUSTER_STATE_DIR=str(root / "cluster"),
            PORTAL_VAR_DIR=str(root / "var"),
            DATABASE_URL=f"sqlite:///{root / 'portal.sqlite3'}",
            # Simulated nodes only: this test is about brokers and ports; two real-node clusters side by side
            # would double its time (test_make_run_serves_the_portal_... runs make run's default, real nodes).
            GPUPORTAL_REAL_NODES="0",
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "devtools.run"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.output: list[str] = []
        assert self.proc.stdout is not None
        threading.Thread(
            target=lambda: self.output.extend(line.decode(errors="replace") for line in self.proc.stdout), daemon=True
        ).start()
        self.children: set[int] = set()

    @property
    def text(self) -> str:
        return "".join(self.output)

    def wait_serving(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            self.children |= descendants(self.proc.pid)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/login/", timeout=2) as resp:
                    if resp.status == 200 and "Press Ctrl-C" in self.text:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        pytest.fail(f"make run on port {self.port} did not serve:\n" + "".join(self.output[-40:]))

    def stop(self) -> int:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise


@pytest.mark.cluster
@pytest.mark.slow
def test_two_make_runs_side_by_side_each_run_their_own_work_on_their_own_broker_and_port(tmp_path):
    """Issue 32: every `make run` used the machine's Redis on 6379 as its broker (the throwaway one it
    announced was started after its processes' environments were built), so portals on one machine ran,
    and deleted, each other's work; and the sign-in lines and open_url said 8000 whatever PORT was."""
    import re

    if not (default_bin_dir() / "SHA256SUMS").exists():
        pytest.skip("Kubernetes binaries not built (make cluster-build)")
    stacks = [_Stack(tmp_path / "a"), _Stack(tmp_path / "b")]
    try:
        for stack in stacks:
            stack.wait_serving()
        brokers = []
        for stack in stacks:
            announced = re.search(r"throwaway Redis on (redis://\S+)", stack.text)[1]
            brokers.append(announced)
            assert ":6379/" not in announced
            roles = ("web", "proxy", "worker", "beat", "provisioner", "track")
            # Each process is looked for until it shows (a slow machine may still be starting one when the
            # sign-in page answers); one that never shows fails with the run's last lines.
            deadline = time.monotonic() + 60
            while True:
                time.sleep(0.5)
                stack.children |= descendants(stack.proc.pid)
                processes = _portal_processes(stack.children)
                if set(roles) <= set(processes) or time.monotonic() > deadline:
                    break
            missing = [role for role in roles if role not in processes]
            assert missing == [], stack.text[-3000:]
            for role in roles:
                assert processes[role][1].get("REDIS_URL") == announced, role
            # The worker's own banner: its transport is this run's Redis (the machine's 6379 plays no part).
            transport = [line for line in stack.output if line.startswith("worker") and "transport:" in line]
            assert transport, stack.text[-3000:]
            assert f"@{announced.removeprefix('redis://')}" in transport[0], transport  # Transport://:**@host:port/0
            # PORT everywhere: the banner's sign-in and admin lines.
            base = f"http://127.0.0.1:{stack.port}"
            assert f"Sign in at {base}/ as admin" in stack.text
            assert f"Django admin: {base}/admin/" in stack.text
            assert "127.0.0.1:8000" not in stack.text
        assert brokers[0] != brokers[1]
        # Each portal runs its own work (open_url on its own port), side by side.
        uids = [_open_a_notebook_and_cancel_it(f"http://127.0.0.1:{stack.port}") for stack in stacks]
        time.sleep(3)  # the cancels' delete tasks
        for stack, other_uid in zip(stacks, reversed(uids), strict=True):
            worker = "\n".join(line for line in stack.output if line.startswith(("worker", "provisi")))
            assert other_uid not in worker  # no task of the other portal reached this one's worker
            for stray in ("unknown here", "refused to delete", "not by uid"):
                assert stray not in worker
            failures = [line for line in stack.output if "raised unexpected" in line or "Traceback" in line]
            assert failures == [], failures[:5]
    finally:
        codes = [stack.stop() for stack in stacks]
    assert codes == [0, 0], [stack.output[-20:] for stack in stacks]
