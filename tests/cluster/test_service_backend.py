"""Service pods get a real backend: a Deployment and a Service created through the API server end with an
EndpointSlice naming the pod's loopback IP and port, where an HTTP GET and a WebSocket echo really work,
and deleting the pod closes the port."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import aiohttp
import pytest
from kubernetes import client

from tests.cluster.helpers import run_async, wait_for
from tests.cluster.helpers import slice_addresses as _slice_addresses

pytestmark = pytest.mark.cluster


def _deployment(name: str, port: int, base_url: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "jupyter/base-notebook:latest",
                            "ports": [{"containerPort": port, "name": "http"}],
                            "env": [{"name": "GPUPORTAL_BASE_URL", "value": base_url}],
                        }
                    ]
                },
            },
        },
    }


def _service(name: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": port, "targetPort": port}]},
    }


def _port_open(ip: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((ip, port)) == 0


async def _get_and_echo(ip: str, port: int) -> tuple[int, str, str, bytes]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{ip}:{port}/w/abc/tree?x=1") as resp:
            page = await resp.text()
            status = resp.status
        async with session.ws_connect(f"http://{ip}:{port}/w/abc/api/kernels/1/channels") as ws:
            await ws.send_str("hello kernel")
            text = await ws.receive_str(timeout=5)
            await ws.send_bytes(b"\x00\x01")
            binary = await ws.receive_bytes(timeout=5)
    return status, page, text, binary


def test_service_pod_serves_http_and_websocket_on_its_endpoint_until_deleted(kube_api, kube_namespace):
    apps, core = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)
    apps.create_namespaced_deployment(kube_namespace, _deployment("nb", 8888, "/w/abc/"))
    core.create_namespaced_service(kube_namespace, _service("nb", 8888))

    ip, port = wait_for(
        lambda: next(iter(_slice_addresses(kube_api, kube_namespace, "nb")), None),
        timeout=60,
        what="the Service's EndpointSlice to list the ready pod",
    )
    pod = core.list_namespaced_pod(kube_namespace, label_selector="app=nb").items[0]
    assert (ip, port) == (pod.status.pod_ip, 8888)
    assert ipaddress.ip_address(ip).is_loopback
    assert pod.status.container_statuses[0].ready
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"

    status, page, text, binary = run_async(_get_and_echo(ip, port))
    assert status == 200
    assert "<dd id=method>GET</dd>" in page
    assert "<dd id=path>/w/abc/tree?x=1</dd>" in page
    assert "<dd id=base-url>/w/abc/</dd>" in page
    assert (text, binary) == ("hello kernel", b"\x00\x01")

    # Deleting the pod closes its port (the ReplicaSet's replacement gets an address of its own).
    core.delete_namespaced_pod(pod.metadata.name, kube_namespace)
    wait_for(lambda: not _port_open(ip, port), timeout=30, what="the deleted pod's port to close")
    replacement = wait_for(
        lambda: [a for a in _slice_addresses(kube_api, kube_namespace, "nb") if a[0] != ip],
        timeout=60,
        what="the replacement pod in the EndpointSlice",
    )
    assert _port_open(*replacement[0])


def test_pods_without_ports_get_no_backend_and_ips_are_distinct(kube_api, kube_namespace):
    core = client.CoreV1Api(kube_api)
    for name in ("a", "b"):
        core.create_namespaced_pod(
            kube_namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
        )
    pods = wait_for(
        lambda: (
            [p for p in core.list_namespaced_pod(kube_namespace).items if p.status.phase == "Running"]
            if all(p.status.phase == "Running" for p in core.list_namespaced_pod(kube_namespace).items)
            else None
        ),
        timeout=60,
        what="both pods Running",
    )
    ips = {p.status.pod_ip for p in pods}
    assert len(ips) == 2
    assert all(ipaddress.ip_address(ip).is_loopback for ip in ips)
    # All pods of one cluster share its /24.
    assert len({ipaddress.ip_network(f"{ip}/24", strict=False) for ip in ips}) == 1
    assert not any(_port_open(ip, 8888) for ip in ips)
