"""`python -m agent` / `gpuportal-agent`: run the GPU node agent until SIGTERM.

Exit codes: 0 after SIGTERM/SIGINT; 69 when NVML is not available on this node (no driver, no
libnvidia-ml, or a container started without the NVIDIA runtime) — a distinct code, so a DaemonSet
pod on a broken GPU node shows CrashLoopBackOff with one clear log line rather than serving empty
metrics that look healthy; 78 for a configuration error (the message names the variable); 1 when the
metrics port cannot be bound.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType

import agent
from agent.config import AgentConfig, ConfigError
from agent.loop import AgentLoop
from agent.metrics import AgentCollector, LatestReport, make_registry, serve_metrics
from agent.nvml import NvmlSampler, NvmlUnavailable
from agent.push import Pusher
from agent.readings import Sampler
from agent.simulated import BusyGpu, SimulatedSampler
from agent.stats import AgentStats
from agent.volumes import VolumeMeter

EXIT_NO_NVML = 69  # sysexits EX_UNAVAILABLE
EXIT_CONFIG = 78  # sysexits EX_CONFIG
EXIT_FAILED = 1

log = logging.getLogger("agent")


def make_sampler(config: AgentConfig) -> Sampler:
    """The reading source the configuration asks for; raises NvmlUnavailable for a node without NVML."""
    if config.simulate:
        busy = {index: BusyGpu() for index in config.simulate_busy}
        return SimulatedSampler(
            config.node_name,
            config.simulate_gpus,
            config.simulate_model,
            config.simulate_cuda_version,
            busy_fn=lambda: busy,
        )
    return NvmlSampler()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        config = AgentConfig.from_env()
    except ConfigError as exc:
        log.error("configuration error: %s", exc)
        return EXIT_CONFIG
    logging.getLogger().setLevel(config.log_level)
    try:
        sampler = make_sampler(config)
    except NvmlUnavailable as exc:
        log.error(
            "NVML not available on this node: %s; is the NVIDIA driver installed and the container "
            "started with the NVIDIA runtime?",
            exc,
        )
        return EXIT_NO_NVML

    stats = AgentStats()
    latest = LatestReport()
    registry = make_registry(AgentCollector(config.node_name, latest, stats, simulated=sampler.simulated))
    try:
        port, stop_metrics = serve_metrics(registry, config.metrics_port)
    except OSError as exc:
        log.error("cannot serve metrics on port %d: %s", config.metrics_port, exc)
        sampler.close()
        return EXIT_FAILED

    stop = threading.Event()
    pusher = None
    pusher_thread = None
    if config.portal_url:
        pusher = Pusher(config.portal_url, config.token, stats, max_reports=config.buffer_max_reports)
        pusher_thread = threading.Thread(target=pusher.run, args=(stop,), name="pusher", daemon=True)
        pusher_thread.start()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()
        if pusher is not None:
            pusher.wake()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info(
        "gpuportal-agent %s on node %s: %s source, sampling every %ss, metrics on :%d/metrics, %s",
        agent.__version__,
        config.node_name,
        "SIMULATED" if sampler.simulated else "NVML",
        config.sample_interval_seconds,
        port,
        # `is not None`: a Pusher is falsy while its buffer is empty (it has a length), and it starts empty.
        f"pushing to {pusher.url_for_logs}" if pusher is not None else "not pushing (PORTAL_URL unset)",
    )
    loop = AgentLoop(
        node_name=config.node_name,
        sampler=sampler,
        interval_seconds=config.sample_interval_seconds,
        host_proc=config.host_proc,
        latest=latest,
        stats=stats,
        pusher=pusher,
        volumes=(
            VolumeMeter(
                config.kubelet_root,
                interval_seconds=config.volume_interval_seconds,
                max_entries=config.volume_max_entries,
            )
            if config.volume_interval_seconds > 0
            else None
        ),
    )
    try:
        loop.run(stop)
    finally:
        if pusher_thread is not None:
            pusher_thread.join(timeout=10)
        stop_metrics()
        sampler.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
