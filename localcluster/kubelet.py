"""The kubelet-facing parts of the simulator: node registration and heartbeats, and the log endpoint.

Logs: kube-apiserver proxies `GET /api/v1/namespaces/NS/pods/P/log` to
`https://<node InternalIP>:<daemonEndpoints.kubeletEndpoint.Port>/containerLogs/NS/P/CONTAINER`, showing
its kubelet client certificate; we serve that path over TLS with a certificate from the cluster CA.
The lines are synthetic (nothing really runs) but honest: they say they are simulated, and their times
are the container's real start, progress and exit times.
"""

from __future__ import annotations

import contextlib
import logging
import math
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from localcluster.apiclient import ApiError, ApiUnavailable, rfc3339, rfc3339_nano
from localcluster.pools import Pool

if TYPE_CHECKING:
    from localcluster.simulator import PodRecord, Simulator

log = logging.getLogger("node-simulator")
SIMULATED_ANNOTATION = "sim.gpuportal.dev/simulated"
HEARTBEAT_SECONDS = 10.0
NOT_READY_TAINTS = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


def node_object(name: str, pool: Pool) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels(name, pool),
            "annotations": {
                SIMULATED_ANNOTATION: "true",
                "sim.gpuportal.dev/note": "simulated by localcluster's node simulator; no real kubelet",
            },
        },
    }


def node_labels(name: str, pool: Pool) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "gputype": pool.gputype,
        "gpuportal.dev/pool": pool.name,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": pool.gpu_product,
        "nvidia.com/gpu.count": str(pool.gpus_per_node),
        "nvidia.com/cuda.driver.major": pool.cuda_major,
        "nvidia.com/cuda.driver.minor": pool.cuda_minor,
    }


def node_status(pool: Pool, kubelet_port: int, now: float) -> dict[str, Any]:
    resources = {
        "cpu": pool.cpu,
        "memory": pool.memory,
        "pods": str(pool.max_pods),
        pool.resource[0]: str(pool.resource[1]),
        "ephemeral-storage": "500Gi",
    }
    stamp = rfc3339(now)

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }

    return {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "simulated"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "simulated"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "simulated"),
            condition("Ready", "True", "KubeletReady", "[simulated] node simulator is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": "localhost"},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "machineID": "simulated",
            "systemUUID": "simulated",
            "bootID": "simulated",
            "kernelVersion": "simulated",
            "osImage": "GPU Portal node simulator",
            "containerRuntimeVersion": "simulated://1.0",
            "kubeletVersion": "v1.20.2",
            "kubeProxyVersion": "v1.20.2",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


class NodeKeeper:
    """Registers the simulated nodes and keeps them Ready."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.api = sim.api

    def register_all(self, deadline_s: float = 60.0) -> None:
        deadline = time.monotonic() + deadline_s
        for name, pool in self.sim.nodes.items():
            while True:
                try:
                    self.register(name, pool)
                    break
                except (ApiError, ApiUnavailable) as exc:
                    if time.monotonic() > deadline:
                        raise
                    log.warning("registering node %s: %s; retrying", name, exc)
                    time.sleep(0.5)

    def register(self, name: str, pool: Pool) -> None:
        body = node_object(name, pool)
        try:
            self.api.request("POST", "/api/v1/nodes", body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            self.api.patch(f"/api/v1/nodes/{name}", {"metadata": body["metadata"]})
        self.post_status(name, pool)
        self.clear_taints(name)

    def post_status(self, name: str, pool: Pool) -> None:
        self.api.patch(
            f"/api/v1/nodes/{name}/status", {"status": node_status(pool, self.sim.kubelet_port, time.time())}
        )

    def clear_taints(self, name: str) -> None:
        # New nodes get node.kubernetes.io/not-ready from the TaintNodesByCondition admission plugin; the
        # node lifecycle controller (which we leave out) would clear it once the node reports Ready.
        for _ in range(5):
            node = self.api.get(f"/api/v1/nodes/{name}")
            taints = node.get("spec", {}).get("taints") or []
            kept = [t for t in taints if t.get("key") not in NOT_READY_TAINTS]
            if len(kept) == len(taints):
                return
            patch = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": kept},
            }
            try:
                self.api.patch(f"/api/v1/nodes/{name}", patch)
                return
            except ApiError as exc:
                if exc.status != 409:
                    raise

    def run_heartbeats(self) -> None:
        while True:
            time.sleep(HEARTBEAT_SECONDS)
            for name, pool in self.sim.nodes.items():
                try:
                    self.post_status(name, pool)
                    self.clear_taints(name)
                except ApiError as exc:
                    if exc.status == 404:
                        log.info("node %s was deleted; registering it again", name)
                        with contextlib.suppress(ApiError, ApiUnavailable):
                            self.register(name, pool)
                    else:
                        log.warning("heartbeat for %s: %s", name, exc)
                except ApiUnavailable:
                    break  # the API server is down; try again next round


# -- logs --------------------------------------------------
class ContainerLog:
    """The synthetic log of one container run: a start line, a progress line per second, an exit line."""

    def __init__(self, rec: PodRecord, container: str, image: str, pool: Pool, previous: bool) -> None:
        self.rec = rec
        self.container, self.image, self.pool = container, image, pool
        if previous and rec.history:
            self.started, self.finished, self.code, self.reason = rec.history[-1]
        else:
            self.started = rec.started_at or 0.0
            self.finished = rec.finished_at if rec.state in ("terminated", "crashloop") else None
            self.code, self.reason = rec.exit_code, rec.reason
        self.extra = list(rec.file_log)  # what the container did with its files, right after starting
        planned = rec.plan.run_seconds
        self.planned = f"{planned:g}s" if not math.isinf(planned) else "until deleted"

    def refresh(self) -> None:
        if self.finished is None and self.rec.finished_at is not None:
            self.finished, self.code, self.reason = self.rec.finished_at, self.rec.exit_code, self.rec.reason

    def count(self, now: float) -> int:
        end = self.finished if self.finished is not None else now
        progress = max(0, int(end - self.started))
        if self.finished is not None and progress and self.started + progress >= self.finished:
            progress -= 1  # no progress line at the exit instant
        return 1 + len(self.extra) + progress + (1 if self.finished is not None else 0)

    def line(self, i: int) -> tuple[float, str]:
        rec = self.rec
        if i == 0:
            return self.started, (
                f"[simulated] container {self.container} started on node {rec.node} with {rec.gpus} GPU(s) "
                f"({self.pool.gpu_product}, CUDA driver {self.pool.cuda_driver}); image {self.image}; "
                f"planned run: {self.planned}"
            )
        if i <= len(self.extra):
            return self.started, self.extra[i - 1]
        i -= len(self.extra)
        progress = self.count(time.time()) - len(self.extra) - (2 if self.finished is not None else 1)
        if i <= progress:
            return self.started + i, f"[simulated] running: {i}s elapsed"
        assert self.finished is not None
        return self.finished, f"[simulated] container exited with code {self.code} ({self.reason})"


class LogHandler(BaseHTTPRequestHandler):
    server_version = "gpuportal-node-simulator"
    sim: Simulator

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)

    def _error(self, code: int, message: str) -> None:
        data = message.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if url.path in ("/healthz", "/readyz"):
            self._error(200, "ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._error(404, f"[simulated kubelet] only /containerLogs/NS/POD/CONTAINER is served, not {url.path}")
            return
        _, namespace, pod, container = parts
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        sim = self.sim
        with sim.lock:
            uid = sim.by_name.get((namespace, pod))
            rec = sim.records.get(uid) if uid else None
            if rec is None:
                self._error(404, f'pod "{pod}" in namespace "{namespace}" is not known to this node')
                return
            images = dict(rec.containers)
            if container not in images:
                self._error(400, f'container "{container}" is not valid for pod "{pod}"')
                return
            previous = query.get("previous") == "true"
            if rec.started_at is None or (previous and not rec.history):
                reason = rec.pull_stage if rec.state == "pullfail" else "ContainerCreating"
                what = "previous terminated container" if previous else "container"
                self._error(400, f'{what} "{container}" in pod "{pod}" is waiting to start: {reason}')
                return
            clog = ContainerLog(rec, container, images[container], sim.nodes[rec.node], previous)
        self._stream(clog, query)

    def _stream(self, clog: ContainerLog, query: dict[str, str]) -> None:
        follow = query.get("follow") == "true"
        timestamps = query.get("timestamps") == "true"
        limit = int(query["limitBytes"]) if query.get("limitBytes", "").isdigit() else None
        since = time.time() - int(query["sinceSeconds"]) if query.get("sinceSeconds", "").isdigit() else None
        if query.get("sinceTime"):
            with contextlib.suppress(ValueError):
                from localcluster.apiclient import parse_rfc3339

                since = parse_rfc3339(query["sinceTime"])
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        now = time.time()
        total = clog.count(now)
        first = 0
        if query.get("tailLines", "").isdigit():
            first = max(0, total - int(query["tailLines"]))
        sent = 0

        def emit(i: int) -> bool:
            nonlocal sent
            ts, text = clog.line(i)
            if since is not None and ts < since:
                return True
            data = ((rfc3339_nano(ts) + " ") if timestamps else "") + text + "\n"
            raw = data.encode()
            if limit is not None and sent + len(raw) > limit:
                raw = raw[: max(0, limit - sent)]
            if raw:
                self.wfile.write(raw)
                sent += len(raw)
            return limit is None or sent < limit

        try:
            i = first
            while i < total:
                if not emit(i):
                    return
                i += 1
            self.wfile.flush()
            while follow and clog.finished is None:
                time.sleep(0.25)
                with self.sim.lock:
                    clog.refresh()
                    gone = self.sim.records.get(clog.rec.uid) is None or clog.rec.state == "deleting"
                total = clog.count(time.time())
                while i < total:
                    if not emit(i):
                        return
                    i += 1
                self.wfile.flush()
                if gone:
                    return
        except (BrokenPipeError, ConnectionResetError):
            return


def serve_logs(sim: Simulator, cert: str, key: str, ca_file: str) -> ThreadingHTTPServer:
    handler = type("BoundLogHandler", (LogHandler,), {"sim": sim})
    server = ThreadingHTTPServer(("127.0.0.1", sim.kubelet_port), handler)
    server.daemon_threads = True
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca_file)
    ctx.load_cert_chain(cert, key)
    # Only the API server (with its kubelet client certificate from our CA) may read logs.
    ctx.verify_mode = ssl.CERT_REQUIRED
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True, name="kubelet-logs").start()
    return server
