"""Pointing the local GPU cluster's node simulator at this portal, so it publishes simulated readings.

The simulator reads <state dir>/telemetry-targets/*.json every pass (localcluster/simulator.py,
TelemetryPublisher); each file names a portal and the agent token of each node to push with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from localcluster.pools import parse_pools
from telemetry.services.tokens import agent_token_issue

TARGETS_DIR = "telemetry-targets"


def simulated_nodes(state_dir: Path) -> list[str]:
    """The node names the local cluster's simulator runs, from the configuration it was started with."""
    config = json.loads((Path(state_dir) / "simulator.json").read_text())
    return parse_pools(config["pools"], source="simulator.json").node_names()


def local_cluster_connect(
    *, state_dir: Path, portal_url: str, name: str = "portal", interval_seconds: float = 5.0
) -> Path:
    """Issue one agent token per simulated node (as a real deployment gives each node's agent its own)
    and write the target file; returns its path."""
    tokens = {
        node: agent_token_issue(name=f"local GPU cluster simulator ({name})", node=node)[1]
        for node in simulated_nodes(state_dir)
    }
    directory = Path(state_dir) / TARGETS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    tmp = path.with_suffix(".tmp")
    body = {"portal_url": portal_url, "tokens": tokens, "interval_seconds": interval_seconds}
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(body, fh)
    tmp.replace(path)
    return path


def local_cluster_disconnect(*, state_dir: Path, name: str = "portal") -> bool:
    path = Path(state_dir) / TARGETS_DIR / f"{name}.json"
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
