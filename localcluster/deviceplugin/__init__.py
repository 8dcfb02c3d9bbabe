"""Our device plugin: simulated GPUs offered to a real kubelet through its v1beta1 DevicePlugin gRPC API.

    python -m localcluster.deviceplugin --plugin-dir <kubelet root>/device-plugins --node real-p100-1 --gpus 4

As NVIDIA's k8s-device-plugin does: a gRPC server on a socket of ours in the kubelet's device-plugins
directory, registered with the kubelet (Registration.Register on kubelet.sock) for `nvidia.com/gpu`;
ListAndWatch streams the devices and their health (the kubelet turns that into the node's capacity and
allocatable), Allocate answers NVIDIA_VISIBLE_DEVICES with the ids the kubelet picked. There are no GPUs
here: the devices are ids (`--sharing` offers MIG slices or time-sliced replicas of them instead, as
NVIDIA's plugin does on a node configured for it: localcluster/deviceplugin/sharing.py), and health comes from a JSON file (`{"<id>": "Unhealthy"}`, --health-file,
outside the device-plugins directory, which the kubelet empties when it starts), which tests write
(`set_health`) to play a failing GPU. When the kubelet restarts (it removes every socket in the
directory), the plugin serves and registers again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc

from localcluster.deviceplugin import api_pb2, api_pb2_grpc, sharing

API_VERSION = "v1beta1"
RESOURCE = sharing.WHOLE_RESOURCE
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
KUBELET_SOCKET = "kubelet.sock"
device_ids = sharing.gpu_ids


def set_health(path: Path, device_id: str, health: str) -> None:
    """Mark one device Healthy or Unhealthy in a plugin's health file (a test playing a GPU failure)."""
    states: dict[str, str] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(path.read_text())
        if isinstance(loaded, dict):
            states = loaded
    states[device_id] = health
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(states))
    tmp.replace(path)


class Plugin(api_pb2_grpc.DevicePluginServicer):
    def __init__(self, plugin_dir: Path, node: str, count: int, health_path: Path, sharing_spec: str = "") -> None:
        self.plugin_dir = plugin_dir
        self.node = node
        self.offer = sharing.offer(node, count, sharing_spec)
        self.ids = [d.id for d in self.offer.devices]
        self.health_path = health_path
        self._changed = threading.Condition()
        self._health = self._read_health()
        self.stopping = threading.Event()

    def _read_health(self) -> dict[str, str]:
        states: dict[str, str] = {}
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads(self.health_path.read_text())
            if isinstance(loaded, dict):
                states = {str(k): str(v) for k, v in loaded.items()}
        # A slice or replica is as healthy as its GPU (the file names GPUs, or single devices).
        return {
            d.id: UNHEALTHY if UNHEALTHY in (states.get(d.id), states.get(d.gpu)) else HEALTHY
            for d in self.offer.devices
        }

    def poll_health(self) -> None:
        while not self.stopping.wait(0.5):
            health = self._read_health()
            if health != self._health:
                with self._changed:
                    self._health = health
                    self._changed.notify_all()

    def _devices(self) -> api_pb2.ListAndWatchResponse:
        return api_pb2.ListAndWatchResponse(devices=[api_pb2.Device(ID=i, health=self._health[i]) for i in self.ids])

    # -- the gRPC service ----------------------------------------
    def GetDevicePluginOptions(self, request, context):
        return api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=False)

    def ListAndWatch(self, request, context) -> Iterator[api_pb2.ListAndWatchResponse]:
        sent = dict(self._health)
        yield self._devices()
        while context.is_active() and not self.stopping.is_set():
            with self._changed:
                self._changed.wait(timeout=1.0)
            if self._health != sent:
                sent = dict(self._health)
                yield self._devices()

    def GetPreferredAllocation(self, request, context):
        return api_pb2.PreferredAllocationResponse(
            container_responses=[
                api_pb2.ContainerPreferredAllocationResponse(
                    deviceIDs=list(r.must_include_deviceIDs)
                    + [i for i in r.available_deviceIDs if i not in r.must_include_deviceIDs][
                        : max(0, r.allocation_size - len(r.must_include_deviceIDs))
                    ]
                )
                for r in request.container_requests
            ]
        )

    def Allocate(self, request, context):
        responses = []
        for container in request.container_requests:
            unknown = [i for i in container.devicesIDs if i not in self._health]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown device ids: {', '.join(unknown)}")
            responses.append(
                api_pb2.ContainerAllocateResponse(
                    envs={"NVIDIA_VISIBLE_DEVICES": self.offer.visible_devices(list(container.devicesIDs))}
                )
            )
        return api_pb2.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request, context):
        return api_pb2.PreStartContainerResponse()


def serve_once(plugin: Plugin) -> None:
    """Serve on our socket, register with the kubelet, and return when the kubelet's socket is replaced
    (a restarted kubelet forgets its plugins) or our own socket is removed."""
    kubelet_sock = plugin.plugin_dir / KUBELET_SOCKET
    ours = plugin.plugin_dir / plugin.offer.endpoint
    # The kubelet empties this directory when it starts: serve only once its own socket is there.
    while not kubelet_sock.exists():
        if plugin.stopping.wait(0.2):
            return
    kubelet_inode = kubelet_sock.stat().st_ino
    ours.unlink(missing_ok=True)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    api_pb2_grpc.add_DevicePluginServicer_to_server(plugin, server)
    server.add_insecure_port(f"unix://{ours}")
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{kubelet_sock}") as channel:
            api_pb2_grpc.RegistrationStub(channel).Register(
                api_pb2.RegisterRequest(
                    version=API_VERSION,
                    endpoint=plugin.offer.endpoint,
                    resource_name=plugin.offer.resource,
                    options=api_pb2.DevicePluginOptions(),
                ),
                timeout=10,
            )
        print(f"[deviceplugin] {plugin.node}: registered {len(plugin.ids)} x {plugin.offer.resource}", flush=True)
        while not plugin.stopping.wait(0.5):
            try:
                if kubelet_sock.stat().st_ino != kubelet_inode or not ours.exists():
                    print(f"[deviceplugin] {plugin.node}: the kubelet restarted; registering again", flush=True)
                    return
            except FileNotFoundError:
                return
    finally:
        server.stop(grace=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.deviceplugin")
    parser.add_argument("--plugin-dir", type=Path, required=True, help="the kubelet's device-plugins directory")
    parser.add_argument("--node", required=True)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--health-file", type=Path, required=True, help='JSON {"<device id>": "Unhealthy"}')
    parser.add_argument(
        "--sharing", default="", help="whole (default), mig:<profile>:<per GPU> (mig:1g.10gb:7) or time-sliced:<N>"
    )
    args = parser.parse_args(argv)
    try:
        plugin = Plugin(args.plugin_dir, args.node, args.gpus, args.health_file, args.sharing)
    except sharing.SharingError as exc:
        parser.error(str(exc))
    signal.signal(signal.SIGTERM, lambda *_: plugin.stopping.set())
    signal.signal(signal.SIGINT, lambda *_: plugin.stopping.set())
    threading.Thread(target=plugin.poll_health, daemon=True).start()
    while not plugin.stopping.is_set():
        try:
            serve_once(plugin)
        except grpc.RpcError as exc:
            print(f"[deviceplugin] {args.node}: registration failed ({exc.code().name}); retrying", flush=True)
            time.sleep(1)
        except RuntimeError as exc:  # grpc could not bind our socket (the directory went away meanwhile)
            print(f"[deviceplugin] {args.node}: {exc}; retrying", flush=True)
            time.sleep(1)
    (args.plugin_dir / plugin.offer.endpoint).unlink(missing_ok=True)
    return 0
