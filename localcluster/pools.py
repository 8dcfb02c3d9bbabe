"""Node pools and simulator settings of the local GPU cluster, read from a small YAML file.

Pure parsing and validation: no I/O beyond reading the file, so the unit tests can feed it dicts.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from localcluster.deviceplugin import sharing

DEFAULT_POOLS_FILE = Path(__file__).with_name("pools.yaml")
DEFAULT_FAILING_IMAGES = ("*.invalid/*", "*:does-not-exist")

# Kubernetes quantities as we accept them for cpu and memory (a subset; enough to catch typos).
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CUDA = re.compile(r"^([0-9]+)\.([0-9]+)$")


class PoolsError(ValueError):
    """The pools file is malformed; the message names the file, the field and what is wrong."""


@dataclass(frozen=True)
class Pool:
    name: str
    gputype: str
    nodes: int
    gpus_per_node: int
    cpu: str = "32"
    memory: str = "128Gi"
    cuda_driver: str = "12.2"
    gpu_product: str = ""
    max_pods: int = 110
    # How each GPU is offered, as our device plugin's --sharing (issue 40): "" whole GPUs,
    # "mig:1g.10gb:7" seven MIG slices per GPU, "time-sliced:4" four replicas per GPU.
    sharing: str = ""

    @property
    def resource(self) -> tuple[str, int]:
        """The extended resource the pool's nodes advertise, and how many per node."""
        return sharing.advertised(self.gpus_per_node, self.sharing)

    @property
    def cuda_major(self) -> str:
        return self.cuda_driver.split(".")[0]

    @property
    def cuda_minor(self) -> str:
        return self.cuda_driver.split(".")[1]

    def node_names(self) -> list[str]:
        return [f"gpu-{self.name}-{i}" for i in range(1, self.nodes + 1)]


@dataclass(frozen=True)
class SimulatorConfig:
    failing_images: tuple[str, ...] = DEFAULT_FAILING_IMAGES
    default_batch_run_seconds: float = 20.0
    default_start_seconds: float = 0.2


@dataclass(frozen=True)
class PoolsConfig:
    pools: tuple[Pool, ...]
    simulator: SimulatorConfig = field(default_factory=SimulatorConfig)

    @property
    def node_count(self) -> int:
        return sum(p.nodes for p in self.pools)

    def node_names(self) -> list[str]:
        return [n for p in self.pools for n in p.node_names()]

    def to_dict(self) -> dict[str, Any]:
        return {
            "pools": [asdict(p) for p in self.pools],
            "simulator": {
                "failing_images": list(self.simulator.failing_images),
                "default_batch_run_seconds": self.simulator.default_batch_run_seconds,
                "default_start_seconds": self.simulator.default_start_seconds,
            },
        }

    @classmethod
    def default(cls) -> PoolsConfig:
        return load_pools(DEFAULT_POOLS_FILE)


def load_pools(path: Path | str) -> PoolsConfig:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PoolsError(f"cannot read pools file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise PoolsError(f"pools file {path} is not valid YAML: {exc}") from exc
    return parse_pools(data, source=str(path))


def parse_pools(data: Any, *, source: str = "<pools>") -> PoolsConfig:
    if not isinstance(data, dict) or not isinstance(data.get("pools"), list) or not data["pools"]:
        raise PoolsError(f"{source}: expected a mapping with a non-empty `pools:` list")
    unknown = set(data) - {"pools", "simulator"}
    if unknown:
        raise PoolsError(f"{source}: unknown top-level key(s): {', '.join(sorted(unknown))}")
    pools = tuple(_parse_pool(item, i, source) for i, item in enumerate(data["pools"]))
    names = [p.name for p in pools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PoolsError(f"{source}: duplicate pool name(s): {', '.join(dupes)}")
    return PoolsConfig(pools=pools, simulator=_parse_simulator(data.get("simulator") or {}, source))


def _parse_pool(item: Any, index: int, source: str) -> Pool:
    where = f"{source}: pools[{index}]"
    if not isinstance(item, dict):
        raise PoolsError(f"{where}: expected a mapping")
    allowed = set(Pool.__dataclass_fields__)
    unknown = set(item) - allowed
    if unknown:
        raise PoolsError(f"{where}: unknown key(s): {', '.join(sorted(unknown))}")
    gputype = str(item.get("gputype") or item.get("name") or "")
    name = str(item.get("name") or gputype)
    if not name or not _NAME.match(name):
        raise PoolsError(f"{where}: `name` must be a lowercase DNS label (got {name!r})")
    if not gputype or not _NAME.match(gputype):
        raise PoolsError(f"{where}: `gputype` must be a lowercase label value (got {gputype!r})")
    nodes = _int(item.get("nodes", 1), f"{where}.nodes", minimum=0)
    gpus = _int(item.get("gpus_per_node", 0), f"{where}.gpus_per_node", minimum=0)
    max_pods = _int(item.get("max_pods", 110), f"{where}.max_pods", minimum=1)
    cpu = str(item.get("cpu", "32"))
    memory = str(item.get("memory", "128Gi"))
    for key, value in (("cpu", cpu), ("memory", memory)):
        if not _QUANTITY.match(value):
            raise PoolsError(f"{where}.{key}: {value!r} is not a Kubernetes quantity (e.g. 32, 500m, 128Gi)")
    cuda = str(item.get("cuda_driver", "12.2"))
    if not _CUDA.match(cuda):
        raise PoolsError(f"{where}.cuda_driver: expected MAJOR.MINOR such as 12.2 (got {cuda!r})")
    product = str(item.get("gpu_product") or f"simulated-{gputype}")
    shared = str(item.get("sharing") or "")
    try:
        sharing.parse(shared)
    except sharing.SharingError as exc:
        raise PoolsError(f"{where}.sharing: {exc}") from None
    return Pool(
        name=name,
        gputype=gputype,
        nodes=nodes,
        gpus_per_node=gpus,
        cpu=cpu,
        memory=memory,
        cuda_driver=cuda,
        gpu_product=product,
        max_pods=max_pods,
        sharing=shared,
    )


def _parse_simulator(data: Any, source: str) -> SimulatorConfig:
    where = f"{source}: simulator"
    if not isinstance(data, dict):
        raise PoolsError(f"{where}: expected a mapping")
    unknown = set(data) - set(SimulatorConfig.__dataclass_fields__)
    if unknown:
        raise PoolsError(f"{where}: unknown key(s): {', '.join(sorted(unknown))}")
    patterns = data.get("failing_images", list(DEFAULT_FAILING_IMAGES))
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise PoolsError(f"{where}.failing_images: expected a list of glob patterns")
    return SimulatorConfig(
        failing_images=tuple(patterns),
        default_batch_run_seconds=_float(
            data.get("default_batch_run_seconds", 20), f"{where}.default_batch_run_seconds"
        ),
        default_start_seconds=_float(data.get("default_start_seconds", 0.2), f"{where}.default_start_seconds"),
    )


def _int(value: Any, where: str, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PoolsError(f"{where}: expected an integer >= {minimum} (got {value!r})")
    return value


def _float(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PoolsError(f"{where}: expected a number >= 0 (got {value!r})")
    return float(value)
