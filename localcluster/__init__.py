"""The local GPU cluster: a real Kubernetes control plane with simulated GPU nodes (see README.md).

Public API: LocalCluster, ClusterInfo, ClusterError, PoolsConfig, load_pools.
"""

from __future__ import annotations

from localcluster.cluster import ClusterInfo, LocalCluster, default_bin_dir, verify_binaries
from localcluster.pools import Pool, PoolsConfig, PoolsError, SimulatorConfig, load_pools
from localcluster.procs import ClusterError

__all__ = [
    "ClusterError",
    "ClusterInfo",
    "LocalCluster",
    "Pool",
    "PoolsConfig",
    "PoolsError",
    "SimulatorConfig",
    "default_bin_dir",
    "load_pools",
    "verify_binaries",
]
