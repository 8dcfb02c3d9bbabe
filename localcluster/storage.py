"""The node simulator's storage: a provisioner for the local StorageClass and the kubelet's volume mounts.

Provisioner: claims of the StorageClass `gpuportal-local` (created at start, reclaim policy Retain) get a
PersistentVolume backed by a directory under `<state dir>/volumes/`, created pre-bound to the claim
(claimRef); the controller-manager's PV binder completes the binding, as with any external provisioner.
Nothing is ever deleted: a released volume keeps its directory (Retain), so data outlives its claim
unless an admin removes it.

Mounts: when a pod starts, its containers' volumeMounts are resolved to host directories, the way the
kubelet would mount them: a PVC through its bound PV (hostPath or local), a hostPath volume as is, an
NFS volume whose server is this machine (127.0.0.1 / localhost) as its exported path, and a secret (or a
projected volume of secrets) as files written from the Secret into `<state dir>/pods/<pod uid>/`. A pod whose claim is
not bound yet stays ContainerCreating. `readOnly` (on the mount, the PVC volume or the NFS volume) is
enforced by the simulated container (localcluster.backend.write_container_file).

Simulated containers use their mounts through the service backend's `/_files/` endpoint and through two
rules for any pod (first container that sets them), run when the container starts, with the outcome in
its log:
- SIM_WRITE_FILE=<container path> and SIM_WRITE_TEXT=<text>: write the text there;
- SIM_READ_FILE=<container path>: read the file and log its content.
A failing read or write (missing file, not on a mount, read-only) makes the container exit with code 1.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localcluster.apiclient import Api, ApiError, ApiUnavailable
from localcluster.backend import FileAccessError, Mount, read_container_file, write_container_file

log = logging.getLogger("node-simulator")
STORAGE_CLASS = "gpuportal-local"
PROVISIONER = "localcluster.gpuportal.dev/directory"
POLL_SECONDS = 1.0
LOCAL_NFS_SERVERS = {"127.0.0.1", "localhost", "::1"}
MAX_LOGGED_BYTES = 4096


@dataclass(frozen=True)
class VolumeMountPlan:
    """One container mount as the pod asks for it; `source` is ("pvc", claim) | ("host", path) |
    ("secrets", JSON list of [secret, key, file])."""

    container_path: str
    source: tuple[str, str]
    read_only: bool


def mount_plans(pod: dict[str, Any]) -> tuple[VolumeMountPlan, ...]:
    """The mounts of a pod's containers that reach storage we can simulate (PVC, hostPath, local NFS)."""
    spec = pod.get("spec") or {}
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    plans: list[VolumeMountPlan] = []
    for container in spec.get("containers") or []:
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount.get("name")) or {}
            read_only = bool(mount.get("readOnly"))
            source: tuple[str, str] | None = None
            if "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]
                source, read_only = ("pvc", str(claim.get("claimName"))), read_only or bool(claim.get("readOnly"))
            elif "hostPath" in volume:
                source = ("host", str(volume["hostPath"].get("path")))
            elif "secret" in volume or "projected" in volume:
                files = _secret_files(volume)
                source, read_only = ("secrets", json.dumps(files)), True
            elif "nfs" in volume and volume["nfs"].get("server") in LOCAL_NFS_SERVERS:
                nfs = volume["nfs"]
                source, read_only = ("host", str(nfs.get("path"))), read_only or bool(nfs.get("readOnly"))
            if source is not None and mount.get("mountPath"):
                if mount.get("subPath"):  # applied on the host side when resolved
                    source = (source[0], f"{source[1]}\0{mount['subPath']}")
                plans.append(VolumeMountPlan(str(mount["mountPath"]), source, read_only))
    return tuple(plans)


def _secret_files(volume: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(secret, key, file) for a secret volume or a projected volume's secret sources; key "*": all."""
    if "projected" in volume:
        sources = volume["projected"].get("sources") or []
    else:
        plain = volume["secret"]
        sources = [{"secret": {"name": plain.get("secretName"), "items": plain.get("items")}}]
    files: list[tuple[str, str, str]] = []
    for source in sources:
        secret = source.get("secret") or {}
        if not secret.get("name"):
            continue
        items = secret.get("items") or [{"key": "*", "path": ""}]
        files += [(str(secret["name"]), str(item.get("key")), str(item.get("path"))) for item in items]
    return files


def file_rules(pod: dict[str, Any]) -> tuple[str | None, str | None, str]:
    """(SIM_READ_FILE, SIM_WRITE_FILE, SIM_WRITE_TEXT) from the first container that sets each."""
    found: dict[str, str] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") in ("SIM_READ_FILE", "SIM_WRITE_FILE", "SIM_WRITE_TEXT") and "value" in env:
                found.setdefault(env["name"], str(env["value"]))
    return found.get("SIM_READ_FILE"), found.get("SIM_WRITE_FILE"), found.get("SIM_WRITE_TEXT", "")


def run_file_rules(mounts: tuple[Mount, ...], rules: tuple[str | None, str | None, str]) -> tuple[list[str], bool]:
    """Apply a pod's file rules (see file_rules) at container start: (log lines, whether all succeeded)."""
    read, write, text = rules
    lines: list[str] = []
    ok = True
    if write:
        try:
            write_container_file(mounts, write, text.encode())
            lines.append(f"[simulated] wrote {len(text.encode())} bytes to {write}")
        except FileAccessError as exc:
            lines.append(f"[simulated] cannot write {exc}")
            ok = False
    if read:
        try:
            data = read_container_file(mounts, read)[:MAX_LOGGED_BYTES].decode("utf-8", "replace")
            lines.append(f"[simulated] read {read}: {data}")
        except FileAccessError as exc:
            lines.append(f"[simulated] cannot read {exc}")
            ok = False
    return lines, ok


class Storage:
    """The provisioner loop and the claim -> directory table the simulated kubelet mounts from."""

    def __init__(self, api: Api, state_dir: str) -> None:
        self.api = api
        self.root = Path(state_dir, "volumes")
        self.lock = threading.Lock()
        self.claims: dict[tuple[str, str], str] = {}  # (namespace, claim) -> host directory, when bound
        self.volume_names: dict[tuple[str, str], str] = {}  # (namespace, claim) -> its PersistentVolume

    def volume_directories(self, namespace: str, plans: tuple[VolumeMountPlan, ...]) -> dict[str, Path]:
        """PV name -> host directory of the bound claims among a pod's mounts: what the agent finds under
        the kubelet's pod directory on a real node (agent.volumes.kubelet_volume_dirs)."""
        found: dict[str, Path] = {}
        with self.lock:
            for plan in plans:
                kind, ref = plan.source
                key = (namespace, ref.partition("\0")[0])
                if kind == "pvc" and key in self.claims and key in self.volume_names:
                    found[self.volume_names[key]] = Path(self.claims[key])
        return found

    def resolve(
        self, namespace: str, plans: tuple[VolumeMountPlan, ...], pod_uid: str = ""
    ) -> tuple[Mount, ...] | None:
        """Host directories for a pod's mounts; None while a claim (or a secret) it needs is missing."""
        mounts: list[Mount] = []
        for index, plan in enumerate(plans):
            if plan.source[0] == "secrets":
                directory = self.root.parent / "pods" / pod_uid / f"secrets-{index}"
                if not self._write_secrets(namespace, json.loads(plan.source[1]), directory):
                    return None
                mounts.append(Mount(plan.container_path, str(directory), True))
        with self.lock:
            for plan in plans:
                kind, ref = plan.source
                ref, _, sub_path = ref.partition("\0")
                if kind == "secrets":
                    continue
                if kind == "pvc":
                    host = self.claims.get((namespace, ref))
                    if host is None:
                        return None
                else:
                    host = ref
                if sub_path:
                    host = str(Path(host, sub_path))
                mounts.append(Mount(plan.container_path, host, plan.read_only))
        for mount in mounts:
            # The kubelet creates subPath and DirectoryOrCreate directories; so do we.
            with contextlib.suppress(OSError):
                Path(mount.host_path).mkdir(parents=True, exist_ok=True)
        return tuple(mounts)

    def _write_secrets(self, namespace: str, files: list[list[str]], directory: Path) -> bool:
        """Write a secret volume's files, as the kubelet does into a tmpfs; False if a Secret is missing."""
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        for secret_name, key, path in files:
            try:
                secret = self.api.get(f"/api/v1/namespaces/{namespace}/secrets/{secret_name}")
            except (ApiError, ApiUnavailable):
                return False
            data = secret.get("data") or {}
            wanted = data if key == "*" else {path or key: data.get(key)}
            for name, encoded in wanted.items():
                if encoded is None:
                    return False
                target = directory / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(base64.b64decode(encoded))
        return True

    def forget(self, pod_uid: str) -> None:
        """A pod is gone: its secret files go too (the kubelet's tmpfs would be unmounted)."""
        if pod_uid:
            shutil.rmtree(self.root.parent / "pods" / pod_uid, ignore_errors=True)

    def ensure_storage_class(self) -> None:
        body = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": STORAGE_CLASS,
                "annotations": {"sim.gpuportal.dev/note": f"directories under {self.root}, by the node simulator"},
            },
            "provisioner": PROVISIONER,
            "reclaimPolicy": "Retain",
            "volumeBindingMode": "Immediate",
            "allowVolumeExpansion": True,
        }
        with contextlib.suppress(ApiError):
            self.api.request("POST", "/apis/storage.k8s.io/v1/storageclasses", body)

    def run(self) -> None:
        while True:
            try:
                self.ensure_storage_class()
                self.sync()
            except (ApiError, ApiUnavailable, OSError, ValueError) as exc:
                log.info("storage sync: %s", exc)
            except Exception:
                log.exception("storage sync failed")
            time.sleep(POLL_SECONDS)

    def sync(self) -> None:
        """One pass: provision volumes for new claims of our class; refresh the claim -> directory table."""
        volumes = {pv["metadata"]["name"]: pv for pv in self.api.get("/api/v1/persistentvolumes").get("items") or []}
        claims = self.api.get("/api/v1/persistentvolumeclaims").get("items") or []
        table: dict[tuple[str, str], str] = {}
        volume_names: dict[tuple[str, str], str] = {}
        for claim in claims:
            meta, spec = claim["metadata"], claim.get("spec") or {}
            key = (meta["namespace"], meta["name"])
            volume = volumes.get(spec.get("volumeName") or "")
            if volume is not None and (claim.get("status") or {}).get("phase") == "Bound":
                source = volume.get("spec") or {}
                path = (source.get("hostPath") or source.get("local") or {}).get("path")
                if path:
                    table[key] = path
                    volume_names[key] = volume["metadata"]["name"]
            elif not spec.get("volumeName") and spec.get("storageClassName") == STORAGE_CLASS:
                name = f"pvc-{meta['uid']}"
                if name not in volumes:
                    self.provision(claim, name)
        with self.lock:
            self.claims = table
            self.volume_names = volume_names

    def provision(self, claim: dict[str, Any], name: str) -> None:
        meta, spec = claim["metadata"], claim["spec"]
        directory = self.root / f"{meta['namespace']}-{meta['name']}-{meta['uid'][:8]}"
        directory.mkdir(parents=True, exist_ok=True)
        # A hostPath volume gets no fsGroup ownership from the kubelet: world-writable, as hostPath
        # provisioners make them, so a real node's non-root container (uid 1000) can write its workspace.
        directory.chmod(0o777)
        size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": name,
                "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
                "labels": {"sim.gpuportal.dev/claim-namespace": meta["namespace"]},
            },
            "spec": {
                "capacity": {"storage": size},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": STORAGE_CLASS,
                "volumeMode": spec.get("volumeMode") or "Filesystem",
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
                "hostPath": {"path": str(directory), "type": "DirectoryOrCreate"},
            },
        }
        try:
            self.api.request("POST", "/api/v1/persistentvolumes", body)
            log.info("provisioned %s for claim %s/%s in %s", name, meta["namespace"], meta["name"], directory)
        except ApiError as exc:
            if exc.status != 409:
                raise
