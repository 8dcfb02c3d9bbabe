"""Building real agent reports (the agent's own simulated sampler and report builder) and posting them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agent.report import Report, build_report
from agent.simulated import BusyGpu, SimulatedSampler

REPORTS_URL = "/api/v1/agent/reports"


def make_report(
    node: str = "gpu-p100-1",
    *,
    busy: Mapping[int, BusyGpu] | None = None,
    gpus: int = 4,
    at: datetime | None = None,
    cuda: str = "12.2",
    interval: float = 5.0,
    model: str = "Tesla P100-PCIE-16GB",
) -> Report:
    sampler = SimulatedSampler(node, gpus, model, cuda, busy_fn=lambda: dict(busy or {}), seed=7)
    return build_report(
        sampler.sample(),
        node=node,
        simulated=True,
        timestamp=at or datetime.now(UTC),
        interval_seconds=interval,
        agent_version="0.1.0",
    )


def post(client, body: Any, token: str | None, **headers: str):
    data = body if isinstance(body, bytes | str) else json.dumps(body.to_dict() if isinstance(body, Report) else body)
    if token is not None:
        headers.setdefault("HTTP_AUTHORIZATION", f"Bearer {token}")
    return client.post(REPORTS_URL, data=data, content_type="application/json", **headers)
