"""Webhook addresses that read one way and send another (issue 33.1): the address judged is the address
the POST goes to. Real listeners on loopback stand for an allowed receiver (127.0.0.2, the only network
the settings allow here) and for an internal service the portal must never reach (127.0.0.1)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from jobs.models import State
from jobs.services.transitions import transition
from notifications.models import Delivery, Preference, TeamWebhook
from notifications.preferences import preference_update
from notifications.webhooks import WebhookUrlError, check_webhook_url, webhook_target
from tests.notifications.helpers import deliver_everything
from tests.notifications.test_outbox import workload
from tests.sinks import WebhookReceiver

pytestmark = pytest.mark.django_db


@pytest.fixture
def allowed(settings) -> Iterator[WebhookReceiver]:
    """A receiver on 127.0.0.2, the one network webhooks may reach here."""
    settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.2/32"]
    settings.NOTIFY_WEBHOOK_TIMEOUT_SECONDS = 1
    hook = WebhookReceiver(host="127.0.0.2").start()
    yield hook
    hook.stop()


@pytest.fixture
def internal() -> Iterator[WebhookReceiver]:
    """An internal service on 127.0.0.1 (not allowed): nothing may ever reach it."""
    hook = WebhookReceiver().start()
    yield hook
    hook.stop()


def test_a_backslash_user_part_is_refused_on_save_and_never_reaches_the_internal_port(lab, allowed, internal):
    sneaky = f"http://127.0.0.1:{internal.port}\\@127.0.0.2:{allowed.port}/hook"
    with pytest.raises(ValidationError) as refused:
        preference_update(user=lab.owner, topics=["problems"], email=False, webhook_url=sneaky, webhook_format="json")
    assert "backslash" in str(refused.value.message_dict["webhook_url"])
    # Stored before this rule existed: the send refuses it too, and the internal port hears nothing.
    Preference.objects.create(user=lab.owner, topics=["problems"], email=False, webhook_url=sneaky)
    TeamWebhook.objects.create(team=lab.team, url=sneaky)
    transition_failed(lab)
    deliver_everything()
    assert internal.deliveries == []
    assert allowed.deliveries == []
    failed = Delivery.objects.filter(channel=Delivery.Channel.WEBHOOK)
    assert {(d.status, d.last_error) for d in failed} == {
        ("failed", "The webhook address may not contain a backslash.")
    }


@pytest.mark.parametrize(
    "shape",
    [
        "http://127.0.0.1:{internal}@127.0.0.2:{allowed}/hook",  # user:password, read by urlsplit as the host
        "http://x@127.0.0.2:{allowed}/hook",
        "http://127.0.0.2:{allowed}/hook\\@127.0.0.1:{internal}/",
        "http://127.0.0.2:{allowed}/hook\t",
        "http://127.0.0.2:{allowed}/ hook",
    ],
)
def test_user_info_and_odd_characters_are_refused(allowed, internal, shape):
    with pytest.raises(WebhookUrlError):
        webhook_target(shape.format(internal=internal.port, allowed=allowed.port))


def test_the_target_is_what_the_url_names_and_a_fragment_is_never_sent(allowed, internal):
    target = webhook_target(f"http://127.0.0.2:{allowed.port}/a?b=1#@127.0.0.1:{internal.port}/")
    assert (target.address, target.port, target.path) == ("127.0.0.2", allowed.port, "/a?b=1")


def test_the_post_goes_to_the_address_that_was_checked_even_if_the_name_changes(lab, allowed, monkeypatch):
    """DNS rebinding: the name answers 127.0.0.2 (allowed) when checked and 127.0.0.1 after; the request
    still goes to 127.0.0.2 (the lookup is done once, and the connection pinned to its answer)."""
    internal = WebhookReceiver(bind_port=allowed.port)  # the same port on the forbidden address
    internal.start()
    answers = iter(["127.0.0.2"])
    real = socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        if host == "hooks.rebind.test":
            address = next(answers, "127.0.0.1")
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    try:
        TeamWebhook.objects.create(team=lab.team, url=f"http://hooks.rebind.test:{allowed.port}/team")
        transition_failed(lab)
        deliver_everything()
        assert internal.deliveries == []
        (hook,) = allowed.wait_for(1)
        assert hook.headers["Host"] == f"hooks.rebind.test:{allowed.port}"  # the name, not the address
        assert Delivery.objects.get(channel=Delivery.Channel.WEBHOOK).status == Delivery.Status.SENT
    finally:
        internal.stop()


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://[::ffff:169.254.169.254]/"]
)
def test_metadata_addresses_are_refused_even_when_an_admin_allows_their_network(settings, url):
    settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS = ["169.254.0.0/16", "fd00::/8", "::ffff:0:0/96"]
    with pytest.raises(WebhookUrlError, match="metadata"):
        check_webhook_url(url)


def test_the_api_server_is_refused_even_on_an_allowed_network(settings, monkeypatch, internal):
    settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(internal.port))
    with pytest.raises(WebhookUrlError, match="API server"):
        check_webhook_url(f"http://127.0.0.1:{internal.port}/api/v1/namespaces")
    check_webhook_url(f"http://127.0.0.1:{internal.port + 1 if internal.port < 65535 else 1}/hook")  # other ports


def transition_failed(lab) -> None:
    assert transition(workload(lab), State.FAILED, reason="Error", finished_at=timezone.now())
