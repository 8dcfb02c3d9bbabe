"""LocalCluster: a real Kubernetes 1.20 control plane plus our node simulator, in one state directory.

    cluster = LocalCluster(state_dir=Path("var/cluster"))
    info = cluster.start()          # ClusterInfo(kubeconfig, server, admin_token, ...)
    cluster.stop_component("kube-apiserver"); cluster.start_component("kube-apiserver")  # same port
    cluster.stop()                  # stops everything, leaves no process

Layout of the state directory: pki/ (CA, certs, tokens), etcd/ (data), logs/<component>.log,
run/<component>.pid, ports.json (reused on the next start when still free), network.json (the pod subnet, a
loopback /24 of its own), kubeconfig, simulator.json.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import ipaddress
import json
import os
import secrets
import shutil
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from localcluster import admission
from localcluster.pki import Pki
from localcluster.pools import PoolsConfig
from localcluster.procs import (
    ClusterError,
    Component,
    free_port,
    log_tail,
    port_is_free,
    port_owner,
    reap_stale,
)
from localcluster.realnode import RealNodes, node_images, requested_count

KUBE_VERSION = "1.20.2"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
COMPONENTS = (
    "etcd",
    "admission-guard",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "node-simulator",
)
SERVICE_CIDR = "10.96.0.0/16"
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_HINT = "run `bash localcluster/build.sh` (or `make cluster-build`); it rebuilds the cache"


@dataclass(frozen=True)
class ClusterInfo:
    kubeconfig: Path
    server: str
    admin_token: str
    ca_file: Path
    state_dir: Path


def cache_dir() -> Path:
    """Same rule as build.sh: $GPUPORTAL_CACHE, else $XDG_CACHE_HOME/gpuportal, else ~/.cache/gpuportal."""
    if os.environ.get("GPUPORTAL_CACHE"):
        return Path(os.environ["GPUPORTAL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuportal"


def default_bin_dir() -> Path:
    return cache_dir() / f"kubernetes-{KUBE_VERSION}" / "bin"


def verify_binaries(bin_dir: Path) -> None:
    """Raise ClusterError unless bin_dir holds the three binaries exactly as build.sh recorded them."""
    sums = bin_dir / "SHA256SUMS"
    if not bin_dir.is_dir() or not sums.is_file():
        raise ClusterError(f"the Kubernetes {KUBE_VERSION} binaries are not built (no {sums}).\n  fix: {BUILD_HINT}.")
    expected: dict[str, str] = {}
    for line in sums.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            expected[parts[1].lstrip("*")] = parts[0]
    for name in BINARIES:
        path = bin_dir / name
        if name not in expected or not path.is_file():
            raise ClusterError(f"the binary cache in {bin_dir} is incomplete ({name} missing).\n  fix: {BUILD_HINT}.")
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                digest.update(chunk)
        if digest.hexdigest() != expected[name]:
            raise ClusterError(
                f"the binary cache in {bin_dir} is corrupt ({name} does not match SHA256SUMS; "
                f"a build was interrupted or the file was changed).\n  fix: {BUILD_HINT}."
            )
        if not os.access(path, os.X_OK):
            raise ClusterError(f"{path} is not executable.\n  fix: {BUILD_HINT}.")


def find_etcd() -> str:
    """etcd from Debian's etcd-server; GPUPORTAL_ETCD may name another binary."""
    override = os.environ.get("GPUPORTAL_ETCD")
    if override:
        found = override if os.access(override, os.X_OK) else None
    else:
        found = shutil.which("etcd") or ("/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None)
    if not found:
        raise ClusterError(
            "etcd is not installed (it comes from Debian's etcd-server package).\n"
            "  fix: `sudo apt-get install etcd-server`\n"
            "  (or run `bash localcluster/build.sh`, which installs it)."
        )
    return found


class LocalCluster:
    # The pytest fixture may hand out an ExternalCluster instead, which cannot stop components.
    owns_processes = True

    def __init__(
        self,
        state_dir: Path | str,
        pools: PoolsConfig | None = None,
        *,
        bin_dir: Path | None = None,
        apiserver_port: int | None = None,
        log: Callable[[str], None] | None = None,
        real_nodes: int | None = None,
    ) -> None:
        self.state_dir = Path(state_dir).resolve()
        # Real nodes (kubelet + containerd) beside the simulated ones: GPUPORTAL_REAL_NODES, see realnode.py.
        self.real_node_count = requested_count() if real_nodes is None else real_nodes
        self.real: RealNodes | None = None
        self.pools = pools or PoolsConfig.default()
        self.bin_dir = bin_dir or default_bin_dir()
        self.requested_port = apiserver_port
        self._log = log or (lambda msg: print(f"[localcluster] {msg}", file=sys.stderr, flush=True))
        self.pki = Pki(self.state_dir / "pki")
        self.ports: dict[str, int] = {}
        self.components: dict[str, Component] = {}
        self.info: ClusterInfo | None = None
        self._lock_file: IO[str] | None = None

    # -- public ------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self._require_info().kubeconfig

    @property
    def server(self) -> str:
        return self._require_info().server

    @property
    def admin_token(self) -> str:
        return self._require_info().admin_token

    @property
    def ca_file(self) -> Path:
        return self._require_info().ca_file

    def start(self, timeout: float = 120.0) -> ClusterInfo:
        """Start every component and wait until all nodes are Ready. Raises ClusterError on failure
        (after stopping whatever it started)."""
        started = time.monotonic()
        timeout += 120.0 if self.real_node_count else 0.0
        for attempt in (1, 2):
            try:
                self._prepare()
                self._start_all(started + timeout)
                break
            except ClusterError as exc:
                self.stop()
                # Free ports are picked before the components bind them; a cluster starting beside us
                # can take one in between. Pick all ports afresh once.
                if attempt == 1 and "address already in use" in str(exc) and self.requested_port is None:
                    self._log("a port was taken while starting; retrying with new ports")
                    (self.state_dir / "ports.json").unlink(missing_ok=True)
                    continue
                raise
            except BaseException:
                self.stop()
                raise
        self._log(f"cluster ready in {time.monotonic() - started:.1f}s: {self.server}")
        return self._require_info()

    def stop(self) -> None:
        if self.real is not None:
            self.real.stop()
        for name in reversed(COMPONENTS):
            component = self.components.get(name)
            if component is not None:
                component.stop()
        if self._lock_file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_file, fcntl.LOCK_UN)
                self._lock_file.close()
            self._lock_file = None

    def stop_component(self, name: str) -> None:
        self._component(name).stop()

    def start_component(self, name: str, timeout: float = 60.0) -> None:
        """Restart one component with the same ports and state (e.g. the API server after a fault test)."""
        component = self._component(name)
        if component.alive():
            return
        component.start()
        self._wait_component(name, time.monotonic() + timeout)

    def component_pid(self, name: str) -> int | None:
        return self._component(name).pid

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- preparation -------------------------------------------
    def _require_info(self) -> ClusterInfo:
        if self.info is None:
            raise RuntimeError("the cluster is not started")
        return self.info

    def _component(self, name: str) -> Component:
        if name not in self.components:
            raise ValueError(f"unknown component {name!r}; one of {', '.join(COMPONENTS)}")
        return self.components[name]

    def _prepare(self) -> None:
        verify_binaries(self.bin_dir)
        etcd = find_etcd()
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            for sub in ("logs", "run"):
                (self.state_dir / sub).mkdir(exist_ok=True)
        except OSError as exc:
            raise ClusterError(f"cannot create the state directory {self.state_dir}: {exc.strerror}") from exc
        self._lock_file = open(self.state_dir / "lock", "a+")  # noqa: SIM115
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._lock_file.close()
            self._lock_file = None
            raise ClusterError(
                f"another cluster is running from {self.state_dir}.\n"
                f"  fix: `python -m localcluster down --state-dir {self.state_dir}`,"
                " or use another --state-dir."
            ) from exc
        # The lock is ours, so whatever pid files remain belong to a crashed run.
        reap_stale(self.state_dir / "run", str(self.state_dir), self._log)
        if self.pki.ensure():
            self._log(f"made a new CA, certificates and admin token in {self.pki.directory}")
            # New service-account keys invalidate tokens stored in an old etcd; start that afresh.
            self._discard_etcd("the PKI was recreated")
        self._pick_ports()
        self._write_files()
        self._define_components(etcd)
        if self.real_node_count:
            sandbox, archives = node_images(self._log)
            self.real = RealNodes(self.state_dir / "real", pki=self.pki, server=self.server,
                                  token=self.admin_token, count=self.real_node_count, sandbox_image=sandbox,
                                  images=archives, log=self._log)  # fmt: skip
            self.real.prepare()

    def _discard_etcd(self, why: str) -> None:
        data = self.state_dir / "etcd"
        if data.exists():
            aside = self.state_dir / f"etcd.discarded-{int(time.time())}"
            self._log(f"moving old etcd data aside to {aside.name} ({why})")
            data.rename(aside)

    def _pick_ports(self) -> None:
        ports_file = self.state_dir / "ports.json"
        old: dict[str, int] = {}
        with contextlib.suppress(OSError, ValueError):
            old = {k: int(v) for k, v in json.loads(ports_file.read_text()).items()}
        if self.requested_port is not None:
            if not port_is_free(self.requested_port):
                raise ClusterError(
                    f"port {self.requested_port} on 127.0.0.1 is already in use by "
                    f"{port_owner(self.requested_port)}.\n  fix: stop that process, or choose another port "
                    "(--port), or leave the port out to have a free one picked."
                )
            old["apiserver"] = self.requested_port
        taken: set[int] = set()
        for key in (
            "etcd_client",
            "etcd_peer",
            "apiserver",
            "controller_manager",
            "scheduler",
            "kubelet",
            "admission_guard",
        ):
            port = old.get(key, 0)
            # Reusing last run's ports keeps the kubeconfig stable; a port taken since then is replaced.
            if not port or port in taken or not port_is_free(port):
                if key == "apiserver" and port and self.requested_port is None:
                    self._log(f"port {port} of the last run is in use by {port_owner(port)}; picking another")
                port = free_port()
                while port in taken:
                    port = free_port()
            taken.add(port)
            self.ports[key] = port
        ports_file.write_text(json.dumps(self.ports, indent=2) + "\n")

    def _write_files(self) -> None:
        server = f"https://127.0.0.1:{self.ports['apiserver']}"
        token = self.pki.admin_token()
        kubeconfig = self.state_dir / "kubeconfig"
        import base64

        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gpuportal-local",
                    "cluster": {
                        "server": server,
                        "certificate-authority-data": base64.b64encode(self.pki.ca_cert.read_bytes()).decode(),
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": "gpuportal-local", "context": {"cluster": "gpuportal-local", "user": "admin"}}],
            "current-context": "gpuportal-local",
        }
        tmp = kubeconfig.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
        tmp.chmod(0o600)
        tmp.replace(kubeconfig)
        sim = {
            "server": server,
            "token_file": str(self.pki.admin_token_file),
            "ca_file": str(self.pki.ca_cert),
            "kubelet_port": self.ports["kubelet"],
            "kubelet_cert": str(self.pki.kubelet_serving_cert),
            "kubelet_key": str(self.pki.kubelet_serving_key),
            "pod_subnet": self._pod_subnet(),
            "pools": self.pools.to_dict(),
        }
        (self.state_dir / "simulator.json").write_text(json.dumps(sim, indent=2) + "\n")
        self.info = ClusterInfo(
            kubeconfig=kubeconfig,
            server=server,
            admin_token=token,
            ca_file=self.pki.ca_cert,
            state_dir=self.state_dir,
        )

    def _pod_subnet(self) -> str:
        """This cluster's pod network: a loopback /24 picked at random once and kept in network.json, so
        that clusters running side by side (tests, `make run`, other checkouts) never hand out the same
        pod IP, and a restarted cluster keeps its pods' addresses."""
        network_file = self.state_dir / "network.json"
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            subnet = str(json.loads(network_file.read_text())["pod_subnet"])
            if ipaddress.ip_network(subnet).subnet_of(LOOPBACK):
                return subnet
        # 127.0.x.x and 127.1.x.x are left alone: 127.0.0.1 is everyone's, Debian names the host 127.0.1.1.
        subnet = f"127.{secrets.randbelow(254) + 2}.{secrets.randbelow(256)}.0/24"
        network_file.write_text(json.dumps({"pod_subnet": subnet}, indent=2) + "\n")
        return subnet

    def _define_components(self, etcd: str) -> None:
        sd, p, pki, b = self.state_dir, self.ports, self.pki, self.bin_dir
        kubeconfig = str(sd / "kubeconfig")
        logs, run = sd / "logs", sd / "run"

        def etcd_argv() -> list[str]:
            client, peer = f"http://127.0.0.1:{p['etcd_client']}", f"http://127.0.0.1:{p['etcd_peer']}"
            return [
                etcd, "--name", "localcluster", "--data-dir", str(sd / "etcd"),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"localcluster={peer}", "--initial-cluster-state", "new",
                "--quota-backend-bytes", str(4 << 30), "--snapshot-count", "20000",
                "--log-level", "warn", "--logger", "zap",
            ]  # fmt: skip

        def apiserver_argv() -> list[str]:
            return [
                str(b / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{p['etcd_client']}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={p['apiserver']}", "--insecure-port=0",
                f"--cert-dir={sd / 'pki' / 'apiserver-generated'}",
                f"--tls-cert-file={pki.apiserver_cert}", f"--tls-private-key-file={pki.apiserver_key}",
                f"--client-ca-file={pki.ca_cert}", f"--token-auth-file={pki.token_file}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,"
                "TaintNodesByCondition,DefaultTolerationSeconds,Priority,DefaultStorageClass,"
                "StorageObjectInUseProtection,PersistentVolumeClaimResize,RuntimeClass,"
                "MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ResourceQuota",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--kubelet-client-certificate={pki.kubelet_client_cert}",
                f"--kubelet-client-key={pki.kubelet_client_key}",
                f"--kubelet-certificate-authority={pki.ca_cert}",
                "--kubelet-preferred-address-types=InternalIP",
                "--allow-privileged=true", "--profiling=false",
                # Benchmarks push hundreds of requests a second through one client; the defaults would queue.
                "--max-requests-inflight=800", "--max-mutating-requests-inflight=400",
                "--event-ttl=1h",
                # Max-in-flight limits instead of priority and fairness: less work per request, faster start.
                "--enable-priority-and-fairness=false",
            ]  # fmt: skip

        def controller_manager_argv() -> list[str]:
            return [
                str(b / "kube-controller-manager"),
                f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false", "--port=0", f"--secure-port={p['controller_manager']}",
                "--bind-address=127.0.0.1", f"--cert-dir={sd / 'pki' / 'controller-manager'}",
                f"--service-account-private-key-file={pki.sa_key}", f"--root-ca-file={pki.ca_cert}",
                "--use-service-account-credentials=false",
                # No cloud, no node IPAM and no node lifecycle (the simulator keeps nodes Ready itself).
                "--controllers=*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-route,-service,"
                "-attachdetach,-persistentvolume-expander,-csrsigning,-csrapproving,-csrcleaner",
                "--kube-api-qps=300", "--kube-api-burst=600",
            ]  # fmt: skip

        def scheduler_argv() -> list[str]:
            return [
                str(b / "kube-scheduler"),
                f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false", "--port=0", f"--secure-port={p['scheduler']}",
                "--bind-address=127.0.0.1", f"--cert-dir={sd / 'pki' / 'scheduler'}",
                # The default 50 QPS would cap binding at 50 pods/s.
                "--kube-api-qps=500", "--kube-api-burst=1000",
            ]  # fmt: skip

        def simulator_argv() -> list[str]:
            return [sys.executable, "-m", "localcluster.simulator", "--config", str(sd / "simulator.json")]

        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
        env.pop("KUBECONFIG", None)
        argvs = {
            "etcd": etcd_argv,
            "admission-guard": lambda: admission.guard_argv(pki, p["admission_guard"]),
            "kube-apiserver": apiserver_argv,
            "kube-controller-manager": controller_manager_argv,
            "kube-scheduler": scheduler_argv,
            "node-simulator": simulator_argv,
        }
        self.components = {
            name: Component(name, argvs[name], log_dir=logs, run_dir=run, env=env) for name in COMPONENTS
        }

    # -- startup -----------------------------------------------
    def _start_all(self, deadline: float) -> None:
        self._log(f"state in {self.state_dir}; logs in {self.state_dir / 'logs'}")
        self._log(f"starting etcd on 127.0.0.1:{self.ports['etcd_client']}")
        etcd = self.components["etcd"]
        etcd.start()
        try:
            self._wait_component("etcd", min(deadline, time.monotonic() + 15))
        except ClusterError as exc:
            if not (self.state_dir / "etcd").exists():
                raise
            # A crashed run can leave etcd data that will not open; keep it aside and start clean.
            self._log(f"etcd failed on the existing data; retrying with a fresh store.\n{exc}")
            etcd.stop()
            self._discard_etcd("etcd could not open it")
            etcd.start()
            self._wait_component("etcd", min(deadline, time.monotonic() + 15))
        # Before the API server, which may call it as soon as it serves (admission/, localcluster/admission.py).
        self.components["admission-guard"].start()
        self._wait_component("admission-guard", deadline)
        admission.write_info(self.state_dir, self.ports["admission_guard"], self.pki.ca_cert)
        self._log(f"starting kube-apiserver on {self.server}")
        self.components["kube-apiserver"].start()
        self._wait_component("kube-apiserver", deadline)
        try:
            admission.forget_registrations(self.ports["apiserver"], self.pki.admin_token(), self.pki.ca_cert)
        except (OSError, http.client.HTTPException) as exc:
            self._log(f"could not delete the admission guard's old registrations: {exc}")
        self._log("starting kube-controller-manager, kube-scheduler and the node simulator")
        for name in ("kube-controller-manager", "kube-scheduler", "node-simulator"):
            self.components[name].start()
        for name in ("kube-controller-manager", "kube-scheduler", "node-simulator"):
            self._wait_component(name, deadline)
        self._log("waiting for the token controller (default service account token)")
        self.components["kube-controller-manager"].wait_until(
            self._default_sa_ready, timeout=max(1.0, deadline - time.monotonic()), what="ready (no SA token)"
        )
        if self.real is not None:
            self.real.start(deadline)

    def _wait_component(self, name: str, deadline: float) -> None:
        component = self.components[name]
        timeout = max(1.0, deadline - time.monotonic())
        if name == "etcd":
            component.wait_until(self._etcd_healthy, timeout=timeout, what="healthy")
        elif name == "kube-apiserver":
            component.wait_until(lambda: self._api_get("/readyz")[0] == 200, timeout=timeout, what="ready")
        elif name in ("kube-controller-manager", "kube-scheduler"):
            port = self.ports["controller_manager" if name == "kube-controller-manager" else "scheduler"]
            # An HTTP answer, not just an open port: a port taken by someone else is open too.
            component.wait_until(lambda: _healthz_ok(port), timeout=timeout, what="healthy")
        elif name == "admission-guard":
            port, ca = self.ports["admission_guard"], self.pki.ca_cert
            component.wait_until(lambda: admission.guard_healthy(port, ca), timeout=timeout, what="healthy")
        elif name == "node-simulator":
            self._log(f"waiting for {self.pools.node_count} simulated GPU nodes to be Ready")
            component.wait_until(self._nodes_ready, timeout=timeout, what="ready (nodes not Ready)")

    def _etcd_healthy(self) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", self.ports["etcd_client"], timeout=2)
        try:
            conn.request("GET", "/health")
            return b"true" in conn.getresponse().read()
        finally:
            conn.close()

    def _api_get(self, path: str) -> tuple[int, Any]:
        info = self._require_info()
        ctx = ssl.create_default_context(cafile=str(info.ca_file))
        conn = http.client.HTTPSConnection("127.0.0.1", self.ports["apiserver"], timeout=5, context=ctx)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {info.admin_token}"})
            resp = conn.getresponse()
            body = resp.read()
            if resp.status == 200 and resp.getheader("Content-Type", "").startswith("application/json"):
                return resp.status, json.loads(body)
            return resp.status, body
        finally:
            conn.close()

    def _nodes_ready(self) -> bool:
        status, body = self._api_get("/api/v1/nodes")
        if status != 200:
            return False
        wanted = set(self.pools.node_names())
        ready = set()
        for node in body.get("items", []):
            conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions") or []}
            taints = {t["key"] for t in node.get("spec", {}).get("taints") or []}
            if conditions.get("Ready") == "True" and "node.kubernetes.io/not-ready" not in taints:
                ready.add(node["metadata"]["name"])
        return wanted <= ready

    def _default_sa_ready(self) -> bool:
        status, body = self._api_get("/api/v1/namespaces/default/serviceaccounts/default")
        return status == 200 and bool(body.get("secrets"))


def _healthz_ok(port: int) -> bool:
    """GET /healthz on a component's secure port (self-signed serving cert; always allowed path)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # its cert is self-signed by the component itself
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=ctx)
    try:
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        return resp.status == 200 and resp.read().strip() == b"ok"
    finally:
        conn.close()


def describe_failure(exc: BaseException) -> str:
    """One clear message for any start failure; unexpected errors get the component logs' location."""
    if isinstance(exc, ClusterError):
        return str(exc)
    return f"unexpected error while starting the cluster: {type(exc).__name__}: {exc}"


__all__ = ["ClusterError", "ClusterInfo", "LocalCluster", "describe_failure", "log_tail", "verify_binaries"]
