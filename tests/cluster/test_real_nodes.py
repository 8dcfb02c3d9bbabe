"""Real nodes (issue 35, items 1-2): a real kubelet per node with its own containerd, runc and CNI bridge,
GPUs offered through our device plugin on the kubelet's v1beta1 API, and a cluster down that leaves nothing
behind. These tests start a cluster of their own with two real nodes (the session's cluster keeps only
simulated ones unless GPUPORTAL_REAL_NODES is set), run real containers from the images built here, and
stop it in the last test, comparing the machine before and after.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from localcluster.cluster import LocalCluster
from localcluster.deviceplugin import set_health
from localcluster.procs import ClusterError
from localcluster.realnode import REAL_LABEL, _cgroup_dirs, _pids_in_tree, check_host
from tests.cluster.helpers import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

P100, K2 = "real-p100-1", "real-k2-1"
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through an HTTP proxy


def _machine_snapshot() -> dict[str, Any]:
    """What a cluster down must give back: links, iptables rules, cgroup roots, and every mount namespace's
    mounts (as text, to search for the state directory)."""
    links = {item["ifname"] for item in json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True,
                                                                  text=True, check=True).stdout)}  # fmt: skip
    rules = set()
    for table in ("filter", "nat", "mangle", "raw"):
        out = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True, check=False).stdout
        rules |= {re.sub(r"\[\d+:\d+\]", "", line) for line in out.splitlines() if not line.startswith("#")}
    cgroups = {
        f"{h.name}/{p.name}"
        for h in Path("/sys/fs/cgroup").iterdir()
        if h.is_dir()
        for p in h.iterdir()
        if p.name.startswith("gpuportal-")
    }
    mounts: set[str] = set()
    netns: set[str] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            mounts.add(Path(f"/proc/{pid}/mountinfo").read_text())
            netns.add(os.readlink(f"/proc/{pid}/ns/net"))
        except OSError:
            continue
    return {"links": links, "rules": rules, "cgroups": cgroups, "mounts": "\n".join(mounts), "netns": netns}


@pytest.fixture(scope="module")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    try:
        check_host()
    except ClusterError as exc:
        pytest.skip(f"this machine cannot run real nodes: {exc}")
    before = _machine_snapshot()
    cluster = LocalCluster(state_dir=tmp_path_factory.mktemp("realcluster"), real_nodes=2)
    try:
        cluster.start()
    except ClusterError as exc:
        pytest.fail(f"the local cluster with real nodes did not start:\n{exc}", pytrace=False)
    cluster.machine_before = before  # type: ignore[attr-defined]
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def api(real_cluster: LocalCluster) -> Iterator[client.CoreV1Api]:
    api_client = config.new_client_from_config(config_file=str(real_cluster.kubeconfig))
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="real")))

    def account() -> object | None:
        try:
            return core.read_namespaced_service_account("default", "real")
        except ApiException as exc:
            if exc.status != 404:
                raise
            return None  # the service-account controller has not made it yet

    wait_for(account, what="the default service account")
    yield core
    api_client.close()


def _image(name: str) -> str:
    from localcluster import images

    return images.IMAGES[name]


def _pod(name: str, node: str, command: list[str], *, gpus: int = 0, restart: str = "Never") -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node, REAL_LABEL: "true"},
            "restartPolicy": restart,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": _image("python"),
                    "imagePullPolicy": "Never",
                    "command": command,
                    "resources": resources,
                }
            ],
        },
    }


def _run_to_end(core: client.CoreV1Api, manifest: dict[str, Any], timeout: float = 120) -> str:
    """Create a pod that exits, wait for it to succeed, and return its log (read from the kubelet)."""
    name = manifest["metadata"]["name"]
    core.create_namespaced_pod("real", manifest)

    def ended() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, "real")
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    pod = wait_for(ended, timeout=timeout, what=f"pod {name} to end")
    log = core.read_namespaced_pod_log(name, "real")
    assert pod.status.phase == "Succeeded", f"{name} ended {pod.status.phase}: {log}"
    return log


def _serve(core: client.CoreV1Api, name: str, node: str) -> str:
    """A pod on `node` serving /name over HTTP on port 8080; returns its pod IP once it answers."""
    script = f"import os; os.makedirs('/tmp/w', exist_ok=True); open('/tmp/w/name', 'w').write('{name}'); " \
             "os.chdir('/tmp/w'); import http.server as h; h.test(h.SimpleHTTPRequestHandler, port=8080)"  # fmt: skip
    core.create_namespaced_pod("real", _pod(name, node, ["python3", "-c", script], restart="Always"))
    pod = wait_for(
        lambda: (p := core.read_namespaced_pod(name, "real")).status.phase == "Running" and p.status.pod_ip and p,
        timeout=120,
        what=f"pod {name} to run",
    )
    assert pod.spec.node_name == node
    return pod.status.pod_ip


def test_both_real_nodes_are_ready_with_gpus_reported_by_the_kubelet(api):
    # Their own label values: a simulated GPU type's workloads (gputype=p100) never land on them.
    for name, gputype in ((P100, "real-p100"), (K2, "real-k2")):
        node = api.read_node(name)
        conditions = {c.type: c.status for c in node.status.conditions}
        assert conditions["Ready"] == "True"
        assert not [t for t in node.spec.taints or [] if t.key == "node.kubernetes.io/not-ready"]
        assert node.metadata.labels["gputype"] == gputype
        # The kubelet, told by our device plugin over gRPC, reports the GPUs: capacity and allocatable.
        assert node.status.capacity["nvidia.com/gpu"] == "4"
        assert node.status.allocatable["nvidia.com/gpu"] == "4"
        assert node.status.node_info.container_runtime_version.startswith("containerd://1.6")
        assert node.status.node_info.kubelet_version == "v1.20.2"


def test_pods_on_both_nodes_reach_each_other_and_the_host_reaches_every_pod(api):
    ip_a, ip_b = _serve(api, "web-a", P100), _serve(api, "web-b", K2)
    assert ip_a != ip_b
    # Host to pod: this test process, on the machine, reads each pod's page.
    for ip, name in ((ip_a, "web-a"), (ip_b, "web-b")):
        body = wait_for(lambda ip=ip: _get(f"http://{ip}:8080/name"), timeout=30, what=f"{ip} to answer")
        assert body.decode() == name
    # Pod to pod across the nodes, both ways: a pod on one node fetches the page of the pod on the other.
    fetch = "import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=5).read().decode())"
    log = _run_to_end(api, _pod("fetch-ab", P100, ["python3", "-c", fetch, f"http://{ip_b}:8080/name"]))
    assert log.strip() == "web-b"
    log = _run_to_end(api, _pod("fetch-ba", K2, ["python3", "-c", fetch, f"http://{ip_a}:8080/name"]))
    assert log.strip() == "web-a"


def test_two_pods_never_get_the_same_gpu(api, real_cluster):
    show = ["python3", "-c", "import os; print(os.environ['NVIDIA_VISIBLE_DEVICES'])"]
    # Both on the p100 node, 2 GPUs each: together they take all four.
    hold = ["python3", "-c", "import os, time; print(os.environ['NVIDIA_VISIBLE_DEVICES'], flush=True); time.sleep(30)"]
    api.create_namespaced_pod("real", _pod("gpus-1", P100, hold, gpus=2))
    api.create_namespaced_pod("real", _pod("gpus-2", P100, hold, gpus=2))

    def ids(name: str) -> list[str] | None:
        pod = api.read_namespaced_pod(name, "real")
        if pod.status.phase != "Running":
            return None
        log = api.read_namespaced_pod_log(name, "real").strip()
        return log.split(",") if log else None

    first = wait_for(lambda: ids("gpus-1"), timeout=120, what="gpus-1 to print its devices")
    second = wait_for(lambda: ids("gpus-2"), timeout=120, what="gpus-2 to print its devices")
    known = set(real_cluster.real.device_ids(P100))
    assert len(first) == 2
    assert len(second) == 2
    assert set(first) <= known
    assert set(second) <= known
    assert not set(first) & set(second)
    # A third pod asking for a GPU on that node waits: all four are taken.
    api.create_namespaced_pod("real", _pod("gpus-3", P100, show, gpus=1))
    unschedulable = wait_for(
        lambda: [
            c
            for c in api.read_namespaced_pod("gpus-3", "real").status.conditions or []
            if c.type == "PodScheduled" and c.status == "False"
        ],
        what="gpus-3 to be found unschedulable",
    )
    assert "Insufficient nvidia.com/gpu" in unschedulable[0].message
    assert api.read_namespaced_pod("gpus-3", "real").status.phase == "Pending"
    for name in ("gpus-1", "gpus-2", "gpus-3"):
        api.delete_namespaced_pod(name, "real", grace_period_seconds=0)


def test_an_unhealthy_gpu_shrinks_the_nodes_allocatable(api, real_cluster):
    health = real_cluster.real.health_file(K2)
    device = real_cluster.real.device_ids(K2)[1]

    def gpus() -> tuple[str, str]:
        status = api.read_node(K2).status
        return status.capacity["nvidia.com/gpu"], status.allocatable["nvidia.com/gpu"]

    set_health(health, device, "Unhealthy")
    assert wait_for(lambda: gpus() == ("4", "3") and gpus(), timeout=60, what="allocatable 3 of 4")
    set_health(health, device, "Healthy")
    assert wait_for(lambda: gpus() == ("4", "4") and gpus(), timeout=60, what="allocatable 4 of 4 again")


def test_cluster_down_leaves_nothing_behind(api, real_cluster):
    """Last in this file: stops the cluster and compares the machine with how it was before the start."""
    real = real_cluster.real
    state = str(real_cluster.state_dir)
    # Something running on each node, whichever tests ran before.
    _serve(api, "last-a", P100)
    _serve(api, "last-b", K2)
    bridge = real.network.bridge
    # While it runs: the bridge with the pods' veths, pods in their own network namespaces, and the
    # nodes' mounts (overlay roots, pod volumes) in the nodes' mount namespaces.
    running = _machine_snapshot()
    veths = {
        item["ifname"]
        for item in json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True).stdout)
        if item.get("master") == bridge
    }
    assert veths, "no pod veth on the cluster's bridge while pods run"
    assert bridge in running["links"]
    assert state in running["mounts"]
    pod_netns = set()
    for cgroup in (real.cgroup_name(s) for s in real.specs):
        for top in _cgroup_dirs(cgroup):
            for pid in _pids_in_tree(top):
                with contextlib.suppress(OSError):
                    pod_netns.add(os.readlink(f"/proc/{pid}/ns/net"))
    host_netns = os.readlink("/proc/self/ns/net")
    assert pod_netns - {host_netns}, "no pod has a network namespace of its own"
    assert any(c.startswith(f"memory/gpuportal-{real.tag}-") for c in running["cgroups"])

    real_cluster.stop()

    after = _machine_snapshot()
    before = real_cluster.machine_before
    leftover_procs = [
        pid for pid in filter(str.isdigit, os.listdir("/proc")) if state in _cmdline(pid) and int(pid) != os.getpid()
    ]
    assert leftover_procs == []
    assert bridge not in after["links"]
    assert not veths & after["links"]
    assert state not in after["mounts"]
    # In every hierarchy, cgroup2's included.
    assert not {c for c in after["cgroups"] if f"/gpuportal-{real.tag}-" in c}
    # Every network namespace the pods had is gone (none is held by a process any more).
    assert not (pod_netns - {host_netns}) & after["netns"]
    assert after["rules"] == before["rules"]


def _get(url: str) -> bytes | None:
    try:
        return DIRECT.open(url, timeout=2).read()
    except OSError:  # not listening yet
        return None


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
