"""An in-memory stand-in for the functions of jobs.kube.client, for fast unit tests of the code that
talks to the cluster through that seam (lifecycle's cleanup, the watch loop's list and watch).

It is a fake of our own seam, not of Kubernetes: it answers the handful of calls the portal makes the
way the API server does (JSON bodies with `items` and a `resourceVersion`, 404 as ApiException, label
selectors of `k=v` pairs) and records every call, so a test can say "three list calls" or "deleted
this Job". The integration tests keep the real local cluster.

Use the `fake_kube` fixture (tests/engine/conftest.py): it replaces `core`, `batch`, `apps`,
`stream_get`, `timeout`, `create` and `delete` in jobs.kube.client for the test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

_SERIALIZER = ApiClient()  # only its model -> JSON dict conversion is used

# kind -> (the list call's name, the namespaced read and delete calls' suffix)
KINDS = {"Job": "job", "Deployment": "deployment", "Service": "service", "Pod": "pod", "Secret": "secret"}
WATCH_PATHS = {"/apis/batch/v1/jobs": "Job", "/api/v1/pods": "Pod"}


@dataclass
class _Response:
    """What a call with `_preload_content=False` returns: the raw body."""

    data: bytes

    def read(self) -> bytes:
        return self.data

    def release_conn(self) -> None:
        pass


@dataclass
class FakeStream:
    """A watch response: newline-separated JSON events, then the end of the stream."""

    lines: list[bytes]
    released: bool = False

    def stream(self, amt: int = 65536, decode_content: bool = False) -> Iterator[bytes]:
        yield from self.lines

    def release_conn(self) -> None:
        self.released = True


def _matches(labels: dict[str, str], selector: str) -> bool:
    wanted = dict(part.split("=", 1) for part in selector.split(",") if part)
    return all(labels.get(key) == value for key, value in wanted.items())


@dataclass
class FakeCluster:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    watch_events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # kind -> events to stream
    resource_version: int = 100
    failing: dict[str, ApiException] = field(default_factory=dict)  # call name -> what it raises
    on_create: Any = None  # called with (kind, body) at every create, before it is stored
    grace_seconds: dict[tuple[str, str, str], int | None] = field(default_factory=dict)  # deletes asked for

    # --- arranging ------------------------------------------------------------------------------
    def add(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        self.resource_version += 1
        meta["resourceVersion"] = str(self.resource_version)
        self.objects[(kind, meta["namespace"], meta["name"])] = obj
        return obj

    def names(self, kind: str) -> list[tuple[str, str]]:
        return sorted((ns, name) for k, ns, name in self.objects if k == kind)

    # --- the seam's functions -------------------------------------------------------------------
    def core(self) -> _Api:
        return _Api(self)

    batch = apps = core

    def timeout(self) -> float:
        return 5.0

    def stream_get(self, path: str, params: dict[str, str], *, read_timeout: float) -> FakeStream:
        kind = WATCH_PATHS[path]
        self.calls.append(("watch", kind, params.get("resourceVersion", "")))
        events = self.watch_events.pop(kind, [])
        return FakeStream([json.dumps(event).encode() + b"\n" for event in events])

    # --- what the API objects answer ------------------------------------------------------------
    def _call(self, name: str) -> None:
        self.calls.append((name,))
        if name in self.failing:
            raise self.failing[name]

    def list_all(self, kind: str, label_selector: str = "") -> _Response:
        self._call(f"list_{KINDS[kind]}_for_all_namespaces")
        items = [
            obj
            for (k, _, _), obj in sorted(self.objects.items())
            if k == kind and _matches(obj["metadata"].get("labels") or {}, label_selector)
        ]
        body = {"items": items, "metadata": {"resourceVersion": str(self.resource_version)}}
        return _Response(json.dumps(body).encode())

    def list_claims(self, namespace: str) -> Any:
        """list_namespaced_persistent_volume_claim, typed as the client returns it (a V1...List)."""
        self._call("list_namespaced_persistent_volume_claim")
        self.calls[-1] = ("list_namespaced_persistent_volume_claim", namespace)
        items = [
            obj for (k, ns, _), obj in sorted(self.objects.items()) if k == "PersistentVolumeClaim" and ns == namespace
        ]
        body = {"apiVersion": "v1", "kind": "PersistentVolumeClaimList", "items": items, "metadata": {}}
        return ApiClient().deserialize(json.dumps(body), "V1PersistentVolumeClaimList", "application/json")

    def read(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        self._call(f"read_namespaced_{KINDS[kind]}")
        try:
            return self.objects[(kind, namespace, name)]
        except KeyError:
            raise ApiException(status=404, reason="Not Found") from None

    def create(self, kind: str, namespace: str, body: Any) -> _Response:
        """A create as the portal sends it (a JSON-ready dict, the answer not decoded); 409 when it exists."""
        self._call(f"create_namespaced_{KINDS[kind]}")
        if self.on_create is not None:
            self.on_create(kind, body)
        obj = _SERIALIZER.sanitize_for_serialization(body)
        meta = obj.setdefault("metadata", {})
        if (kind, namespace, meta["name"]) in self.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        meta["namespace"] = namespace
        return _Response(json.dumps(self.add(kind, obj)).encode())

    def post(self, namespace: str, body: dict[str, Any]) -> None:
        """kube.create: the object's kind is its body's."""
        self.create(body["kind"], namespace, body)

    def delete_by_name(self, kind: str, namespace: str, name: str, body: dict[str, Any] | None = None) -> None:
        """kube.delete (its argument order), recording the grace period as the client's delete does."""
        _Api(self)._delete(kind, name, namespace, body)

    def delete(self, kind: str, name: str, namespace: str) -> None:
        self._call(f"delete_namespaced_{KINDS[kind]}")
        self.calls[-1] = (f"delete_namespaced_{KINDS[kind]}", namespace, name)
        if self.objects.pop((kind, namespace, name), None) is None:
            raise ApiException(status=404, reason="Not Found")


class _Api:
    """CoreV1Api, BatchV1Api and AppsV1Api in one: the methods the portal calls, by their client names."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    def __getattr__(self, name: str):
        if name == "list_namespaced_persistent_volume_claim":
            return lambda namespace, **_: self.cluster.list_claims(namespace)
        for kind, suffix in KINDS.items():
            if name == f"list_{suffix}_for_all_namespaces":
                return lambda label_selector="", **_: self.cluster.list_all(kind, label_selector)
            if name == f"read_namespaced_{suffix}":
                return lambda name, namespace, **_: self.cluster.read(kind, name, namespace)
            if name == f"create_namespaced_{suffix}":
                return lambda namespace, body, **_: self.cluster.create(kind, namespace, body)
            if name == f"delete_namespaced_{suffix}":
                return lambda name, namespace, body=None, **_: self._delete(kind, name, namespace, body)
        raise AttributeError(f"the fake Kubernetes client has no {name} (add it to tests/engine/fake_kube.py)")

    def _delete(self, kind: str, name: str, namespace: str, body: dict[str, Any] | None) -> None:
        self.cluster.grace_seconds[(kind, namespace, name)] = (body or {}).get("gracePeriodSeconds")
        self.cluster.delete(kind, name, namespace)
