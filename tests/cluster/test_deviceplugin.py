"""The device plugin against a stand-in kubelet speaking the same gRPC API (no cluster needed): it registers
for nvidia.com/gpu with the v1beta1 version and its socket, streams its devices, answers Allocate with
NVIDIA_VISIBLE_DEVICES, re-sends the list when a device turns unhealthy, and registers again when the
kubelet's socket is replaced. The committed stubs are what api.proto generates. The same plugin against the
real kubelet: tests/cluster/test_real_nodes.py."""

from __future__ import annotations

import queue
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from localcluster.deviceplugin import api_pb2, api_pb2_grpc, device_ids, set_health

REPO = Path(__file__).resolve().parents[2]


class FakeKubelet(api_pb2_grpc.RegistrationServicer):
    def __init__(self) -> None:
        self.requests: queue.Queue[api_pb2.RegisterRequest] = queue.Queue()

    def Register(self, request, context):
        self.requests.put(request)
        return api_pb2.Empty()


def _kubelet(directory: Path) -> tuple[grpc.Server, FakeKubelet]:
    fake = FakeKubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_RegistrationServicer_to_server(fake, server)
    server.add_insecure_port(f"unix://{directory / 'kubelet.sock'}")
    server.start()
    return server, fake


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[tuple[Path, FakeKubelet, subprocess.Popen[bytes]]]:
    plugins = tmp_path / "device-plugins"
    plugins.mkdir()
    server, fake = _kubelet(plugins)
    proc = subprocess.Popen(
        [sys.executable, "-m", "localcluster.deviceplugin", f"--plugin-dir={plugins}", "--node=n1", "--gpus=3",
         f"--health-file={tmp_path / 'health.json'}"],
        cwd=REPO,
    )  # fmt: skip
    try:
        yield tmp_path, fake, proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        server.stop(0)


def test_registers_streams_devices_allocates_and_reports_an_unhealthy_gpu(plugin):
    tmp_path, fake, _proc = plugin
    request = fake.requests.get(timeout=20)
    assert request.version == "v1beta1"
    assert request.resource_name == "nvidia.com/gpu"
    assert request.endpoint == "gpuportal.sock"
    ids = device_ids("n1", 3)
    with grpc.insecure_channel(f"unix://{tmp_path / 'device-plugins' / request.endpoint}") as channel:
        stub = api_pb2_grpc.DevicePluginStub(channel)
        stream = stub.ListAndWatch(api_pb2.Empty(), timeout=30)
        first = next(stream)
        assert [(d.ID, d.health) for d in first.devices] == [(i, "Healthy") for i in ids]

        answer = stub.Allocate(
            api_pb2.AllocateRequest(
                container_requests=[
                    api_pb2.ContainerAllocateRequest(devicesIDs=ids[:2]),
                    api_pb2.ContainerAllocateRequest(devicesIDs=ids[2:]),
                ]
            ),
            timeout=5,
        )
        assert [dict(r.envs) for r in answer.container_responses] == [
            {"NVIDIA_VISIBLE_DEVICES": f"{ids[0]},{ids[1]}"},
            {"NVIDIA_VISIBLE_DEVICES": ids[2]},
        ]
        with pytest.raises(grpc.RpcError) as refused:
            stub.Allocate(
                api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devicesIDs=["GPU-x"])]),
                timeout=5,
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        set_health(tmp_path / "health.json", ids[1], "Unhealthy")
        update = next(stream)
        assert {d.ID: d.health for d in update.devices} == {ids[0]: "Healthy", ids[1]: "Unhealthy", ids[2]: "Healthy"}
        stream.cancel()


def test_registers_again_when_the_kubelet_restarts(plugin):
    tmp_path, fake, _proc = plugin
    fake.requests.get(timeout=20)
    plugins = tmp_path / "device-plugins"
    # A restarted kubelet: a new socket at the same path (the old one removed first, as the kubelet does).
    (plugins / "kubelet.sock").unlink()
    server, again = _kubelet(plugins)
    try:
        assert again.requests.get(timeout=20).resource_name == "nvidia.com/gpu"
    finally:
        server.stop(0)


def test_the_committed_stubs_are_what_api_proto_generates(tmp_path):
    proto = "localcluster/deviceplugin/api.proto"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", f"--python_out={tmp_path}", f"--grpc_python_out={tmp_path}",
         proto],
        cwd=REPO, check=True,
    )  # fmt: skip
    for name in ("api_pb2.py", "api_pb2_grpc.py"):
        generated = (tmp_path / "localcluster" / "deviceplugin" / name).read_text()
        committed = (REPO / "localcluster" / "deviceplugin" / name).read_text()
        assert committed == generated, f"{name} is stale: run `make deviceplugin-stubs`"


def test_ids_are_stable_and_unique_per_node():
    assert device_ids("a", 4) == device_ids("a", 4)
    assert not set(device_ids("a", 4)) & set(device_ids("b", 4))
    assert len(set(device_ids("a", 4))) == 4
