"""The local GPU cluster: build time, warm start time, and the node simulator's pod throughput.

cluster_cold_build_s   duration of the last real build on this machine (BUILD_SECONDS in the cache,
                       written by build.sh, or by a BENCH_COLD_BUILD=1 run); with BENCH_COLD_BUILD=1 a
                       real build into a temporary cache is timed (and recorded).
cluster_warm_start_s   LocalCluster.start() on a fresh state dir with the binaries cached, until all nodes
                       are Ready and the token controller works (target < 20 s).
simulator_pods_per_s   500 pods bound to the simulated nodes at once (the simulator paused while they are
                       created, SIGSTOP/SIGCONT), then the rate at which it moves them to Running.
simulator_cpu_ms_per_pod  the simulator's own CPU time in that window per pod: on a shared or loaded
                       machine the rate above measures the load; this shows what the simulator costs.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.context import BenchContext
from localcluster import LocalCluster, default_bin_dir
from localcluster.apiclient import Api, ApiError

IN_FLIGHT = 500
BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "localcluster" / "build.sh"


# What this module prints (benchmarks/__main__.py prints a missing one as an ERROR line).
FIGURES = (
    "cluster_cold_build_s",
    "cluster_warm_start_s",
    "simulator_pods_per_s",
    "simulator_cpu_ms_per_pod",
)


def run(ctx: BenchContext) -> Iterator[tuple[str, float]]:
    yield "cluster_cold_build_s", cold_build_seconds()
    yield "cluster_warm_start_s", warm_start_seconds(ctx.work_dir / "warm-start")
    rate, cpu_ms = simulator_throughput(ctx.cluster())
    yield "simulator_pods_per_s", rate
    yield "simulator_cpu_ms_per_pod", cpu_ms


def cold_build_seconds() -> float:
    if os.environ.get("BENCH_COLD_BUILD") == "1":
        cache = Path(tempfile.mkdtemp(prefix="gpuportal-coldbuild-"))
        try:
            started = time.monotonic()
            subprocess.run(
                ["bash", str(BUILD_SCRIPT)],
                check=True,
                env={**os.environ, "GPUPORTAL_CACHE": str(cache)},
                stdout=subprocess.DEVNULL,
            )
            seconds = time.monotonic() - started
            # Remember it next to the real cache, so later runs without a rebuild report it.
            if default_bin_dir().is_dir():
                (default_bin_dir() / "BUILD_SECONDS").write_text(f"{round(seconds)}\n")
            return seconds
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    recorded = default_bin_dir() / "BUILD_SECONDS"
    try:
        return float(recorded.read_text().strip())
    except (OSError, ValueError):
        print(
            f"# cluster_cold_build_s: {recorded} not found (the cache predates build-time recording); "
            "run with BENCH_COLD_BUILD=1 to time a real build",
            file=sys.stderr,
        )
        return math.nan


def warm_start_seconds(state_dir: Path) -> float:
    cluster = LocalCluster(state_dir=state_dir, log=lambda _msg: None)
    started = time.monotonic()
    try:
        cluster.start()
        return time.monotonic() - started
    finally:
        cluster.stop()


def _default_token(api: Api, namespace: str) -> bool:
    try:
        return bool(api.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default").get("secrets"))
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def simulator_pods_per_second(cluster: Any) -> float:
    return simulator_throughput(cluster)[0]


def simulator_throughput(cluster: Any) -> tuple[float, float]:
    """(pods per second from bound to Running, simulator CPU milliseconds per pod)."""
    api = Api(cluster.server, cluster.admin_token, str(cluster.ca_file))
    namespace = f"bench-sim-{uuid.uuid4().hex[:6]}"
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    deadline = time.monotonic() + 60
    while not _default_token(api, namespace):
        if time.monotonic() > deadline:
            raise RuntimeError("no default service account token")
        time.sleep(0.1)
    nodes = cluster.pools.node_names()
    simulator = cluster.component_pid("node-simulator")

    def create(i: int) -> None:
        pod = {
            "metadata": {"name": f"p{i}"},
            "spec": {
                # Pre-bound (no scheduler in the measurement) and a service, so it stays Running.
                "nodeName": nodes[i % len(nodes)],
                "restartPolicy": "Always",
                "containers": [{"name": "main", "image": "bench/idle:1"}],
            },
        }
        api.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)

    os.kill(simulator, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(IN_FLIGHT)))
        listing = api.get(f"/api/v1/namespaces/{namespace}/pods")
        rv = listing["metadata"]["resourceVersion"]
        watch = api.watch(f"/api/v1/namespaces/{namespace}/pods?watch=1&resourceVersion={rv}")
    finally:
        cpu_before = _cpu_seconds(simulator)
        os.kill(simulator, signal.SIGCONT)
    started = time.monotonic()
    running: set[str] = set()
    try:
        for line in watch:
            event = json.loads(line)
            pod = event["object"]
            if pod.get("status", {}).get("phase") == "Running":
                running.add(pod["metadata"]["name"])
                if len(running) == IN_FLIGHT:
                    break
            if time.monotonic() - started > 120:
                raise RuntimeError(f"only {len(running)} of {IN_FLIGHT} pods running after 120 s")
    finally:
        watch.close()
    elapsed = time.monotonic() - started
    cpu_ms = (_cpu_seconds(simulator) - cpu_before) * 1000 / IN_FLIGHT
    api.request("DELETE", f"/api/v1/namespaces/{namespace}", {"propagationPolicy": "Background"})
    return IN_FLIGHT / elapsed, cpu_ms


if __name__ == "__main__":
    # Handy alone: python -m benchmarks.bench_cluster (starts its own cluster).
    context = BenchContext()
    try:
        for metric, value in run(context):
            print(f"{metric}: {value:.6g}", flush=True)
    finally:
        context.close()
