"""Small helpers for the cluster tests: polling with a deadline and pod/job manifests as plain dicts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` to its end on a fresh event loop in a thread of its own.

    Not `asyncio.run()` in the test's thread: the browser tests' Playwright (sync API) keeps an event loop
    running in the main thread for the rest of the session once it has started.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def wait_for(check: Callable[[], T | None], *, timeout: float = 30.0, what: str = "condition") -> T:
    """Poll until `check` returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last value: {last!r})")


def pod_manifest(
    name: str,
    *,
    image: str = "nvidia/cuda:12.2.0-base",
    gpus: int = 0,
    gputype: str | None = None,
    annotations: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    restart_policy: str = "Never",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": image}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    spec: dict[str, Any] = {"restartPolicy": restart_policy, "containers": [container]}
    if gputype:
        spec["nodeSelector"] = {"gputype": gputype}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
        "spec": spec,
    }


def job_manifest(name: str, pod: dict[str, Any], *, backoff_limit: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {"metadata": {"annotations": pod["metadata"]["annotations"]}, "spec": pod["spec"]},
        },
    }


def slice_addresses(kube_api: Any, ns: str, service: str) -> list[tuple[str, int]]:
    """Ready (address, port) pairs of the Service's EndpointSlices (discovery.k8s.io/v1beta1 on 1.20).

    EndpointSlices, not Endpoints: simulated pods have loopback IPs, which the API server refuses in an
    Endpoints object ("may not be in the loopback range") but accepts in an EndpointSlice."""
    from kubernetes.client import CustomObjectsApi

    data = CustomObjectsApi(kube_api).list_namespaced_custom_object(
        "discovery.k8s.io", "v1beta1", ns, "endpointslices", label_selector=f"kubernetes.io/service-name={service}"
    )
    found = []
    for item in data.get("items") or []:
        ports = [p["port"] for p in item.get("ports") or []]
        for endpoint in item.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready"):
                found += [(address, port) for address in endpoint["addresses"] for port in ports]
    return found
