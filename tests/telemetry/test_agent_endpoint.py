"""The agents' endpoint is part of the API: mounted inside /api/v1/'s own include (no reordering of the
root includes can shadow it) and answering every error in the API's one format (api/errors.py)."""

from __future__ import annotations

import pytest
from django.urls import URLResolver, get_resolver, resolve
from django.urls.resolvers import RegexPattern

from api import views_agent as views
from portal import urls as root_urls
from tests.telemetry.helpers import REPORTS_URL, make_report, post

pytestmark = pytest.mark.django_db


def _resolver(patterns: list) -> URLResolver:
    return URLResolver(RegexPattern(r"^/"), patterns)


def test_the_agent_endpoint_resolves_to_its_view_inside_the_api_namespace():
    match = resolve(REPORTS_URL)
    assert match.func.view_class is views.AgentReportView
    assert match.view_name == "v1:agent_report"


def test_no_order_of_the_root_includes_shadows_or_breaks_the_agent_endpoint():
    patterns = list(root_urls.urlpatterns)
    orders = [patterns[i:] + patterns[:i] for i in range(len(patterns))] + [patterns[::-1]]
    for order in orders:
        assert _resolver(order).resolve(REPORTS_URL).func.view_class is views.AgentReportView
    # Only the API's include claims /api/v1/: the endpoint is not also mounted at the root.
    claims = [p for p in patterns if str(p.pattern).startswith("api/v1/")]
    assert len(claims) == 1
    assert get_resolver().resolve(REPORTS_URL).route == "api/v1/agent/reports"


def _assert_api_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"status", "code", "message", "fields"}
    assert body["error"]["status"] == status
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body["error"]


def test_a_bad_report_is_a_400_in_the_api_error_format_naming_the_field(client, people, agent_token):
    body = make_report().to_dict()
    body["gpus"][1]["memory_used_bytes"] = "12 GiB"
    error = _assert_api_error(post(client, body, agent_token), 400, "invalid")
    assert list(error["fields"]) == ["gpus[1].memory_used_bytes"]
    assert error["message"].startswith("gpus[1].memory_used_bytes:")


def test_every_refusal_of_the_agent_endpoint_has_the_api_error_format(client, people, agent_token, settings):
    report = make_report()
    missing = post(client, report, None)
    _assert_api_error(missing, 401, "not_authenticated")
    assert missing["WWW-Authenticate"] == 'Bearer realm="gpuportal-agent"'
    _assert_api_error(post(client, report, "gpa_not-a-token"), 401, "authentication_failed")

    wrong_type = client.post(
        REPORTS_URL,
        "node=x",
        content_type="application/x-www-form-urlencoded",
        HTTP_AUTHORIZATION=f"Bearer {agent_token}",
    )
    _assert_api_error(wrong_type, 415, "unsupported_media_type")

    got = client.get(REPORTS_URL, HTTP_AUTHORIZATION=f"Bearer {agent_token}")
    _assert_api_error(got, 405, "method_not_allowed")
    assert got["Allow"] == "POST"

    settings.TELEMETRY_MAX_REPORT_BYTES = 1024
    error = _assert_api_error(post(client, report, agent_token), 413, "too_large")
    assert "1024 bytes" in error["message"]

    unknown = client.post(f"{REPORTS_URL}/extra", "{}", content_type="application/json")
    _assert_api_error(unknown, 404, "not_found")


def test_a_store_failure_is_a_503_in_the_api_error_format(client, people, agent_token, monkeypatch):
    def broken_store(**kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(views, "report_ingest", broken_store)
    _assert_api_error(post(client, make_report(), agent_token), 503, "unavailable")
