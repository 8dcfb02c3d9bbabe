"""Pointing the local GPU cluster's node simulator at a portal, so it publishes simulated GPU readings.

Development only (`make run`, tests): the image ships none of devtools/. The simulator reads
<state dir>/telemetry-targets/*.json every pass (localcluster/simulator.py, TelemetryPublisher); each file
names a portal and the agent token of each node to push with.

    python -m devtools.local_telemetry [--state-dir var/cluster] [--portal-url URL] [--disconnect]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from localcluster.pools import parse_pools

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
    # Here, not at the top: `python -m devtools.local_telemetry` sets Django up before the models load.
    from telemetry.services.tokens import agent_token_issue

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


def main(argv: list[str] | None = None) -> int:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.conf import settings

    parser = argparse.ArgumentParser(prog="python -m devtools.local_telemetry", description=__doc__.split("\n")[0])
    parser.add_argument("--state-dir", type=Path, default=settings.BASE_DIR / "var" / "cluster")
    parser.add_argument("--portal-url", default=settings.SITE_URL)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between reports")
    parser.add_argument("--name", default="portal", help="the target's name (one file per portal)")
    parser.add_argument("--disconnect", action="store_true", help="stop publishing to this target")
    options = parser.parse_args(argv)
    if not (options.state_dir / "simulator.json").exists():
        print(f"no local GPU cluster in {options.state_dir} (start one with `make cluster-up`)", file=sys.stderr)
        return 2
    if options.disconnect:
        gone = local_cluster_disconnect(state_dir=options.state_dir, name=options.name)
        print("disconnected" if gone else "was not connected")
        return 0
    path = local_cluster_connect(
        state_dir=options.state_dir, portal_url=options.portal_url, name=options.name,
        interval_seconds=options.interval,
    )  # fmt: skip
    print(f"the node simulator now pushes simulated GPU readings to {options.portal_url} ({path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
