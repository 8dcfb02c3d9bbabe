from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from identity.models import Role
from portal.env import env_email
from tests.engine.factories import GpuTypeFactory, MembershipFactory, QuotaFactory, TeamFactory, UserFactory
from tests.sinks import SmtpSink, WebhookReceiver


@pytest.fixture
def smtp(settings, monkeypatch) -> Iterator[SmtpSink]:
    """A real SMTP server, and the portal's mail pointed at it through EMAIL_URL."""
    sink = SmtpSink().start()
    monkeypatch.setenv("EMAIL_URL", sink.url() + "?from=gpus@example.org&timeout=3")
    for key, value in env_email("EMAIL_URL", "console://").items():
        setattr(settings, key, value)
    yield sink
    sink.stop()


@pytest.fixture
def receiver(settings) -> Iterator[WebhookReceiver]:
    """A real HTTP receiver on loopback, which the settings allow explicitly (as tests and `make run` do)."""
    settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.NOTIFY_WEBHOOK_TIMEOUT_SECONDS = 1
    hook = WebhookReceiver().start()
    yield hook
    hook.stop()


@dataclass
class Lab:
    team: Any
    owner: Any
    manager: Any
    outsider: Any
    p100: Any


@pytest.fixture
def lab(db) -> Lab:
    team = TeamFactory(slug="lab", name="Vision Lab")
    owner = MembershipFactory(team=team, user=UserFactory(username="olivia")).user
    manager = MembershipFactory(team=team, user=UserFactory(username="max"), role=Role.MANAGER).user
    outsider = MembershipFactory(team=TeamFactory(slug="other"), user=UserFactory(username="otto")).user
    p100 = GpuTypeFactory(slug="p100", display_name="Tesla P100")
    QuotaFactory(team=team, gpu_type=p100, max_gpus=8)
    return Lab(team=team, owner=owner, manager=manager, outsider=outsider, p100=p100)
