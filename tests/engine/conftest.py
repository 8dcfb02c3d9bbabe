"""Fixtures of the engine's unit tests."""

from __future__ import annotations

import pytest

from jobs.kube import client as kube
from tests.engine.fake_kube import FakeCluster


@pytest.fixture
def fake_kube(monkeypatch) -> FakeCluster:
    """jobs.kube.client's functions answered by an in-memory cluster (tests/engine/fake_kube.py)."""
    cluster = FakeCluster()
    for name in ("core", "batch", "apps", "stream_get", "timeout"):
        monkeypatch.setattr(kube, name, getattr(cluster, name))
    monkeypatch.setattr(kube, "create", cluster.post)
    monkeypatch.setattr(kube, "delete", cluster.delete_by_name)
    return cluster
