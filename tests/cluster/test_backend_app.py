"""The simulated service backend on its own (no cluster): its page, WebSocket echo, the container-file
endpoint over mounted volumes (read-only mounts refuse writes), and closing its port when stopped."""

from __future__ import annotations

import secrets
import socket

import aiohttp
import pytest

from localcluster.backend import (
    BackendSpec,
    FileAccessError,
    Mount,
    ServiceBackends,
    resolve_container_path,
)
from tests.cluster.helpers import run_async


def _free_ip_port() -> tuple[str, int]:
    ip = f"127.{secrets.randbelow(200) + 30}.{secrets.randbelow(256)}.{secrets.randbelow(250) + 2}"
    with socket.socket() as sock:
        sock.bind((ip, 0))
        return ip, sock.getsockname()[1]


def test_container_paths_resolve_by_longest_mount_and_never_escape(tmp_path):
    mounts = (
        Mount("/home/ada", str(tmp_path / "home")),
        Mount("/datasets/imagenet", str(tmp_path / "ds"), read_only=True),
        Mount("/datasets", str(tmp_path / "other")),
    )
    assert resolve_container_path(mounts, "/home/ada/a/b.txt")[0] == tmp_path / "home" / "a" / "b.txt"
    assert resolve_container_path(mounts, "/datasets/imagenet/x")[1].read_only
    assert resolve_container_path(mounts, "/datasets/y")[0] == tmp_path / "other" / "y"
    with pytest.raises(FileAccessError) as outside:
        resolve_container_path(mounts, "/etc/passwd")
    assert outside.value.status == 404
    with pytest.raises(FileAccessError) as escape:
        resolve_container_path(mounts, "/home/ada/../../etc/passwd")
    assert escape.value.status == 400
    with pytest.raises(FileAccessError):
        resolve_container_path(mounts, "/home/adam/x")  # a sibling name is not under the mount


def test_backend_serves_page_echo_and_files_then_closes(tmp_path):
    ip, port = _free_ip_port()
    (tmp_path / "data").mkdir()
    spec = BackendSpec(
        namespace="team-a",
        pod="nb-1",
        ip=ip,
        ports=(port,),
        base_url="/w/u1/",
        mounts=(Mount("/home/ada", str(tmp_path / "home")), Mount("/data", str(tmp_path / "data"), True)),
    )
    backends = ServiceBackends()
    assert backends.start("uid-1", spec) is None

    async def scenario() -> dict[str, object]:
        async with aiohttp.ClientSession() as session:
            results: dict[str, object] = {}
            async with session.post(f"http://{ip}:{port}/some/where?q=1") as resp:
                results["page"] = (resp.status, await resp.text())
            async with session.put(f"http://{ip}:{port}/_files/home/ada/notes.txt", data=b"remember") as r:
                results["write"] = r.status
            async with session.get(f"http://{ip}:{port}/prefix/_files/home/ada/notes.txt") as resp:
                results["read"] = (resp.status, await resp.read())
            async with session.put(f"http://{ip}:{port}/_files/data/x.txt", data=b"no") as resp:
                results["readonly"] = (resp.status, await resp.text())
            async with session.get(f"http://{ip}:{port}/_files/etc/hostname") as resp:
                results["unmounted"] = resp.status
            async with session.ws_connect(f"http://{ip}:{port}/ws") as ws:
                await ws.send_str("ping")
                results["echo"] = await ws.receive_str(timeout=5)
                backends.stop("uid-1")
                closing = await ws.receive(timeout=5)
                results["close"] = (closing.type, ws.close_code)
            return results

    results = run_async(scenario())
    status, page = results["page"]
    assert status == 200
    assert "<dd id=method>POST</dd>" in page
    assert "<dd id=path>/some/where?q=1</dd>" in page
    assert "<dd id=base-url>/w/u1/</dd>" in page
    assert "team-a/nb-1" in page
    assert results["write"] == 201
    assert (tmp_path / "home" / "notes.txt").read_bytes() == b"remember"
    assert results["read"] == (200, b"remember")
    assert results["readonly"][0] == 403
    assert "Read-only file system" in results["readonly"][1]
    assert not (tmp_path / "data" / "x.txt").exists()
    assert results["unmounted"] == 404
    assert results["echo"] == "ping"
    assert results["close"][0] in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
    assert results["close"][1] == 1001
    with socket.socket() as sock:
        sock.settimeout(1)
        assert sock.connect_ex((ip, port)) != 0


def test_a_port_already_taken_is_reported_not_raised():
    ip, port = _free_ip_port()
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        holder.bind((ip, port))
        holder.listen()
        error = ServiceBackends().start("uid-2", BackendSpec(namespace="n", pod="p", ip=ip, ports=(port,)))
    assert error
    assert f"{ip}:{port}" in error
