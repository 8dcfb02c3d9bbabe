"""SSH through the portal (issue 39): what the tunnel keeps of a transfer's speed, and how many idle SSH
tunnels one proxy process holds.

The issue's figure is measured on the real nodes (localcluster/realnode.py) with the dev-environment image
(Debian's sshd as the pod's own user) and Debian's OpenSSH client: `scp` of 256 MB into the pod through the
portal (ProxyCommand `gpuportal ssh-proxy`, the proxy in this process reading the pod's address from the
cluster as in production) and the same `scp` straight to the pod's address on port 2222 (the real nodes'
bridge reaches pods from this host). Where the real nodes cannot run (check_host names what this machine
lacks), the line says so as an ERROR with the reason: no stand-in figure is printed under its name.

The stand-in half:
Three processes on loopback, as bench_proxy has them: a stand-in for the pod's sshd (a TCP server: the
proxy never reads SSH, it moves bytes), the proxy (the real ServiceProxy under uvicorn, each tunnel opened
with a real API token checked against the run's database, rechecked every SSH_RECHECK_SECONDS), and this
client. The transfer through the portal is the real `gpuportal ssh-proxy` process, as ssh runs it as its
ProxyCommand; straight to the pod is a plain TCP read. Sides alternate, each going first in turn.

Lines printed:
  ssh_tunnel_throughput_ratio  real nodes: seconds of `scp` of 256 MB straight to the pod / through the portal
                               (= MB/s through ÷ MB/s straight), the median of SCP_ROUNDS alternating pairs
  ssh_tunnel_raw_throughput_ratio
                               stand-in: MB/s of 256 MB from a loopback "pod" through `gpuportal ssh-proxy` /
                               straight from its socket, the median of the rounds' pairs. Raw bytes, no
                               encryption on either side: the tunnel's own share of the cost, the stricter
                               figure, and the one to profile the tunnel with.
  ssh_sessions_per_proxy       tunnels opened through one proxy process, left idle, that all still carry
                               bytes both ways afterwards (SESSIONS tried; goal >= 1000); 0 if any failed
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.bench_proxy import _free_port, _raise_fd_limit, _wait_port

FIGURES = ["ssh_tunnel_raw_throughput_ratio", "ssh_sessions_per_proxy", "ssh_tunnel_throughput_ratio"]
SCP_ROUNDS = 3
BLOB_MB = 256
ROUNDS = 5
SESSIONS = 1000
UID = "b0c0ffee00000039"
CHUNK = 256 * 1024


def serve_pod(port: int) -> None:
    """The pod's sshd stand-in: `D` sends BLOB_MB and closes; `E` echoes until the client goes."""
    blob = os.urandom(CHUNK)

    def handle(conn: socket.socket) -> None:
        with conn:
            mode = conn.recv(1)
            if mode == b"D":
                for _ in range(BLOB_MB * 1024 * 1024 // CHUNK):
                    conn.sendall(blob)
                conn.shutdown(socket.SHUT_WR)
                while conn.recv(65536):
                    pass
            elif mode == b"E":
                while data := conn.recv(65536):
                    conn.sendall(data)

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(4096)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def serve_proxy(port: int, pod_port: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    import uvicorn

    from proxy.app import ServiceProxy

    app = ServiceProxy(endpoints=lambda namespace, service: ("127.0.0.1", 1), ssh_port=pod_port)
    uvicorn.run(
        app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio",
        ws_per_message_deflate=False, lifespan="on", backlog=4096,
    )  # fmt: skip


def _prepare_service() -> tuple[str, Any]:
    """A running service owned by a researcher with an API token; returns the token and its row."""
    from django.contrib.auth import get_user_model

    from api.tokens import token_create
    from identity.models import Membership
    from jobs.models import GpuType, Kind, State, Team, Workload

    user, _ = get_user_model().objects.get_or_create(username="bench-ssh")
    team, _ = Team.objects.get_or_create(slug="bench-ssh", defaults={"name": "Bench SSH"})
    Membership.objects.get_or_create(user=user, team=team)
    gpu_type, _ = GpuType.objects.get_or_create(
        slug="bench-ssh", defaults={"display_name": "Bench", "node_label_value": "bench-ssh"}
    )
    Workload.objects.filter(uid=UID).delete()
    Workload.objects.create(
        uid=UID, team=team, owner=user, name="bench-devbox", kind=Kind.SERVICE, image="docker.io/x:1",
        gpu_type=gpu_type, gpu_count=1, port=8888, time_limit_seconds=3600, state=State.RUNNING,
        namespace="gpuportal-bench", k8s_name="bench-devbox",
    )  # fmt: skip
    issued = token_create(user=user, name="bench")
    return issued.raw, issued.token


def _straight(pod_port: int) -> float:
    started = time.perf_counter()
    size = 0
    with socket.create_connection(("127.0.0.1", pod_port)) as conn:
        conn.sendall(b"D")
        while data := conn.recv(1 << 20):
            size += len(data)
    return _rate(size, started)


def _through_portal(proxy: str, token: str) -> float:
    env = {**os.environ, "GPUPORTAL_URL": proxy, "GPUPORTAL_TOKEN": token}
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "ssh-proxy", UID], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    child.stdin.write(b"D")
    child.stdin.flush()
    size = 0
    while size < BLOB_MB * 1024 * 1024 and (data := child.stdout.read1(1 << 20)):
        size += len(data)
    child.stdin.close()
    child.wait(60)
    return _rate(size, started)


def _rate(size: int, started: float) -> float:
    if size != BLOB_MB * 1024 * 1024:
        raise RuntimeError(f"received {size} bytes, expected {BLOB_MB} MB")
    return size / (time.perf_counter() - started) / 1e6


async def _sessions(proxy: str, token: str) -> int:
    from websockets.asyncio.client import connect

    url = proxy.replace("http://", "ws://") + f"/w/_ssh/{UID}"
    tunnels = []

    async def open_one() -> Any:
        ws = await connect(url, additional_headers={"Authorization": f"Bearer {token}"}, compression=None,
                           ping_interval=None, open_timeout=120)  # fmt: skip
        await ws.send(b"E")
        return ws

    try:
        for start in range(0, SESSIONS, 100):  # in batches: a burst of 1000 handshakes is not "idle"
            opened = await asyncio.gather(*(open_one() for _ in range(start, min(start + 100, SESSIONS))),
                                          return_exceptions=True)  # fmt: skip
            failures = [o for o in opened if isinstance(o, BaseException)]
            tunnels += [o for o in opened if not isinstance(o, BaseException)]
            if failures:
                print(f"# ssh_sessions: {len(failures)} tunnels failed to open: {failures[0]!r}", flush=True)
                return 0
        await asyncio.sleep(5)  # idle, all of them open at once

        async def carries(n: int, ws: Any) -> bool:
            await ws.send(f"still there {n}".encode())
            got = b""
            while len(got) < len(f"still there {n}"):
                got += await asyncio.wait_for(ws.recv(), timeout=60)
            return got == f"still there {n}".encode()

        results = await asyncio.gather(*(carries(n, ws) for n, ws in enumerate(tunnels)), return_exceptions=True)
        alive = sum(1 for r in results if r is True)
        print(f"# ssh_sessions: {alive} of {len(tunnels)} carried bytes after idling", flush=True)
        return alive if alive == SESSIONS else 0
    finally:
        await asyncio.gather(*(ws.close() for ws in tunnels), return_exceptions=True)


def run(ctx: Any) -> Iterator[tuple[str, float | int]]:
    ctx.django()
    _raise_fd_limit()
    token, row = _prepare_service()
    pod_port, proxy_port = _free_port(), _free_port()
    env = {**os.environ, "PROXY_ACTIVITY_WRITE_SECONDS": "60", "LOG_LEVEL": "WARNING"}
    me = [sys.executable, "-m", "benchmarks.bench_ssh"]
    children = [
        subprocess.Popen([*me, "--pod", str(pod_port)], env=env),
        subprocess.Popen([*me, "--proxy", str(proxy_port), str(pod_port)], env=env),
    ]
    try:
        for port in (pod_port, proxy_port):
            _wait_port(port)
        proxy = f"http://127.0.0.1:{proxy_port}"
        speeds: dict[str, list[float]] = {"portal": [], "straight": []}
        for turn in range(ROUNDS):
            sides = [("straight", lambda: _straight(pod_port)), ("portal", lambda: _through_portal(proxy, token))]
            for side, measure in sides[turn % 2 :] + sides[: turn % 2]:
                speeds[side].append(measure())
        rounded = {side: [round(v) for v in values] for side, values in speeds.items()}
        print(f"# ssh_tunnel MB/s per round: portal {rounded['portal']}, straight {rounded['straight']}", flush=True)
        pairs = [p / s for p, s in zip(speeds["portal"], speeds["straight"], strict=True)]
        yield "ssh_tunnel_raw_throughput_ratio", round(statistics.median(pairs), 3)
        yield "ssh_sessions_per_proxy", asyncio.run(_sessions(proxy, token))
    finally:
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        from jobs.models import Workload

        Workload.objects.filter(uid=UID).delete()
        row.delete()
    yield "ssh_tunnel_throughput_ratio", _scp_on_real_nodes(ctx)


def _log(line: str) -> None:
    print(f"# [ssh real nodes] {line}", file=sys.stderr, flush=True)


def _scp_on_real_nodes(ctx: Any) -> float:
    """The issue's figure: scp of BLOB_MB into a dev environment on a real node, through the portal ÷ straight."""
    from localcluster.procs import ClusterError

    ctx.django()

    try:
        cluster = ctx.cluster()
    except ClusterError as exc:
        raise RuntimeError(f"the real nodes are not available in this run (no cluster: {exc})") from None
    from benchmarks.bench_realpods import _start_real_nodes, _stop_real_nodes

    nodes = None
    if getattr(cluster, "real", None) is None:
        try:
            nodes = _start_real_nodes(cluster, ("devenv",))
        except ClusterError as exc:
            raise RuntimeError(f"the real nodes are not available in this run: {exc}") from None
    else:  # GPUPORTAL_REAL_NODES: the run's cluster has them; they need the dev environment's image
        from localcluster import images

        path = images.ensure(["devenv"], progress=_log)["devenv"]
        for spec in cluster.real.specs:
            cluster.real.import_image(spec, path)
        cluster.real.wait_until_listed()  # the portal refuses images its nodes do not list
    try:
        return _scp_ratio(ctx)
    finally:
        if nodes is not None:
            _stop_real_nodes(nodes)


def _scp_ratio(ctx: Any) -> float:
    import tempfile

    import uvicorn

    from api.tokens import token_create
    from benchmarks.bench_realpods import _real_nodes_listed
    from benchmarks.engine import Engine, wait_until
    from identity.sshkeys import key_add
    from jobs.kube import client as kube
    from jobs.models import CatalogImage, State, Workload
    from jobs.services.seeding import apply_seed
    from jobs.services.submission.intake import workload_submit
    from localcluster.images import IMAGES, catalog_seed
    from proxy.app import ServiceProxy

    engine = Engine(ctx)
    server = None
    try:
        apply_seed(catalog_seed())
        team, user = engine.team()
        wait_until(_real_nodes_listed, 120, "the inventory does not list the real nodes' GPUs", interval=1.0)
        entry = CatalogImage.objects.get(reference=IMAGES["devenv"])
        work = Path(tempfile.mkdtemp(prefix="bench-ssh-"))
        key = work / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        key_add(user=user, name="bench", public_key=(work / "id_ed25519.pub").read_text())
        spec = {"name": "bench-devenv", "kind": "service", "catalog_image": entry.id, "image": entry.reference,
                "gpu_type": "real-p100", "gpu_count": 1, "port": 8888, "time_limit_seconds": 1800}  # fmt: skip
        workload = workload_submit(team=team, owner=user, spec=spec)
        wait_until(
            lambda: Workload.objects.get(id=workload.id).state in (State.RUNNING, *State.final()), 300,
            "the dev environment did not start on a real node within 300 s", interval=1.0,
        )  # fmt: skip
        workload.refresh_from_db()
        if workload.state != State.RUNNING:
            raise RuntimeError(f"the dev environment ended: {workload.state} {workload.message}")
        # The pod is Ready (in its EndpointSlice) once JupyterLab answers, a little after Running.
        deadline = time.monotonic() + 180
        while (address := kube.ready_endpoint(workload.namespace, workload.k8s_name, api=engine.admin)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the dev environment's pod never became Ready within 180 s")
            time.sleep(1)
        app = ServiceProxy(endpoints=lambda ns, svc: kube.ready_endpoint(ns, svc, api=engine.admin))
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio",
            ws_per_message_deflate=False, lifespan="on",
        ))  # fmt: skip
        threading.Thread(target=server.run, daemon=True).start()
        _wait_port(port)
        issued = token_create(user=user, name="bench-ssh")
        env = {**os.environ, "GPUPORTAL_URL": f"http://127.0.0.1:{port}", "GPUPORTAL_TOKEN": issued.raw}
        common = ["-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-F", "/dev/null",
                  "-o", f"UserKnownHostsFile={work / 'known_hosts'}", "-o", "StrictHostKeyChecking=no"]  # fmt: skip
        portal = [*common, "-o", f"ProxyCommand={sys.executable} -m cli.main ssh-proxy %h", "-o",
                  f"HostKeyAlias=gpuportal-{workload.uid}"]  # fmt: skip
        blob = work / "blob.bin"
        with blob.open("wb") as out:
            for _ in range(BLOB_MB):
                out.write(os.urandom(1024 * 1024))
        ready = time.monotonic() + 180  # sshd starts beside JupyterLab; the keys' Secret may lag a little
        while subprocess.run(["ssh", *portal, f"user@{workload.uid}", "true"], env=env, capture_output=True,
                             timeout=90, check=False).returncode != 0:  # fmt: skip
            if time.monotonic() > ready:
                raise RuntimeError("ssh through the portal never got in to the dev environment")
            time.sleep(2)
        sides = {
            "portal": ["scp", *portal, str(blob), f"user@{workload.uid}:/tmp/bench.bin"],
            "straight": ["scp", *common, "-P", "2222", str(blob), f"user@{address[0]}:/tmp/bench.bin"],
        }
        seconds: dict[str, list[float]] = {"portal": [], "straight": []}
        for turn in range(SCP_ROUNDS):
            order = ["straight", "portal"] if turn % 2 == 0 else ["portal", "straight"]
            for side in order:
                started = time.perf_counter()
                done = subprocess.run(sides[side], env=env, capture_output=True, timeout=600, check=False)
                if done.returncode != 0:
                    raise RuntimeError(f"scp {side} failed: {done.stderr.decode()[-300:]}")
                seconds[side].append(time.perf_counter() - started)
        rates = {side: [round(BLOB_MB * 1.048576 / s) for s in values] for side, values in seconds.items()}
        print(f"# ssh_tunnel scp MB/s per round: portal {rates['portal']}, straight {rates['straight']}", flush=True)
        pairs = [s / p for p, s in zip(seconds["portal"], seconds["straight"], strict=True)]
        return round(statistics.median(pairs), 3)
    finally:
        if server is not None:
            server.should_exit = True
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_ssh")
    parser.add_argument("--pod", type=int, metavar="PORT")
    parser.add_argument("--proxy", type=int, nargs=2, metavar=("PORT", "POD_PORT"))
    options = parser.parse_args()
    _raise_fd_limit()
    if options.pod:
        serve_pod(options.pod)
    elif options.proxy:
        serve_proxy(*options.proxy)
    else:
        parser.error("the benchmark runs through `python -m benchmarks ssh`")


if __name__ == "__main__":
    main()
