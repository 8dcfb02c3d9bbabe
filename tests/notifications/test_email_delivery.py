"""Mail configured by EMAIL_URL reaches a real SMTP server (aiosmtpd), with authentication; the idle
warning (before notifications, the portal's only mail) arrives in the owner's mailbox."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.core.mail import send_mail

from jobs.models import Kind
from portal.env import env_email
from telemetry.models import IdlePolicy
from telemetry.services.idle import idle_check
from tests.notifications.helpers import deliver_everything
from tests.sinks import SmtpSink
from tests.telemetry.conftest import people, running_workload  # noqa: F401  (fixture)
from tests.telemetry.test_idle import feed

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")


@pytest.fixture
def smtp() -> Iterator[SmtpSink]:
    sink = SmtpSink(username="portal@example.org", password="s3cret:with@odd/chars").start()
    yield sink
    sink.stop()


def use_email_url(settings, monkeypatch, url: str) -> None:
    """Configure Django's mail exactly as settings.py does at start-up from EMAIL_URL."""
    monkeypatch.setenv("EMAIL_URL", url)
    for key, value in env_email("EMAIL_URL", "console://").items():
        setattr(settings, key, value)


def test_mail_goes_to_the_server_named_by_email_url(settings, monkeypatch, smtp):
    use_email_url(settings, monkeypatch, smtp.url() + "?from=gpus@example.org")
    send_mail("Hello", "Body", None, ["alice@example.org"])
    (message,) = smtp.wait_for(1)
    assert message["From"] == "gpus@example.org"
    assert message["To"] == "alice@example.org"
    assert smtp.envelopes == [("gpus@example.org", ["alice@example.org"])]


def test_the_server_demands_the_credentials_of_the_url(settings, monkeypatch, smtp):
    use_email_url(settings, monkeypatch, f"smtp://127.0.0.1:{smtp.port}")
    with pytest.raises(smtplib.SMTPSenderRefused, match="530"):
        send_mail("Hello", "Body", None, ["alice@example.org"])
    assert smtp.messages == []


@pytest.mark.django_db
def test_idle_warning_reaches_the_owner(settings, monkeypatch, smtp, people):  # noqa: F811
    use_email_url(settings, monkeypatch, smtp.url() + "?from=gpus@example.org")
    IdlePolicy.objects.create(
        team=people.team, threshold_percent=5, warn_after_hours=Decimal(2), stop_after_hours=Decimal(1)
    )
    notebook = running_workload(people, name="notebook", kind=Kind.SERVICE, gpus=1, started_at=T0)
    feed(notebook, T0, T0 + timedelta(hours=3), utilization=1)
    with time_machine.travel(T0 + timedelta(hours=2, minutes=5), tick=False):
        assert idle_check()["warned"] == 1
    deliver_everything()
    (message,) = smtp.wait_for(1)
    assert message["To"] == people.owner.email
    assert "notebook" in message["Subject"]
