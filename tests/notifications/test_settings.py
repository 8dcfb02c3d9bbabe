"""Choosing what one hears about: the settings page, the API, the team webhook (managers only), and the
webhook address rules (http(s), not the portal, no internal address unless allowed)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from api.tokens import token_create
from identity.models import Role
from notifications.models import Preference, TeamWebhook
from notifications.webhooks import WebhookUrlError, check_webhook_url
from tests.engine.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

API = "/api/v1/me/notifications/"


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("ftp://hooks.example.org/x", "Only http:// and https://"),
        ("file:///etc/passwd", "Only http:// and https://"),
        ("http://127.0.0.1:8000/hook", "the portal itself"),  # SITE_URL
        ("http://127.0.0.1:9000/hook", "private or internal address"),
        ("http://localhost/hook", "private or internal address"),
        ("http://10.1.2.3/hook", "private or internal address"),
        ("http://169.254.169.254/latest/meta-data/", "metadata address"),  # cloud metadata: always refused
        ("http://[::1]/hook", "private or internal address"),
        ("http://[fe80::1]/hook", "private or internal address"),
        ("http://no-such-host.invalid/hook", "cannot be resolved"),
    ],
)
def test_webhook_addresses_the_portal_refuses(url, complaint):
    with pytest.raises(WebhookUrlError, match=complaint):
        check_webhook_url(url)


@pytest.mark.parametrize("url", ["http://localhost:8000/admin/", "http://[::ffff:127.0.0.1]:8000/x"])
def test_the_portal_under_another_name_is_the_portal_itself(settings, url):
    """Where loopback is allowed (`make run`), another name of SITE_URL's host and port is still refused."""
    settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8", "::1/128", "::ffff:127.0.0.0/104"]
    settings.SITE_URL = "http://127.0.0.1:8000"
    with pytest.raises(WebhookUrlError, match="the portal itself"):
        check_webhook_url(url)
    check_webhook_url("http://localhost:9000/hook")  # another program on this machine: allowed here


def test_an_allowed_network_opens_loopback_but_not_the_metadata_address(settings):
    settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    check_webhook_url("http://127.0.0.1:9000/hook")
    with pytest.raises(WebhookUrlError):
        check_webhook_url("http://169.254.169.254/")
    check_webhook_url("https://93.184.215.14/hook")  # a public address needs no allowance


def test_the_settings_page_asks_a_visitor_to_sign_in_first(client):
    page = client.get(reverse("notification_settings"))
    assert page.status_code == 302
    assert page["Location"].startswith(reverse("login"))
    posted = client.post(reverse("notification_settings"), {"form": "me", "me-topics": ["problems"]})
    assert posted.status_code == 302
    assert not Preference.objects.exists()


def test_the_settings_page_saves_choices_and_refuses_a_bad_webhook_naming_the_field(client, django_user_model):
    alice = django_user_model.objects.create_user("alice", "alice@example.org", "pw")
    client.force_login(alice)
    page = client.get(reverse("notification_settings"))
    assert page.status_code == 200
    assert "Tell me when" in page.content.decode()

    bad = client.post(
        reverse("notification_settings"),
        {"form": "me", "me-topics": ["problems"], "me-email": "on", "me-webhook_url": "http://10.0.0.5/x",
         "me-webhook_format": "slack"},
    )  # fmt: skip
    assert bad.status_code == 400
    assert "private or internal address" in bad.content.decode()
    assert not Preference.objects.exists()

    good = client.post(
        reverse("notification_settings"),
        {"form": "me", "me-topics": ["problems", "warnings"], "me-webhook_url": "", "me-webhook_format": "json"},
    )
    assert good.status_code == 302
    preference = Preference.objects.get(user=alice)
    assert (preference.topics, preference.email) == (["problems", "warnings"], False)


def test_only_managers_set_the_team_webhook(client, settings):
    settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    team = TeamFactory(slug="lab", name="Lab")
    member = MembershipFactory(team=team, user=UserFactory(username="mia")).user
    manager = MembershipFactory(team=team, user=UserFactory(username="max"), role=Role.MANAGER).user
    form = {"form": "team", "team-url": "http://127.0.0.1:9999/team", "team-format": "mattermost",
            "team-topics": ["problems"], "team-enabled": "on"}  # fmt: skip

    client.force_login(member)
    assert "Team webhook" not in client.get(reverse("notification_settings")).content.decode()
    client.post(reverse("notification_settings"), form)
    assert not TeamWebhook.objects.exists()

    client.force_login(manager)
    assert "Team webhook of Lab" in client.get(reverse("notification_settings")).content.decode()
    assert client.post(reverse("notification_settings"), form).status_code == 302
    hook = TeamWebhook.objects.get(team=team)
    assert (hook.format, hook.topics, hook.updated_by) == ("mattermost", ["problems"], manager)


def test_preferences_over_the_api_with_a_token(client, django_user_model):
    bob = django_user_model.objects.create_user("bob", "bob@example.org", "pw")
    issued = token_create(user=bob, name="script")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {issued.raw}"}
    defaults = client.get(API, **auth).json()
    assert defaults == {"topics": ["finished", "problems", "started", "warnings"], "email": True,
                        "webhook_url": "", "webhook_format": "json"}  # fmt: skip

    changed = client.patch(API, {"topics": ["problems"]}, content_type="application/json", **auth)
    assert changed.status_code == 200
    assert changed.json()["topics"] == ["problems"]

    for body, field in [
        ({"webhook_url": "gopher://x.example.org"}, "webhook_url"),
        ({"webhook_url": "http://192.168.1.1/x"}, "webhook_url"),
        ({"topics": ["everything"]}, "topics"),
        ({"webhook_format": "teams"}, "webhook_format"),
    ]:
        refused = client.patch(API, body, content_type="application/json", **auth)
        assert refused.status_code == 400, body
        assert any(name.startswith(field) for name in refused.json()["error"]["fields"]), refused.json()
    assert Preference.objects.get(user=bob).topics == ["problems"]
    assert client.get(API).status_code in (401, 403)  # no credentials


def test_a_misspelt_preference_is_refused_naming_it_and_changes_nothing(client, django_user_model):
    """A script that sends {"emial": false} must hear of the typo, not be told 200 with e-mail still on."""
    bob = django_user_model.objects.create_user("bob", "bob@example.org", "pw")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token_create(user=bob, name='script').raw}"}
    before = client.get(API, **auth).json()
    for method in (client.patch, client.put):
        body = {**before, "topics": ["problems"], "emial": False}
        refused = method(API, body, content_type="application/json", **auth)
        assert refused.status_code == 400, refused.content
        assert refused.json()["error"]["fields"] == {"emial": ["Unknown field."]}
    assert client.get(API, **auth).json() == before
