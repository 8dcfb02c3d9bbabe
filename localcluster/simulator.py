"""The node simulator: plays the kubelet for the simulated GPU nodes (python -m localcluster.simulator).

Everything above the kubelet is real Kubernetes; this process is the honest stand-in below it:
- registers the nodes of the pools file (nvidia.com/gpu capacity, gputype and nvidia.com/* labels), keeps
  them Ready with heartbeats and clears the not-ready taint the admission plugin puts on new nodes;
- watches pods bound to its nodes (one cluster-wide watch) and moves them ContainerCreating -> Running ->
  Succeeded/Failed with real timestamps and exit codes, by the rules in localcluster/rules.py;
- honours deletion: a pod with a deletionTimestamp gets SIGTERM; it is removed once its process exits
  (rule term-seconds, default at once) or its grace period (deletionGracePeriodSeconds) ends (SIGKILL);
- serves the kubelet's /containerLogs endpoint so `kubectl logs` works through the API server;
- plays the storage provisioner for the local StorageClass and mounts volumes for real (localcluster/storage.py);
- gives pods loopback IPs from the cluster's own 127.x.y.0/24 (`pod_subnet` in simulator.json) and, while a
  pod whose containers declare ports runs, a real HTTP + WebSocket backend on that IP and those ports
  (localcluster/backend.py); the pod is Ready only once it listens, so its Service's EndpointSlice lists it;
- publishes simulated GPU readings, clearly labelled as such, as the node agent's reports (agent.simulated)
  to every portal named by a file in <state dir>/telemetry-targets/ (see TelemetryPublisher).

Like the real kubelet's status manager, it sends the latest status of a pod, not every step: under load
an intermediate state (ContainerCreating) may be skipped, never a final one.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import heapq
import ipaddress
import itertools
import json
import logging
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localcluster import kubelet
from localcluster.apiclient import Api, ApiError, ApiUnavailable, parse_rfc3339, rfc3339
from localcluster.backend import BackendSpec, Mount, ServiceBackends
from localcluster.pools import parse_pools
from localcluster.rules import PodPlan, resolve_plan, restart_backoff
from localcluster.storage import Storage, VolumeMountPlan, file_rules, mount_plans, run_file_rules

log = logging.getLogger("node-simulator")
WORKERS = 12
# Events are best effort (like the kubelet's): beyond this backlog they are dropped, so a burst of pods
# never slows down status updates.
EVENT_BACKLOG = 300


@dataclass
class PodRecord:
    uid: str
    namespace: str
    name: str
    node: str
    plan: PodPlan
    containers: list[tuple[str, str]]  # (name, image)
    init_containers: list[tuple[str, str]]
    gpus: int
    accepted_at: float
    ip: str
    state: str = "creating"  # creating, pullfail, running, crashloop, terminated, deleting
    pull_stage: str = "ErrImagePull"
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int = 0
    reason: str = "Completed"
    message: str = ""
    restart_count: int = 0
    last_terminated: dict[str, Any] | None = None
    version: int = 0
    published: str = ""  # the state last written to the API server
    sent_version: int = -1  # the version last written (-1: resend)
    history: list[tuple[float, float, int, str]] = field(default_factory=list)  # previous runs
    active_deadline: float | None = None  # spec.activeDeadlineSeconds, enforced by the kubelet
    pod_reason: str = ""  # status.reason of the pod (DeadlineExceeded)
    gpu_utilization: float | None = None  # pinned simulated GPU utilization %; None: training-like
    backend: BackendSpec | None = None  # set for service pods (containers with ports): what to serve
    backend_error: str = ""  # the backend could not listen: the pod runs but is not Ready
    mount_plans: tuple[VolumeMountPlan, ...] = ()  # what its containers mount
    file_rules: tuple[str | None, str | None, str] = (None, None, "")  # SIM_READ_FILE, SIM_WRITE_FILE/TEXT
    mounts: tuple[Mount, ...] = ()  # resolved at start: container path -> host directory
    file_log: list[str] = field(default_factory=list)  # what the file rules did (shown in its log)
    stopping: bool = False  # SIGTERM sent, waiting for the process to exit or the grace period to end

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"


class Simulator:
    def __init__(self, config: dict[str, Any]) -> None:
        self.pools = parse_pools(config["pools"], source="simulator.json")
        self.sim = self.pools.simulator
        with open(config["token_file"]) as fh:
            token = fh.read().strip()
        self.api = Api(config["server"], token, config["ca_file"])
        self.kubelet_port = int(config["kubelet_port"])
        self.config = config
        self.nodes = {name: pool for pool in self.pools.pools for name in pool.node_names()}
        self.lock = threading.RLock()
        self.records: dict[str, PodRecord] = {}
        self.by_name: dict[tuple[str, str], str] = {}
        self.timers: list[tuple[float, int, str, int, str]] = []
        self.timer_cv = threading.Condition(self.lock)
        self.seq = itertools.count()
        self.sync_queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.pending: set[str] = set()
        # Loopback pod IPs from this cluster's own /24 (any 127.0.0.0/8 address is local on Linux).
        self.pod_network = ipaddress.ip_network(config.get("pod_subnet") or "127.244.0.0/24")
        self.ip_counter = itertools.count()
        self.ip_users: collections.Counter[str] = collections.Counter()
        self.backends = ServiceBackends()
        self.storage = Storage(self.api, config.get("state_dir") or ".")
        self.stats = {"patches": 0, "deletes": 0, "errors": 0}
        self.events: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=EVENT_BACKLOG)
        # Benchmarks measure tracking lag from the instant a status write succeeded, by our own clock:
        # with GPUPORTAL_SIM_STATUS_LOG set, each successful write appends one JSON line there.
        status_log = os.environ.get("GPUPORTAL_SIM_STATUS_LOG")
        self.status_log = open(status_log, "a", buffering=1) if status_log else None  # noqa: SIM115
        self.status_log_lock = threading.Lock()

    # -- pod lifecycle -----------------------------------------
    def on_pod(self, event_type: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = meta.get("uid", "")
        if event_type == "DELETED":
            with self.lock:
                self._forget(uid)
            return
        if (pod.get("spec") or {}).get("nodeName") not in self.nodes:
            return
        with self.lock:
            rec = self.records.get(uid)
            if rec is None:
                rec = self._adopt(pod)
            if meta.get("deletionTimestamp") and rec.state != "deleting" and not rec.stopping:
                grace = meta.get("deletionGracePeriodSeconds")
                linger = min(rec.plan.term_seconds, float(grace)) if grace is not None else 0.0
                if rec.state in ("running", "crashloop"):
                    self.event(rec, "Normal", "Killing", f"[simulated] Stopping container {rec.containers[0][0]}")
                    if linger > 0:
                        # SIGTERM: the process takes term-seconds to exit, the kill comes at the grace.
                        rec.stopping = True
                        self._at(time.time() + linger, rec, "kill")
                        return
                rec.state = "deleting"
                rec.version += 1
                self._sync_backend(rec)
                self._enqueue(uid)

    def _forget(self, uid: str) -> None:
        rec = self.records.pop(uid, None)
        if rec is not None:
            self.by_name.pop((rec.namespace, rec.name), None)
            self.ip_users[rec.ip] -= 1
            if self.ip_users[rec.ip] <= 0:
                del self.ip_users[rec.ip]
        self.backends.stop(uid)
        self.storage.forget(uid)

    def _next_ip(self) -> str:
        """The next pod IP of the cluster's subnet that no live pod holds (cycling; with every address
        taken, batch pods may share one: only service pods listen on theirs)."""
        hosts = self.pod_network.num_addresses - 2
        candidate = ""
        for _ in range(hosts):
            candidate = str(self.pod_network.network_address + 1 + next(self.ip_counter) % hosts)
            if candidate not in self.ip_users:
                break
        return candidate

    def _mount_volumes(self, rec: PodRecord) -> bool:
        """Resolve the pod's mounts and run its file rules once; False while a claim is not bound yet."""
        if rec.started_at is not None or rec.plan.pull_failure_image:
            return True
        mounts = self.storage.resolve(rec.namespace, rec.mount_plans, rec.uid) if rec.mount_plans else ()
        if mounts is None:
            return False
        rec.mounts = mounts
        if rec.backend is not None:
            rec.backend = dataclasses.replace(rec.backend, mounts=mounts)
        rec.file_log, ok = run_file_rules(mounts, rec.file_rules)
        if not ok:
            # The simulated program failed on its file: it exits with 1 (at once, if it would run forever).
            run = 1.0 if rec.plan.runs_forever else rec.plan.run_seconds
            rec.plan = dataclasses.replace(rec.plan, exit_code=1, reason="Error", run_seconds=run)
        return True

    def _sync_backend(self, rec: PodRecord) -> None:
        """Serve a service pod's ports exactly while it runs."""
        if rec.backend is None:
            return
        if rec.state == "running":
            error = self.backends.start(rec.uid, rec.backend)
            if error and error != rec.backend_error:
                self.event(rec, "Warning", "Unhealthy", f"[simulated] the service backend cannot listen: {error}")
            rec.backend_error = error or ""
        else:
            self.backends.stop(rec.uid)

    def _adopt(self, pod: dict[str, Any]) -> PodRecord:
        """Start tracking a pod: new ones from the beginning, ones from an earlier simulator run where
        their status says they are."""
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        gpus = 0
        for c in spec.get("containers") or []:
            limits = (c.get("resources") or {}).get("limits") or {}
            requests = (c.get("resources") or {}).get("requests") or {}
            with contextlib.suppress(ValueError):
                gpus += int(limits.get("nvidia.com/gpu") or requests.get("nvidia.com/gpu") or 0)
        now = time.time()
        rec = PodRecord(
            uid=meta["uid"],
            namespace=meta["namespace"],
            name=meta["name"],
            node=spec["nodeName"],
            plan=resolve_plan(pod, self.sim),
            containers=[(c["name"], c.get("image", "")) for c in spec.get("containers") or []],
            init_containers=[(c["name"], c.get("image", "")) for c in spec.get("initContainers") or []],
            gpus=gpus,
            accepted_at=now,
            ip=status.get("podIP") or self._next_ip(),
            gpu_utilization=_gpu_utilization(pod),
        )
        rec.backend = backend_spec(pod, rec.ip)
        rec.mount_plans, rec.file_rules = mount_plans(pod), file_rules(pod)
        if spec.get("activeDeadlineSeconds") is not None:
            with contextlib.suppress(TypeError, ValueError):
                rec.active_deadline = float(spec["activeDeadlineSeconds"])
        self.records[rec.uid] = rec
        self.by_name[(rec.namespace, rec.name)] = rec.uid
        self.ip_users[rec.ip] += 1
        phase = status.get("phase", "Pending")
        first = next(iter(status.get("containerStatuses") or []), {})
        state = first.get("state") or {}
        if status.get("startTime"):
            rec.accepted_at = parse_rfc3339(status["startTime"])
        if phase in ("Succeeded", "Failed") and "terminated" in state:
            term = state["terminated"]
            rec.state, rec.published, rec.sent_version = "terminated", "terminated", 0
            rec.started_at = parse_rfc3339(term.get("startedAt") or status.get("startTime") or rfc3339(now))
            rec.finished_at = parse_rfc3339(term.get("finishedAt") or rfc3339(now))
            rec.exit_code, rec.reason = int(term.get("exitCode", 0)), term.get("reason", "")
        elif phase == "Running" and "running" in state:
            rec.state, rec.published, rec.sent_version = "running", "running", 0
            rec.started_at = parse_rfc3339(state["running"]["startedAt"])
            rec.restart_count = int(first.get("restartCount", 0))
            if not rec.plan.runs_forever:
                self._at(rec.started_at + rec.plan.run_seconds, rec, "finish")
        elif phase in ("Succeeded", "Failed"):
            rec.state, rec.published, rec.sent_version = "terminated", "terminated", 0
        else:
            self._enqueue(rec.uid)
            self._at(now + rec.plan.start_seconds, rec, "start")
        if rec.active_deadline is not None and rec.state != "terminated":
            self._at(rec.accepted_at + rec.active_deadline, rec, "deadline")
        self._sync_backend(rec)
        return rec

    def _at(self, due: float, rec: PodRecord, action: str) -> None:
        heapq.heappush(self.timers, (due, next(self.seq), rec.uid, rec.version, action))
        self.timer_cv.notify()

    def _enqueue(self, uid: str) -> None:
        if uid not in self.pending:
            self.pending.add(uid)
            self.sync_queue.put(uid)

    def _advance(self, uid: str, version: int, action: str) -> None:
        """A timer fired: move the pod to its next state (unless something newer happened meanwhile)."""
        rec = self.records.get(uid)
        if rec is not None and action == "resync":
            self._enqueue(uid)  # an API call failed earlier: send the current state again
            return
        if rec is not None and action == "kill":
            # The process exited after SIGTERM, or the grace period ended: the pod goes.
            if rec.state != "deleting":
                rec.state = "deleting"
                rec.version += 1
                self._sync_backend(rec)
                self._enqueue(uid)
            return
        if rec is None or rec.state in ("deleting", "terminated"):
            return
        # A deadline holds whatever happened since it was set; other timers are void once the pod moved on.
        if rec.version != version and action != "deadline":
            return
        now = time.time()
        if action == "start" and not self._mount_volumes(rec):
            self._at(now + 0.5, rec, "start")  # like the kubelet: ContainerCreating until volumes mount
            return
        rec.version += 1
        if action == "start":
            if rec.plan.pull_failure_image:
                rec.state, rec.pull_stage = "pullfail", "ErrImagePull"
                image = rec.plan.pull_failure_image
                why = "[simulated] it matches a failing_images pattern of the node simulator"
                self.event(rec, "Warning", "Failed", f'Failed to pull image "{image}": {why}')
                self._at(now + 1.0, rec, "backoff")
            else:
                rec.state, rec.started_at = "running", now
                self.event(rec, "Normal", "Started", f"[simulated] Started container {rec.containers[0][0]}")
                if not rec.plan.runs_forever:
                    self._at(now + rec.plan.run_seconds, rec, "finish")
        elif action == "backoff":
            rec.pull_stage = "ImagePullBackOff"
            self.event(rec, "Normal", "BackOff", f'Back-off pulling image "{rec.plan.pull_failure_image}"')
        elif action == "deadline":
            was_running = rec.started_at is not None and rec.state == "running"
            rec.state, rec.finished_at = "terminated", now
            rec.exit_code, rec.reason = (137, "Error") if was_running else (0, "")
            rec.started_at = rec.started_at or now
            rec.pod_reason = "DeadlineExceeded"
            self.event(
                rec,
                "Normal",
                "DeadlineExceeded",
                "Pod was active on the node longer than the specified deadline",
            )
        elif action == "finish":
            # The planned exit instant (the timer may fire a few ms late under load).
            rec.finished_at = min(now, (rec.started_at or now) + rec.plan.run_seconds)
            rec.exit_code, rec.reason = rec.plan.exit_code, rec.plan.reason
            rec.history.append((rec.started_at or now, rec.finished_at, rec.exit_code, rec.reason))
            if rec.plan.restarts_after_exit():
                rec.state = "crashloop"
                rec.last_terminated = self._terminated(rec)
                self._at(rec.finished_at + restart_backoff(rec.restart_count), rec, "restart")
            else:
                rec.state = "terminated"
        elif action == "restart":
            rec.restart_count += 1
            rec.state, rec.started_at, rec.finished_at = "running", now, None
            if not rec.plan.runs_forever:
                self._at(now + rec.plan.run_seconds, rec, "finish")
        self._sync_backend(rec)
        self._enqueue(uid)

    def run_timers(self) -> None:
        with self.lock:
            while True:
                now = time.time()
                while self.timers and self.timers[0][0] <= now:
                    _, _, uid, version, action = heapq.heappop(self.timers)
                    self._advance(uid, version, action)
                wait = (self.timers[0][0] - now) if self.timers else 5.0
                self.timer_cv.wait(timeout=min(max(wait, 0.005), 5.0))

    # -- status sync -------------------------------------------
    def run_worker(self) -> None:
        while True:
            uid = self.sync_queue.get()
            with self.lock:
                self.pending.discard(uid)
                rec = self.records.get(uid)
                if rec is None:
                    continue
                if rec.state == "deleting":
                    body = self._kill_status(rec) if rec.published not in ("terminated", "killed") else None
                    rec.published = "killed"
                else:
                    if rec.state == "creating" and time.time() >= rec.accepted_at + rec.plan.start_seconds:
                        # Already due to start (a backlog): like the kubelet's status manager, publish
                        # only the latest state instead of every step.
                        self._advance(uid, rec.version, "start")
                    if rec.sent_version == rec.version:
                        continue
                    body = self._status(rec)
                    rec.published, rec.sent_version = rec.state, rec.version
                path = rec.path
                deleting = rec.state == "deleting"
                version = rec.version
            try:
                if body is not None:
                    self.api.patch(path + "/status", {"status": body}, kind="strategic")
                    self.stats["patches"] += 1
                    if self.status_log is not None:
                        self._log_status_write(path, body.get("phase", ""))
                if deleting:
                    options = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
                    self.api.request("DELETE", path, options)
                    self.stats["deletes"] += 1
            except ApiError as exc:
                if exc.status in (404, 409):
                    # Gone, or a new pod of the same name: nothing left for us to do.
                    with self.lock:
                        if deleting or exc.status == 404:
                            self._forget(uid)
                    continue
                self.stats["errors"] += 1
                log.warning("%s %s/%s: %s", "delete" if deleting else "status", *path.split("/")[-3::2], exc)
                self._retry(uid, version)
            except ApiUnavailable:
                self._retry(uid, version)
                # The API server is down (restarting, or stopped by a fault test): do not spin on it.
                time.sleep(0.5)

    def _log_status_write(self, path: str, phase: str) -> None:
        parts = path.split("/")  # /api/v1/namespaces/<ns>/pods/<name>
        line = json.dumps({"namespace": parts[4], "pod": parts[6], "phase": phase, "at": time.time()})
        with self.status_log_lock:
            self.status_log.write(line + "\n")

    def _retry(self, uid: str, version: int) -> None:
        with self.lock:
            rec = self.records.get(uid)
            if rec is not None:
                if rec.state == "deleting":
                    rec.published = ""
                rec.sent_version = -1
                heapq.heappush(self.timers, (time.time() + 1.0, next(self.seq), uid, rec.version, "resync"))
                self.timer_cv.notify()

    def _terminated(self, rec: PodRecord, *, exit_code: int | None = None, reason: str | None = None,
                    message: str | None = None) -> dict[str, Any]:  # fmt: skip
        now = time.time()
        return {
            "exitCode": rec.exit_code if exit_code is None else exit_code,
            "reason": rec.reason if reason is None else reason,
            "message": message or f"[simulated] exited with code {rec.exit_code}",
            "startedAt": rfc3339(rec.started_at or now),
            "finishedAt": rfc3339(rec.finished_at or now),
            "containerID": self._container_id(rec),
        }

    @staticmethod
    def _container_id(rec: PodRecord) -> str:
        return f"simulated://{rec.uid[:13]}-{rec.restart_count}"

    def _status(self, rec: PodRecord) -> dict[str, Any]:
        """The full pod status for the record's current state (a strategic merge patch body)."""
        ready = rec.state == "running" and not rec.backend_error
        if rec.state == "terminated":
            phase = "Succeeded" if rec.exit_code == 0 and not rec.pod_reason else "Failed"
        elif rec.state in ("running", "crashloop"):
            phase = "Running"
        else:
            phase = "Pending"
        now_s = rfc3339(time.time())
        statuses = []
        for name, image in rec.containers:
            failing = rec.state == "pullfail" and image == rec.plan.pull_failure_image
            state: dict[str, Any] = {"waiting": None, "running": None, "terminated": None}
            if rec.state == "creating" or (rec.state == "pullfail" and not failing):
                state["waiting"] = {"reason": "ContainerCreating"}
            elif failing:
                message = (
                    f'Back-off pulling image "{image}"'
                    if rec.pull_stage == "ImagePullBackOff"
                    else f'[simulated] failed to pull image "{image}": it matches a failing_images pattern '
                    "of the node simulator (rpc error: code = NotFound desc = manifest unknown)"
                )
                state["waiting"] = {"reason": rec.pull_stage, "message": message}
            elif rec.state == "running":
                state["running"] = {"startedAt": rfc3339(rec.started_at or time.time())}
            elif rec.state == "crashloop":
                state["waiting"] = {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off restarting failed container {name} in pod {rec.name}",
                }
            else:
                state["terminated"] = self._terminated(rec)
            entry: dict[str, Any] = {
                "name": name,
                "image": image,
                "imageID": "" if rec.state in ("creating", "pullfail") else f"simulated://{image}",
                "ready": ready,
                "started": rec.state == "running",
                "restartCount": rec.restart_count,
                "state": state,
            }
            if rec.started_at is not None:
                entry["containerID"] = self._container_id(rec)
            if rec.last_terminated is not None:
                entry["lastState"] = {"terminated": rec.last_terminated}
            statuses.append(entry)
        cond_ready = "True" if ready else "False"
        status: dict[str, Any] = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "podIP": rec.ip,
            "podIPs": [{"ip": rec.ip}],
            "startTime": rfc3339(rec.accepted_at),
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now_s},
                {"type": "Ready", "status": cond_ready, "lastTransitionTime": now_s},
                {"type": "ContainersReady", "status": cond_ready, "lastTransitionTime": now_s},
            ],
            "containerStatuses": statuses,
        }
        if rec.pod_reason == "DeadlineExceeded":
            status["reason"] = "DeadlineExceeded"
            status["message"] = "Pod was active on the node longer than the specified deadline"
        if rec.init_containers:
            status["initContainerStatuses"] = [
                {
                    "name": name,
                    "image": image,
                    "imageID": f"simulated://{image}",
                    "ready": True,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": rfc3339(rec.accepted_at),
                            "finishedAt": rfc3339(rec.accepted_at),
                        }
                    },
                }
                for name, image in rec.init_containers
            ]
        return status

    def _kill_status(self, rec: PodRecord) -> dict[str, Any] | None:
        """Status of a pod killed because it was deleted: running containers end with SIGTERM's 143."""
        if rec.started_at is None or rec.finished_at is not None:
            return None
        rec.finished_at, rec.exit_code, rec.reason = time.time(), 143, "Error"
        status = self._status_for_kill(rec)
        return status

    def _status_for_kill(self, rec: PodRecord) -> dict[str, Any]:
        saved = rec.state
        rec.state = "terminated"
        try:
            status = self._status(rec)
        finally:
            rec.state = saved
        for entry in status["containerStatuses"]:
            entry["state"]["terminated"]["message"] = "[simulated] killed because the pod was deleted"
        return status

    # -- events ------------------------------------------------------
    def event(self, rec: PodRecord, kind: str, reason: str, message: str) -> None:
        stamp = rfc3339(time.time())
        body = {
            "metadata": {"generateName": f"{rec.name}.", "namespace": rec.namespace},
            "involvedObject": {
                "kind": "Pod",
                "apiVersion": "v1",
                "namespace": rec.namespace,
                "name": rec.name,
                "uid": rec.uid,
                "fieldPath": f"spec.containers{{{rec.containers[0][0] if rec.containers else ''}}}",
            },
            "type": kind,
            "reason": reason,
            "message": message,
            "source": {"component": "kubelet", "host": rec.node},
            "reportingComponent": "kubelet",
            "reportingInstance": rec.node,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        with contextlib.suppress(queue.Full):
            self.events.put_nowait(body)

    def run_events(self) -> None:
        while True:
            body = self.events.get()
            # Status updates first: events wait while pods are waiting for theirs.
            while not self.sync_queue.empty():
                time.sleep(0.05)
            with contextlib.suppress(ApiError, ApiUnavailable):
                self.api.request("POST", f"/api/v1/namespaces/{body['metadata']['namespace']}/events", body)

    # -- watch -------------------------------------------------
    def run_watch(self) -> None:
        """List, then watch from the list's resourceVersion; on any break list again (after a pause)."""
        pause = 0.2
        while True:
            try:
                self._list_and_watch()
                pause = 0.2
            except (ApiUnavailable, OSError, ValueError) as exc:
                log.info("pod watch interrupted (%s); reconnecting", exc)
            except ApiError as exc:
                log.warning("pod watch failed: %s", exc)
            time.sleep(pause)
            pause = min(pause * 2, 2.0)

    def _list_and_watch(self) -> None:
        selector = "fieldSelector=spec.nodeName%21%3D"
        listing = self.api.get(f"/api/v1/pods?{selector}&limit=5000")
        seen = set()
        for pod in listing.get("items") or []:
            seen.add(pod["metadata"]["uid"])
            self.on_pod("ADDED", pod)
        with self.lock:
            for uid in [u for u in self.records if u not in seen]:
                self._forget(uid)
        rv = listing["metadata"]["resourceVersion"]
        while True:
            resp = self.api.watch(
                f"/api/v1/pods?{selector}&watch=1&allowWatchBookmarks=true&timeoutSeconds=240&resourceVersion={rv}"
            )
            try:
                for line in resp:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            return  # too old a resourceVersion: list again
                        raise ApiError(int(obj.get("code") or 500), json.dumps(obj).encode())
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if kind != "BOOKMARK":
                        self.on_pod(kind, obj)
            finally:
                resp.close()


def backend_spec(pod: dict[str, Any], ip: str) -> BackendSpec | None:
    """What a pod's backend serves: every declared TCP containerPort; None for a pod without ports."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    ports: list[int] = []
    base_url = ""
    for container in spec.get("containers") or []:
        for port in container.get("ports") or []:
            if (port.get("protocol") or "TCP") == "TCP" and isinstance(port.get("containerPort"), int):
                ports.append(port["containerPort"])
        for env in container.get("env") or []:
            if env.get("name") == "GPUPORTAL_BASE_URL" and not base_url:
                base_url = str(env.get("value") or "")
    if not ports:
        return None
    return BackendSpec(
        namespace=meta.get("namespace", ""),
        pod=meta.get("name", ""),
        ip=ip,
        ports=tuple(dict.fromkeys(ports)),
        base_url=base_url,
    )


GPU_UTILIZATION_ANNOTATION = "sim.gpuportal.dev/gpu-utilization"
GPU_UTILIZATION_ENV = "SIM_GPU_UTILIZATION"


def _gpu_utilization(pod: dict[str, Any]) -> float | None:
    """A pod's pinned simulated GPU utilization (annotation, else its first container env that sets it)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_UTILIZATION_ANNOTATION)
    for container in (pod.get("spec") or {}).get("containers") or []:
        if raw is not None:
            break
        raw = next((e.get("value") for e in container.get("env") or [] if e.get("name") == GPU_UTILIZATION_ENV), None)
    try:
        return None if raw is None else max(0.0, min(100.0, float(raw)))
    except ValueError:
        return None


class TelemetryPublisher:
    """Pushes simulated agent reports for every simulated node to the portals that asked for them.

    A portal asks by a JSON file in <state dir>/telemetry-targets/ (written by `python -m
    devtools.local_telemetry`, or a test): {"portal_url": ..., "tokens": {node: token}, "interval_seconds": 5}
    (each node pushes with its own token, as real agents do; a single "token" for all nodes is still read).
    The directory is re-read every pass, so portals come and go without restarting the cluster; with no
    file nothing is sampled. Readings come from agent.simulated.SimulatedSampler: every report says
    "simulated": true. A GPU counts as busy while a running pod holds it (GPUs are handed to a node's
    running pods in order); the pod's UID goes with it, as the real agent finds it from the cgroup.
    Each report also carries the real use of the persistent volumes its running pods mount (their
    directories under the state directory, measured by agent.volumes as a real agent measures a volume
    that is not a filesystem of its own), named by PersistentVolume as the kubelet names them.
    """

    def __init__(self, sim: Simulator, targets_dir: str) -> None:
        from agent.simulated import SimulatedSampler

        self.sim = sim
        self.targets_dir = targets_dir
        # One pusher per (target file, portal URL, node, token): each node reports with its own token.
        self.pushers: dict[tuple[str, str, str, str], tuple[Any, threading.Event]] = {}
        self.samplers = {
            node: SimulatedSampler(
                node,
                pool.gpus_per_node,
                pool.gpu_product.replace("-", " ", 1) or "Simulated GPU",
                pool.cuda_driver,
                busy_fn=lambda node=node: self.busy(node),
            )
            for node, pool in sim.nodes.items()
        }

    def busy(self, node: str) -> dict[int, Any]:
        from agent.simulated import BusyGpu

        with self.sim.lock:
            running = sorted(
                (r for r in self.sim.records.values() if r.node == node and r.state == "running" and r.gpus > 0),
                key=lambda r: (r.accepted_at, r.uid),
            )
            held: dict[int, Any] = {}
            for rec in running:
                for _ in range(rec.gpus):
                    if len(held) >= self.samplers[node].gpu_count:
                        break
                    held[len(held)] = BusyGpu(
                        pod_uid=rec.uid,
                        container_id=self.sim._container_id(rec),
                        utilization_percent=rec.gpu_utilization,
                    )
            return held

    def volumes(self, node: str) -> tuple[Any, ...]:
        from agent.volumes import measure

        with self.sim.lock:
            mounting = [
                (r.namespace, r.mount_plans)
                for r in self.sim.records.values()
                if r.node == node and r.state == "running"
            ]
        directories: dict[str, Path] = {}
        for namespace, plans in mounting:
            directories.update(self.sim.storage.volume_directories(namespace, plans))
        return measure(directories)

    def _targets(self) -> dict[tuple[str, str, str, str], float]:
        targets = {}
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(self.targets_dir)):
                if not name.endswith(".json"):
                    continue
                try:
                    with open(os.path.join(self.targets_dir, name)) as fh:
                        spec = json.load(fh)
                    tokens = spec.get("tokens") or dict.fromkeys(self.samplers, spec["token"])
                    interval = max(0.5, float(spec.get("interval_seconds", 5)))
                    for node, token in tokens.items():
                        if node in self.samplers:
                            targets[(name, str(spec["portal_url"]), node, str(token))] = interval
                except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                    log.warning("telemetry target %s unreadable: %s", name, exc)
        return targets

    def _sync(self, targets: dict[tuple[str, str, str, str], float]) -> None:
        from agent.push import Pusher
        from agent.stats import AgentStats

        for key in [k for k in self.pushers if k not in targets]:
            pusher, stop = self.pushers.pop(key)
            stop.set()
            pusher.wake()
            log.info("telemetry: stopped publishing to %s", pusher.url_for_logs)
        for key in targets:
            if key in self.pushers:
                continue
            try:
                pusher = Pusher(key[1], lambda token=key[3]: token, AgentStats(), max_reports=120)
            except ValueError as exc:
                log.warning("telemetry target %s: %s", key[0], exc)
                continue
            stop = threading.Event()
            threading.Thread(target=pusher.run, args=(stop,), daemon=True).start()
            self.pushers[key] = (pusher, stop)
            log.info("telemetry: publishing %s's simulated GPU readings to %s", key[2], pusher.url_for_logs)

    def run(self) -> None:
        from datetime import UTC, datetime

        from agent import __version__
        from agent.report import build_report

        interval = 5.0
        while True:
            try:
                targets = self._targets()
                self._sync(targets)
                interval = min(targets.values(), default=5.0)
                now = datetime.now(UTC)
                for node, sampler in self.samplers.items() if self.pushers else ():
                    report = build_report(
                        sampler.sample(), node=node, simulated=True, timestamp=now,
                        interval_seconds=interval, agent_version=f"{__version__}-localcluster",
                        volumes=self.volumes(node),
                    )  # fmt: skip
                    for (_name, _url, target_node, _token), (pusher, _stop) in self.pushers.items():
                        if target_node == node:
                            pusher.enqueue(report)
            except Exception:
                # The kubelet's work matters more than its telemetry: log and go on.
                log.exception("telemetry: publishing failed")
            time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.simulator")
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    with open(args.config) as fh:
        config = json.load(fh)
    config.setdefault("state_dir", os.path.dirname(os.path.abspath(args.config)))
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    sim = Simulator(config)
    kubelet.serve_logs(sim, config["kubelet_cert"], config["kubelet_key"], config["ca_file"])
    keeper = kubelet.NodeKeeper(sim)
    keeper.register_all()
    publisher = TelemetryPublisher(
        sim, os.path.join(os.path.dirname(os.path.abspath(args.config)), "telemetry-targets")
    )
    threads: list[Callable[[], None]] = [
        sim.run_timers, keeper.run_heartbeats, sim.run_events, publisher.run, sim.storage.run,
    ]  # fmt: skip
    threads += [sim.run_worker] * WORKERS
    for target in threads:
        threading.Thread(target=target, daemon=True).start()
    log.info("simulating %d nodes; kubelet port %d", len(sim.nodes), sim.kubelet_port)
    with contextlib.suppress(KeyboardInterrupt):
        sim.run_watch()
    return 0


if __name__ == "__main__":
    sys.exit(main())
