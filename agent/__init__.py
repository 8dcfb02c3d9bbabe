"""The GPU node agent: samples the node's GPUs through NVML and reports them.

It runs as its own process on every GPU node (`python -m agent`, or the `gpuportal-agent` script) and
never imports Django, so the DaemonSet image needs none of the portal's settings or database. See
agent/README.md for what it samples, how it is configured and what it sends.
"""

from __future__ import annotations

__version__ = "0.1.0"
