"""Faults end in a working cluster or in one clear message naming the cause and the fix: never a hang,
never a traceback. Also `up`/`down` as real processes: nothing is left running after `down`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localcluster import ClusterError, LocalCluster, default_bin_dir
from localcluster.procs import pid_alive

REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict[str, str] | None = None, timeout: float = 200) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "localcluster", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd and int(pid) != os.getpid() and pid_alive(int(pid)):
            found.append(f"{pid}: {cmd[:120]}")
    return found


@pytest.fixture
def fake_cache(tmp_path):
    """A binary cache as an interrupted build leaves it: files whose checksums do not match."""
    bin_dir = tmp_path / "cache" / "kubernetes-1.20.2" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        (bin_dir / name).write_bytes(b"#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir / "SHA256SUMS").write_text(
        "".join(f"{'0' * 64}  {n}\n" for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"))
    )
    return tmp_path / "cache"


def test_corrupt_binary_cache_is_named_with_the_fix(tmp_path, fake_cache):
    cluster = LocalCluster(tmp_path / "state", bin_dir=fake_cache / "kubernetes-1.20.2" / "bin")
    with pytest.raises(ClusterError, match="corrupt") as failure:
        cluster.start()
    assert "localcluster/build.sh" in str(failure.value)


def test_half_built_cache_is_named_with_the_fix(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kube-apiserver").write_bytes(b"partial")
    with pytest.raises(ClusterError, match="not built") as failure:
        LocalCluster(tmp_path / "state", bin_dir=bin_dir).start()
    assert "build.sh" in str(failure.value)


def test_build_script_check_rejects_a_corrupt_cache(fake_cache):
    result = subprocess.run(
        ["bash", str(REPO / "localcluster" / "build.sh"), "--check"],
        env={**os.environ, "GPUPORTAL_CACHE": str(fake_cache)},
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 1


def test_cli_reports_a_corrupt_cache_without_a_traceback(tmp_path, fake_cache):
    result = _cli("up", "--state-dir", str(tmp_path / "state"), env={"GPUPORTAL_CACHE": str(fake_cache)})
    assert result.returncode == 1
    assert "corrupt" in result.stderr
    assert "build.sh" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not _processes_mentioning(str(tmp_path / "state"))


def test_missing_etcd_package_is_named_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPORTAL_ETCD", str(tmp_path / "no-etcd-here"))
    with pytest.raises(ClusterError, match="etcd-server") as failure:
        LocalCluster(tmp_path / "state").start()
    assert "apt-get install etcd-server" in str(failure.value)


def test_occupied_port_is_named_with_its_owner(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ClusterError, match=f"port {port} .* already in use") as failure:
            LocalCluster(tmp_path / "state", apiserver_port=port).start()
        assert f"pid {os.getpid()}" in str(failure.value)
        result = _cli("up", "--state-dir", str(tmp_path / "state2"), "--port", str(port))
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not _processes_mentioning(str(tmp_path / "state2"))


def test_bad_pools_file_is_one_message(tmp_path):
    pools = tmp_path / "pools.yaml"
    pools.write_text("pools:\n  - name: p100\n    nodes: two\n")
    result = _cli("up", "--state-dir", str(tmp_path / "state"), "--pools", str(pools))
    assert result.returncode == 1
    assert "pools[0].nodes" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.cluster
@pytest.mark.slow
def test_up_over_a_stale_state_dir_then_down_leaves_nothing(tmp_path):
    """A crashed earlier run: stale pid files (one of a live leftover process), a stale cluster.json, and a
    remembered API server port that something else now holds. `up` still brings the cluster up."""
    if not (default_bin_dir() / "SHA256SUMS").exists():
        pytest.skip("Kubernetes binaries not built (make cluster-build)")
    state = tmp_path / "state"
    (state / "run").mkdir(parents=True)
    leftover = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(state / "etcd")])
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    busy = socket.socket()
    try:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        (state / "run" / "etcd.pid").write_text(f"{leftover.pid}\n")
        (state / "run" / "kube-apiserver.pid").write_text("999999\n")
        (state / "run" / "kube-scheduler.pid").write_text(f"{bystander.pid}\n")  # reused pid: not ours
        (state / "cluster.json").write_text(json.dumps({"state": "ready", "pid": 999999}))
        (state / "ports.json").write_text(json.dumps({"apiserver": busy.getsockname()[1]}))

        up = _cli("up", "--state-dir", str(state))
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip().splitlines()[-1] == f"KUBECONFIG={state / 'kubeconfig'}"
        assert "left running by an earlier run" in up.stderr
        assert leftover.wait(timeout=10) is not None
        assert bystander.poll() is None

        nodes = subprocess.run(
            ["kubectl", "--kubeconfig", str(state / "kubeconfig"), "get", "nodes", "--no-headers"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert nodes.returncode == 0, nodes.stderr
        rows = nodes.stdout.strip().splitlines()
        assert len(rows) == 5
        assert all(row.split()[1] == "Ready" for row in rows)
        assert _processes_mentioning(str(state))
        assert _cli("status", "--state-dir", str(state)).returncode == 0

        # The supervisor restarts a component that dies under it.
        simulator = json.loads((state / "cluster.json").read_text())["components"]["node-simulator"]
        os.kill(simulator, signal.SIGKILL)

        def restarted() -> bool:
            pid_file = state / "run" / "node-simulator.pid"
            return pid_file.exists() and int(pid_file.read_text()) != simulator

        deadline = time.monotonic() + 30
        while not restarted() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert restarted()
    finally:
        down = _cli("down", "--state-dir", str(state), timeout=90)
        busy.close()
        bystander.kill()
        leftover.kill()
    assert down.returncode == 0
    deadline = time.monotonic() + 10
    while _processes_mentioning(str(state)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_mentioning(str(state)) == []
    assert _cli("status", "--state-dir", str(state)).returncode == 3


@pytest.mark.cluster
@pytest.mark.slow
def test_corrupt_etcd_data_is_set_aside_and_the_cluster_starts(tmp_path):
    if not (default_bin_dir() / "SHA256SUMS").exists():
        pytest.skip("Kubernetes binaries not built (make cluster-build)")
    state = tmp_path / "state"
    messages: list[str] = []
    cluster = LocalCluster(state, log=messages.append)
    cluster.start()
    port = cluster.ports["apiserver"]
    cluster.stop()
    (state / "etcd" / "member" / "snap" / "db").write_bytes(os.urandom(64 * 1024))

    cluster = LocalCluster(state, log=messages.append)
    try:
        cluster.start()
        assert cluster.ports["apiserver"] == port  # the same address as before the crash
        assert list(state.glob("etcd.discarded-*"))
        assert any("moving old etcd data aside" in m for m in messages)
    finally:
        cluster.stop()
    assert _processes_mentioning(str(state)) == []


@pytest.mark.cluster
@pytest.mark.slow
def test_port_taken_between_pick_and_bind_is_retried_with_new_ports(tmp_path):
    """Two clusters starting side by side can race for a free port; the loser picks new ports once."""
    if not (default_bin_dir() / "SHA256SUMS").exists():
        pytest.skip("Kubernetes binaries not built (make cluster-build)")
    squatters: list[socket.socket] = []

    class RacedCluster(LocalCluster):
        def _pick_ports(self) -> None:
            super()._pick_ports()
            if not squatters:  # first attempt only: someone grabs the scheduler's port
                sock = socket.socket()
                sock.bind(("127.0.0.1", self.ports["scheduler"]))
                sock.listen()
                squatters.append(sock)

    messages: list[str] = []
    cluster = RacedCluster(tmp_path / "state", log=messages.append)
    try:
        cluster.start()
        assert cluster.ports["scheduler"] != squatters[0].getsockname()[1]
        assert any("retrying with new ports" in m for m in messages)
    finally:
        cluster.stop()
        for sock in squatters:
            sock.close()
