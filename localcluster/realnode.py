"""Real nodes for the local cluster: per node a kubelet with its own containerd, runc and CNI.

    nodes = RealNodes(state_dir / "real", pki=..., server=..., count=2)
    nodes.start(deadline)   # bridge, containerd, images, kubelet; waits until every node is Ready
    nodes.stop()            # leaves no process, mount, netns, cgroup, bridge or veth behind

What runs where (the facts behind each setting are in ../shared/DESIGN.md, "Real containers"):
- One Linux bridge per cluster, named from a hash of the state directory, holding a /24 picked at random
  among 10.208.0.0/12 once (kept in network.json, checked against this machine's addresses). The bridge
  has .1 (the host's side) and one address per node (.2, .3, ...: the node's InternalIP, where its
  kubelet listens). Each node hands out pod IPs from its own half of the /24 (its podCIDR) with CNI's
  `bridge` + `host-local`; all pods share the bridge, so pods on both nodes reach each other and the host
  reaches every pod without IP forwarding, and nothing leaves the machine (no default route, no NAT).
- Per node a containerd with its own root, state, socket, runc root and CNI config, and a kubelet in the
  same private mount namespace. That namespace (`unshare --mount`) gets its own /var/log (kubelet 1.20
  writes pod logs to the fixed /var/log/pods and garbage-collects there every pod it does not know: two
  kubelets sharing it would delete each other's logs), its own /var/lib/kubelet (kubelet 1.20 serves the
  device-plugin registration on the fixed /var/lib/kubelet/device-plugins/kubelet.sock, whatever its
  --root-dir) and its own /run/containerd (shim sockets). Network
  namespace mounts live under containerd's state directory. When its processes end, the namespace and
  every mount in it go with them.
- Per node a cgroup root (/gpuportal-<hash>-<n>) in every v1 hierarchy: pods of one kubelet are never
  counted or cleaned up by the other, and `stop()` kills whatever is still in it.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import ipaddress
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from localcluster.deviceplugin import device_ids, sharing
from localcluster.pki import Pki
from localcluster.procs import ClusterError, Component, cmdline, pid_alive

KUBE_VERSION = "1.20.2"
# Where pod subnets are drawn from: private, and far from the 10.96.0.0/16 service range and from the
# 10.0-10.20 ranges that corporate networks and other tools tend to use.
POD_SUPERNET = ipaddress.ip_network("10.208.0.0/12")
CNI_BIN_DIR = "/usr/lib/cni"
CGROUP_ROOT = Path("/sys/fs/cgroup")
# (name, gputype, gpus): the GPU types the portal's seed data knows; one node of each. A real node's label
# is gputype=real-<gputype> (NodeSpec.label_value), never the simulated pools' gputype=<gputype>: a GPU type
# selects its nodes by that label, so a simulated type's workloads (images that exist nowhere, SIM_* rules)
# never land on a real node, and only the GPU types made for the real nodes (images.catalog_seed) reach them.
DEFAULT_NODES = (("real-p100-1", "p100", 4), ("real-k2-1", "k2", 4))
SYSTEM_PACKAGES = ("containerd", "runc", "containernetworking-plugins", "iptables", "iproute2", "util-linux")
NODE_BUILD_HINT = "run `bash localcluster/build.sh` (or `make cluster-build`); it builds the kubelet"
PACKAGES_HINT = f"`bash devtools/system-deps.sh {' '.join(SYSTEM_PACKAGES)}`"
REAL_LABEL = "gpuportal.io/real-node"
# These nodes reach no registry: only the images imported into their containerd run there. The portal reads
# the label (jobs/services/cluster/inventory.py) and refuses other images at submission.
PULLS_IMAGES_LABEL = "gpuportal.io/pulls-images"
REPO_ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    if os.environ.get("GPUPORTAL_CACHE"):
        return Path(os.environ["GPUPORTAL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuportal"


def default_node_bin_dir() -> Path:
    return cache_dir() / f"kubernetes-{KUBE_VERSION}" / "node-bin"


def requested_count(environ: dict[str, str] | None = None) -> int:
    """GPUPORTAL_REAL_NODES: unset/0 → no real nodes, 1/yes/true → the default two, N>1 → N."""
    value = (environ if environ is not None else os.environ).get("GPUPORTAL_REAL_NODES", "").strip().lower()
    if value in ("", "0", "no", "false", "off"):
        return 0
    if value in ("1", "yes", "true", "on"):
        return len(DEFAULT_NODES)
    try:
        count = int(value)
    except ValueError:
        raise ClusterError(f"GPUPORTAL_REAL_NODES={value!r}: expected 0, 1 (two nodes) or a number of nodes") from None
    if not 0 <= count <= 8:
        raise ClusterError(f"GPUPORTAL_REAL_NODES={count}: between 0 and 8 real nodes")
    return count


def cluster_tag(state_dir: Path) -> str:
    """Eight hex digits unique to a state directory: names the bridge and the cgroup roots."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class NodeSpec:
    index: int  # 0-based
    name: str
    gputype: str
    gpus: int
    sharing: str = ""  # what its device plugin offers per GPU (deviceplugin/sharing.py); "" whole GPUs

    @property
    def label_value(self) -> str:
        """The node's gputype label: distinct from every simulated pool's."""
        return f"real-{self.gputype}"

    @property
    def offer(self) -> sharing.Offer:
        """The resource and devices its device plugin advertises."""
        return sharing.offer(self.name, self.gpus, self.sharing)


def node_specs(count: int) -> list[NodeSpec]:
    specs = []
    for i in range(count):
        name, gputype, gpus = DEFAULT_NODES[i % len(DEFAULT_NODES)]
        if i >= len(DEFAULT_NODES):
            name = f"real-{gputype}-{i // len(DEFAULT_NODES) + 1}"
        specs.append(NodeSpec(i, name, gputype, gpus))
    return specs


@dataclass(frozen=True)
class Network:
    """The cluster's pod network: a /24 on one bridge, split into one podCIDR per node."""

    subnet: ipaddress.IPv4Network
    bridge: str
    count: int

    @property
    def gateway(self) -> str:
        return str(self.subnet.network_address + 1)

    def node_ip(self, index: int) -> str:
        return str(self.subnet.network_address + 2 + index)

    def pod_cidr(self, index: int) -> ipaddress.IPv4Network:
        """Node i's share of the /24: a power-of-two block (the node's podCIDR)."""
        bits = max(1, (self.count - 1).bit_length())
        return list(self.subnet.subnets(prefixlen_diff=bits))[index]

    def pod_range(self, index: int) -> tuple[str, str]:
        """First and last pod address of node i: its podCIDR without the bridge's and nodes' addresses
        (.0-.15 are reserved for those) and without the broadcast address."""
        cidr = self.pod_cidr(index)
        first = max(cidr.network_address + (1 if index else 0), self.subnet.network_address + 16)
        last = cidr.broadcast_address - (1 if cidr.broadcast_address == self.subnet.broadcast_address else 0)
        return str(first), str(last)


def pick_subnet(taken: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    for _ in range(200):
        candidate = ipaddress.ip_network(
            f"{POD_SUPERNET.network_address + (secrets.randbelow(POD_SUPERNET.num_addresses >> 8) << 8)}/24"
        )
        if not any(candidate.overlaps(t) for t in taken):
            return candidate
    raise ClusterError(f"no free /24 for the real nodes' pods in {POD_SUPERNET} (this machine uses them all?)")


def host_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine has an address or a route in (other clusters' bridges included)."""
    nets: list[ipaddress.IPv4Network] = []
    for argv in (["ip", "-4", "-j", "addr"], ["ip", "-4", "-j", "route", "show", "table", "all"]):
        with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
            out = json.loads(subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout or "[]")
            for item in out:
                for info in item.get("addr_info", []):
                    nets.append(ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False))
                dst = item.get("dst")
                if dst and dst != "default" and ":" not in dst:
                    with contextlib.suppress(ValueError):
                        nets.append(ipaddress.ip_network(dst, strict=False))
    return nets


def _run(argv: list[str], *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise ClusterError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
    return proc


def check_host() -> None:
    """Raise ClusterError naming the cause and the fix when this machine cannot run real nodes."""
    if os.geteuid() != 0:
        raise ClusterError(
            "real nodes need root (a kubelet and containerd manage cgroups, mounts and network namespaces).\n"
            "  fix: run as root, or leave GPUPORTAL_REAL_NODES unset for simulated nodes only."
        )
    missing = [b for b in ("containerd", "runc", "ctr", "unshare", "nsenter", "ip") if not shutil.which(b)]
    missing += [p for p in ("bridge", "host-local", "loopback") if not os.access(f"{CNI_BIN_DIR}/{p}", os.X_OK)]
    if missing:
        raise ClusterError(f"real nodes need {', '.join(missing)}, which are not installed.\n  fix: {PACKAGES_HINT}")
    if not (CGROUP_ROOT / "memory").is_dir() or not os.access(CGROUP_ROOT / "memory", os.W_OK):
        raise ClusterError(
            "real nodes need writable cgroup v1 controllers under /sys/fs/cgroup (memory, cpu, pids, ...).\n"
            "  fix: run on a host (or a privileged container) with cgroup v1 mounted read-write."
        )


def verify_kubelet(bin_dir: Path) -> Path:
    sums = bin_dir / "SHA256SUMS"
    kubelet = bin_dir / "kubelet"
    if not sums.is_file() or not kubelet.is_file():
        raise ClusterError(f"the kubelet is not built (no {kubelet}).\n  fix: {NODE_BUILD_HINT}.")
    expected = {line.split()[1].lstrip("*"): line.split()[0] for line in sums.read_text().splitlines() if line.strip()}
    digest = hashlib.sha256()
    with open(kubelet, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    if expected.get("kubelet") != digest.hexdigest():
        raise ClusterError(
            f"{kubelet} does not match its SHA256SUMS (an interrupted build?).\n  fix: {NODE_BUILD_HINT}."
        )
    return kubelet


def node_images(log: Callable[[str], None]) -> tuple[str, list[Path]]:
    """The sandbox ("pause") image reference and the OCI archives imported into every node's containerd,
    built by localcluster.images when its cache lacks them: the sandbox and the images named in
    GPUPORTAL_REAL_NODE_IMAGES (comma-separated; default: python)."""
    from localcluster import images

    wanted = ["sandbox"]
    for name in os.environ.get("GPUPORTAL_REAL_NODE_IMAGES", "python").split(","):
        name = name.strip()
        if name and name not in wanted:
            if name not in images.SPECS:
                raise ClusterError(
                    f"GPUPORTAL_REAL_NODE_IMAGES names {name!r}; the local images are {', '.join(images.SPECS)}"
                )
            wanted.append(name)
    try:
        paths = images.ensure(wanted, progress=log)
    except images.ImageBuildError as exc:
        raise ClusterError(f"the real nodes' images could not be built: {exc}") from exc
    return images.IMAGES["sandbox"], [paths[n] for n in wanted]


# -- teardown (also used by `python -m localcluster down` after a crash) ------------------------------
def _cgroup_dirs(cgroup_name: str) -> list[Path]:
    dirs = []
    with contextlib.suppress(OSError):
        for hierarchy in sorted(CGROUP_ROOT.iterdir()):
            path = hierarchy / cgroup_name.lstrip("/")
            # Every hierarchy, the cgroup2 one ("unified") too: runc makes its cgroups there as well.
            if path.is_dir():
                dirs.append(path)
    return dirs


def _pids_in_tree(top: Path) -> set[int]:
    pids: set[int] = set()
    for dirpath, _dirs, files in os.walk(top):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in Path(dirpath, "cgroup.procs").read_text().split())
    return pids


def _processes_naming(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and marker in cmdline(int(entry)):
            found.append(int(entry))
    return found


def _kill_all(pids: set[int] | list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_gone(pids: set[int] | list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        if not any(pid_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def teardown(directory: Path, log: Callable[[str], None]) -> None:
    """Remove everything the real nodes of the state directory `directory` (…/real) made: processes
    (kubelets, containerds, shims, containers), cgroups, the bridge, and the nodes' mounts (they live in
    private mount namespaces, which end with their last process). Safe to call when nothing runs."""
    manifest_path = directory / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return
    marker = str(directory) + "/"
    # 1. The kubelets first (they would restart what we kill), then every process in the pods' cgroups,
    #    then containerd and its shims (which name our state directory on their command lines).
    kubelets = [p for p in _processes_naming(marker) if "kubelet" in cmdline(p).split(" ", 1)[0]]
    _kill_all(kubelets, signal.SIGTERM)
    _wait_gone(kubelets, 5) or _kill_all(kubelets)
    for _ in range(3):
        in_pods = set()
        for cg in manifest.get("cgroups", []):
            for d in _cgroup_dirs(cg):
                in_pods |= _pids_in_tree(d)
        in_pods.discard(os.getpid())
        if not in_pods:
            break
        _kill_all(in_pods)
        _wait_gone(in_pods, 5)
    rest = _processes_naming(marker)
    _kill_all(rest, signal.SIGTERM)
    if not _wait_gone(rest, 5):
        _kill_all(rest)
        _wait_gone(rest, 5)
    # 2. cgroups, deepest first.
    for cg in manifest.get("cgroups", []):
        for top in _cgroup_dirs(cg):
            for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
                for _ in range(20):
                    try:
                        os.rmdir(dirpath)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)
                else:
                    log(f"could not remove cgroup {dirpath} (still busy)")
    # 3. The bridge (veths went with the pods' network namespaces).
    bridge = manifest.get("bridge")
    if bridge and Path(f"/sys/class/net/{bridge}").exists():
        _run(["ip", "link", "delete", bridge, "type", "bridge"], check=False)
    # 4. Files: mount points of network namespaces are plain files now; host-local's leases go too.
    for node in manifest.get("nodes", []):
        node_dir = directory / node
        for sub in ("containerd/state", "cni/ipam", "run"):
            with contextlib.suppress(OSError):
                shutil.rmtree(node_dir / sub)
    manifest_path.unlink(missing_ok=True)


# -- the nodes ----------------------------------------------------------------------------------------
class RealNodes:
    def __init__(
        self,
        directory: Path,
        *,
        pki: Pki,
        server: str,
        count: int = len(DEFAULT_NODES),
        specs: list[NodeSpec] | None = None,
        bin_dir: Path | None = None,
        sandbox_image: str,
        images: list[Path] | None = None,
        token: str,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.directory = directory.resolve()
        self.pki = pki
        self.server = server
        self.specs = specs if specs is not None else node_specs(count)
        self.bin_dir = bin_dir or default_node_bin_dir()
        self.sandbox_image = sandbox_image
        self.images = list(images or [])
        self.token = token
        self._log = log or (lambda msg: print(f"[realnode] {msg}", file=sys.stderr, flush=True))
        self.tag = cluster_tag(self.directory)
        self.network: Network | None = None
        self.containerds: dict[str, Component] = {}
        self.kubelets: dict[str, Component] = {}
        self.plugins: dict[str, Component] = {}
        # Per node, the references its containerd holds (after the imports), which its kubelet must list.
        self.held_images: dict[str, set[str]] = {}

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.specs]

    def node_dir(self, spec: NodeSpec) -> Path:
        # Short (n0, n1, ...): unix socket paths under it (containerd's, the kubelet's device-plugins
        # directory) have at most 107 bytes, and pytest's temporary directories are deep.
        return self.directory / f"n{spec.index}"

    def cgroup_name(self, spec: NodeSpec) -> str:
        return f"/gpuportal-{self.tag}-{spec.index}"

    def containerd_socket(self, spec: NodeSpec) -> Path:
        return self.node_dir(spec) / "containerd.sock"

    def health_file(self, name: str) -> Path:
        """The device plugin's health file of node `name` (deviceplugin.set_health writes it)."""
        return self.node_dir(next(s for s in self.specs if s.name == name)) / "gpu-health.json"

    def device_ids(self, name: str) -> list[str]:
        spec = next(s for s in self.specs if s.name == name)
        return device_ids(spec.name, spec.gpus)

    # -- start ---------------------------------------------------
    def prepare(self) -> None:
        check_host()
        # The longest unix socket a node binds: the kubelet's pod-resources/<9 digits> under its root dir, and
        # the device plugins' sockets (a socket's path has at most 107 bytes; longer fails as "bind: invalid
        # argument" and the kubelet exits 255).
        longest = max(
            len(str(self.node_dir(s) / "varlib-kubelet" / "device-plugins" / "kubelet.sock")) for s in self.specs
        )
        longest = max(longest, len(str(self.node_dir(self.specs[-1]) / "kubelet" / "pod-resources" / ("9" * 10))))
        if longest > 107:
            raise ClusterError(
                f"the real nodes' directory {self.directory} is too long for their unix sockets ({longest} > 107 "
                "bytes).\n  fix: use a shorter state directory (--state-dir, LOCALCLUSTER_STATE_DIR)."
            )
        kubelet = verify_kubelet(self.bin_dir)
        self.directory.mkdir(parents=True, exist_ok=True)
        teardown(self.directory, self._log)  # whatever a crashed run left
        self.network = self._network()
        manifest = {
            "bridge": self.network.bridge,
            "cgroups": [self.cgroup_name(s) for s in self.specs],
            "nodes": [self.node_dir(s).name for s in self.specs],
        }
        (self.directory / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        for spec in self.specs:
            self._write_node_files(spec)
            self._define(spec, kubelet)

    def _network(self) -> Network:
        path = self.directory / "network.json"
        bridge = f"gpb{self.tag}"
        with contextlib.suppress(OSError, ValueError, KeyError):
            saved = json.loads(path.read_text())
            subnet = ipaddress.ip_network(saved["subnet"])
            # Still ours to use unless someone else took it since (our own bridge is gone by now).
            if not any(subnet.overlaps(n) for n in host_networks()):
                return Network(subnet, bridge, len(self.specs))
        subnet = pick_subnet(host_networks())
        path.write_text(json.dumps({"subnet": str(subnet), "bridge": bridge}, indent=2) + "\n")
        return Network(subnet, bridge, len(self.specs))

    def _write_node_files(self, spec: NodeSpec) -> None:
        net = self.network
        assert net is not None
        nd = self.node_dir(spec)
        for sub in ("cni/net.d", "cni/ipam", "containerd/root", "containerd/state", "kubelet", "varlog/pods",
                    "varlog/containers", "varlib-kubelet", "pki", "volume-plugins", "run"):  # fmt: skip
            (nd / sub).mkdir(parents=True, exist_ok=True)
        node_ip = net.node_ip(spec.index)
        # The kubelet's client identity (the Node authorizer's system:node:<name>) and its serving
        # certificate, with the node's IP, so the API server can verify it when it proxies logs and exec.
        self.pki.issue(nd / "pki" / "client.crt", nd / "pki" / "client.key", f"system:node:{spec.name}",
                       "system:nodes", [], [], server=False)  # fmt: skip
        self.pki.issue(nd / "pki" / "serving.crt", nd / "pki" / "serving.key", spec.name, None,
                       [spec.name], [node_ip], server=True)  # fmt: skip
        first, last = net.pod_range(spec.index)
        conflist = {
            "cniVersion": "0.4.0",
            "name": f"gpuportal-{self.tag}",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": net.bridge,
                    # The bridge and its addresses are ours (made before any pod): no isGateway, which
                    # would switch on the machine's IP forwarding, and no ipMasq, which adds NAT rules.
                    "isGateway": False,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(nd / "cni" / "ipam"),
                        "ranges": [[{"subnet": str(net.subnet), "rangeStart": first, "rangeEnd": last}]],
                    },
                }
            ],
        }
        (nd / "cni" / "net.d" / "10-gpuportal.conflist").write_text(json.dumps(conflist, indent=2) + "\n")
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        toml = f"""version = 2
root = "{nd / "containerd" / "root"}"
state = "{nd / "containerd" / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{self.containerd_socket(spec)}"
[ttrpc]
  address = "{nd / "containerd.ttrpc.sock"}"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{nd / "containerd" / "opt"}"
[{cri}]
  sandbox_image = "{self.sandbox_image}"
  # This machine's root lacks CAP_SYS_RESOURCE: without this every sandbox fails in runc with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  stream_server_address = "{node_ip}"
  stream_server_port = "0"
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{nd / "run" / "runc"}"
[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{nd / "cni" / "net.d"}"
  max_conf_num = 1
"""
        (nd / "containerd.toml").write_text(toml)
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": {"server": self.server,
                                                        "certificate-authority": str(self.pki.ca_cert)}}],
            "users": [{"name": spec.name, "user": {"client-certificate": str(nd / "pki" / "client.crt"),
                                                  "client-key": str(nd / "pki" / "client.key")}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": spec.name}}],
            "current-context": "local",
        }  # fmt: skip
        (nd / "kubeconfig").write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # The node's own address on the cluster's bridge: the same ports on every node and cluster.
            "address": node_ip,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": node_ip,
            "healthzPort": 10248,
            "tlsCertFile": str(nd / "pki" / "serving.crt"),
            "tlsPrivateKeyFile": str(nd / "pki" / "serving.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.pki.ca_cert)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_name(spec),
            "failSwapOn": False,
            # Both kubelets share the host's network namespace: neither may own iptables chains there.
            "makeIPTablesUtilChains": False,
            "hairpinMode": "none",
            "resolvConf": "",
            "podCIDR": str(net.pod_cidr(spec.index)),
            "maxPods": 110,
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
            # Shared disks here are large and busy: evict only when really short, never collect images.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            # Every image in the node's status, not the 50 largest: the portal judges submissions by that list,
            # and images of earlier builds stay (never collected).
            "nodeStatusMaxImages": -1,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "runtimeRequestTimeout": "2m",
        }
        (nd / "kubelet.yaml").write_text(yaml.safe_dump(config, sort_keys=False))

    def _define(self, spec: NodeSpec, kubelet: Path) -> None:
        nd = self.node_dir(spec)
        logs, run = self.directory / "logs", self.directory / "run"
        # A private mount namespace: its own /var/log (pod logs) and /run/containerd (shim sockets).
        setup = (
            "set -e; "
            f"mount --bind {nd / 'varlog'} /var/log; "
            f"mkdir -p /var/lib/kubelet && mount --bind {nd / 'varlib-kubelet'} /var/lib/kubelet; "
            "mkdir -p /run/containerd && mount -t tmpfs -o mode=0711 tmpfs /run/containerd; "
            f"exec containerd --config {nd / 'containerd.toml'}"
        )
        self.containerds[spec.name] = Component(
            f"containerd-{spec.name}", lambda: ["unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", setup],
            log_dir=logs, run_dir=run,
        )  # fmt: skip
        labels = ",".join([f"gputype={spec.label_value}", f"{REAL_LABEL}=true", f"{PULLS_IMAGES_LABEL}=false"])

        def kubelet_argv(spec: NodeSpec = spec) -> list[str]:
            ns_pid = self.containerds[spec.name].pid
            return [
                "nsenter", f"--mount=/proc/{ns_pid}/ns/mnt", "--",
                str(kubelet), f"--config={nd / 'kubelet.yaml'}", f"--kubeconfig={nd / 'kubeconfig'}",
                f"--root-dir={nd / 'kubelet'}", f"--cert-dir={nd / 'pki'}",
                f"--hostname-override={spec.name}", f"--node-ip={self.network.node_ip(spec.index)}",  # type: ignore[union-attr]
                "--container-runtime=remote",
                f"--container-runtime-endpoint=unix://{self.containerd_socket(spec)}",
                f"--image-service-endpoint=unix://{self.containerd_socket(spec)}",
                f"--pod-infra-container-image={self.sandbox_image}",
                f"--volume-plugin-dir={nd / 'volume-plugins'}",
                f"--node-labels={labels}",
                "--v=1",
            ]  # fmt: skip

        self.kubelets[spec.name] = Component(f"kubelet-{spec.name}", kubelet_argv, log_dir=logs, run_dir=run)
        plugin_argv = [sys.executable, "-m", "localcluster.deviceplugin",
                       f"--plugin-dir={nd / 'varlib-kubelet' / 'device-plugins'}", f"--node={spec.name}",
                       f"--gpus={spec.gpus}", f"--health-file={self.health_file(spec.name)}",
                       f"--sharing={spec.sharing}"]  # fmt: skip
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
        self.plugins[spec.name] = Component(
            f"deviceplugin-{spec.name}", lambda argv=plugin_argv: argv, log_dir=logs, run_dir=run, env=env
        )

    def start(self, deadline: float) -> None:
        net = self.network
        assert net is not None
        self._log(f"real nodes: bridge {net.bridge} with {net.subnet}; nodes {', '.join(self.names)}")
        self._make_bridge()
        for spec in self.specs:
            self._make_cgroups(spec)
        for spec in self.specs:
            self.containerds[spec.name].start()
        for spec in self.specs:
            sock = self.containerd_socket(spec)
            self.containerds[spec.name].wait_until(
                lambda sock=sock: _run(["ctr", "--address", str(sock), "version"], check=False).returncode == 0,
                timeout=max(1.0, deadline - time.monotonic()),
                what="ready",
            )
        if self.images:  # a minute or more on a busy machine: say what is going on
            size = sum(archive.stat().st_size for archive in self.images) // (1024 * 1024)
            self._log(f"importing {len(self.images)} images ({size} MiB) into each real node's containerd")
        for spec in self.specs:
            began = time.monotonic()
            for archive in self.images:
                self.import_image(spec, archive)
            if self.images:
                self._log(f"{spec.name}: images imported in {time.monotonic() - began:.0f} s")
            self.held_images[spec.name] = self.containerd_images(spec)
        for spec in self.specs:
            self.health_file(spec.name).unlink(missing_ok=True)
            self.kubelets[spec.name].start()
            # It waits for the kubelet's socket, then registers; it registers again after a kubelet restart.
            self.plugins[spec.name].start()
        self._log(f"waiting for {len(self.specs)} real nodes to be Ready")
        for spec in self.specs:
            self.kubelets[spec.name].wait_until(
                lambda spec=spec: self._ready_and_untainted(spec),
                timeout=max(1.0, deadline - time.monotonic()),
                what="a Ready node",
            )

    def import_image(self, spec: NodeSpec, archive: Path) -> None:
        """Import an OCI archive into the node's containerd. A node already running lists it in its status
        (where the portal learns what it may run there) within about 30 s: `wait_until_listed`."""
        _run(["ctr", "--address", str(self.containerd_socket(spec)), "-n", "k8s.io", "images", "import",
              str(archive)], timeout=300)  # fmt: skip
        self.held_images[spec.name] = self.containerd_images(spec)

    def containerd_images(self, spec: NodeSpec) -> set[str]:
        """The references the node's containerd holds, as its kubelet lists them in `.status.images`: tags
        and repository digests (not the bare `sha256:` image ids the CRI plugin also records)."""
        out = _run(["ctr", "--address", str(self.containerd_socket(spec)), "-n", "k8s.io", "images", "ls", "-q"])
        return {line for line in out.stdout.split() if not line.startswith("sha256:")}

    @staticmethod
    def _lists_images(node: dict, held: set[str]) -> bool:
        listed = {name for image in node.get("status", {}).get("images") or [] for name in image.get("names") or []}
        return held <= listed

    def wait_until_listed(self, timeout: float = 90) -> None:
        """Wait until every node's status lists the images its containerd holds: the kubelet refreshes its
        image list every 30 s, and the portal judges submissions to these nodes by that list."""
        for spec in self.specs:
            held = self.held_images.get(spec.name, set())
            self.kubelets[spec.name].wait_until(
                lambda spec=spec, held=held: self._lists_images(self._api("GET", f"/api/v1/nodes/{spec.name}", None)[1], held),
                timeout=timeout,
                what="listing its images",
            )  # fmt: skip

    def _make_bridge(self) -> None:
        net = self.network
        assert net is not None
        if Path(f"/sys/class/net/{net.bridge}").exists():
            _run(["ip", "link", "delete", net.bridge, "type", "bridge"], check=False)
        _run(["ip", "link", "add", net.bridge, "type", "bridge"])
        prefix = net.subnet.prefixlen
        _run(["ip", "addr", "add", f"{net.gateway}/{prefix}", "dev", net.bridge])
        for spec in self.specs:
            # /32: one connected route for the subnet (the gateway's), and the node IPs only as local addresses.
            _run(["ip", "addr", "add", f"{net.node_ip(spec.index)}/32", "dev", net.bridge])
        _run(["ip", "link", "set", net.bridge, "up"])

    def _make_cgroups(self, spec: NodeSpec) -> None:
        name = self.cgroup_name(spec).lstrip("/")
        for hierarchy in sorted(CGROUP_ROOT.iterdir()):
            if hierarchy.name == "unified" or not (hierarchy / "cgroup.procs").exists():
                continue
            path = hierarchy / name
            path.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (path / f).write_text((hierarchy / f).read_text())

    def _ready_and_untainted(self, spec: NodeSpec) -> bool:
        status, node = self._api("GET", f"/api/v1/nodes/{spec.name}", None)
        if status != 200:
            return False
        conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions") or []}
        if conditions.get("Ready") != "True":
            return False
        offer = spec.offer
        gpus = (node.get("status", {}).get("allocatable") or {}).get(offer.resource, "0")
        if gpus != str(len(offer.devices)):
            return False
        if (node["metadata"].get("labels") or {}).get(PULLS_IMAGES_LABEL) != "false":
            # A Node object kept from a run before the label existed: the kubelet sets --node-labels only
            # when it creates the Node.
            path = "/metadata/labels/" + PULLS_IMAGES_LABEL.replace("/", "~1")
            self._api("PATCH", f"/api/v1/nodes/{spec.name}", [{"op": "add", "path": path, "value": "false"}])
            return False
        if not self._lists_images(node, self.held_images.get(spec.name, set())):
            return False  # listed soon after the kubelet starts; the portal judges submissions by that list
        taints = node.get("spec", {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != "node.kubernetes.io/not-ready"]
        if len(kept) != len(taints):
            # Our controller-manager runs no node-lifecycle controller, which would lift this taint.
            patch = [
                {"op": "test", "path": "/spec/taints", "value": taints},
                {"op": "replace", "path": "/spec/taints", "value": kept},
            ]
            self._api("PATCH", f"/api/v1/nodes/{spec.name}", patch)
            return False
        return True

    def _api(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        """One request to the API server as the cluster's admin (JSON patch for PATCH)."""
        url = urllib.parse.urlsplit(self.server)
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        conn = http.client.HTTPSConnection(url.hostname or "127.0.0.1", url.port or 443, timeout=10, context=ctx)
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json-patch+json" if method == "PATCH" else "application/json"
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            try:
                return resp.status, json.loads(raw)
            except ValueError:
                return resp.status, raw
        finally:
            conn.close()

    # -- stop ----------------------------------------------------
    def stop(self) -> None:
        for component in list(self.plugins.values()):
            component.stop(timeout=5)
        for component in list(self.kubelets.values()):
            component.stop(timeout=5)
        teardown(self.directory, self._log)
        for component in list(self.containerds.values()):
            component.stop(timeout=5)


__all__ = ["SYSTEM_PACKAGES", "RealNodes", "check_host", "requested_count", "teardown"]
