"""Small helpers for the cluster tests: polling with a deadline and pod/job manifests as plain dicts."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


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
