"""Bad input of every kind gets a clear 4xx in the one error format, and stores nothing."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from api.models import ApiToken
from api.tokens import token_revoke
from jobs.models import Workload

URL = "/api/v1/workloads/"


def _error(response, status: int) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert error["status"] == status
    assert error["message"]
    return error


def test_malformed_json(world):
    response = world.client("owner").post(URL, data='{"gpu_type": "p100",', content_type="application/json")
    assert _error(response, 400)["code"] == "parse_error"


def test_json_that_is_not_an_object(world):
    response = world.client("owner").post(URL, data="[1, 2]", content_type="application/json")
    assert "JSON object" in _error(response, 400)["message"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gpu_count", "two"),
        ("gpu_count", True),
        ("gpu_count", 1.5),
        ("name", 7),
        ("command", "python train.py"),
        ("command", ["python", 3]),
        ("env", {"A": "1"}),
        ("env", [{"name": "A"}]),
        ("port", "8888"),
        ("catalog_image", "pytorch"),
        ("team", ["vision"]),
    ],
)
def test_wrong_types_name_the_field(world, field, value):
    body = {"image": "docker.io/x:1", "gpu_type": "p100", field: value}
    error = _error(world.client("owner").post(URL, body, format="json"), 400)
    assert field in error["fields"]
    assert Workload.objects.count() == 0


def test_unknown_fields_are_refused(world):
    body = {"image": "docker.io/x:1", "gpu_type": "p100", "gpus": 2, "privileged": True}
    error = _error(world.client("owner").post(URL, body, format="json"), 400)
    assert error["fields"] == {"gpus": ["Unknown field."], "privileged": ["Unknown field."]}


def test_nul_characters_and_lone_surrogates(world):
    client = world.client("owner")
    body = {"image": "docker.io/x:1", "gpu_type": "p100", "env": [{"name": "A", "value": "x\u0000y"}]}
    refused = client.post(URL, body, format="json")
    _error(refused, 400)
    assert list(refused.json()["error"]["fields"]) == ["env"]  # issue 33.7: the field is named
    raw = '{"image": "docker.io/x:1", "gpu_type": "p100", "args": ["\\ud800"]}'
    refused = client.post(URL, data=raw, content_type="application/json")
    _error(refused, 400)
    assert list(refused.json()["error"]["fields"]) == ["args"]
    batch = {"workloads": [{"image": "docker.io/x:1", "gpu_type": "p100"}, {"image": "docker.io/x:1",
             "gpu_type": "p100", "env": {"A": "x\u0000y"}}]}  # fmt: skip
    refused = client.post(URL + "batch/", batch, format="json")
    _error(refused, 400)
    assert list(refused.json()["error"]["fields"]) == ["workloads[1].env"]
    _error(client.get(URL + "?owner=a%00b"), 400)
    _error(client.get("/api/v1/gpu-types/?team=vi%00sion"), 400)


def test_huge_body(world):
    body = json.dumps({"image": "docker.io/x:1", "gpu_type": "p100", "args": ["x" * (2 * 1024 * 1024)]})
    error = _error(world.client("owner").post(URL, data=body, content_type="application/json"), 413)
    assert error["code"] == "too_large"


def test_form_encoded_body_is_unsupported(world):
    response = world.client("owner").post(URL, {"gpu_type": "p100"})
    assert _error(response, 415)["code"] == "unsupported_media_type"


@pytest.mark.parametrize(
    "header",
    [
        "Bearer gpp_not-a-real-token",
        "Bearer nonsense",
        "Bearer",
        "Bearer two parts",
        "Token ",
        "Bearer \u00e9t\u00e9",
    ],
)
def test_bad_tokens_are_401(world, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header.encode("utf-8").decode("latin-1"))
    error = _error(client.get(URL), 401)
    assert error["code"] in ("authentication_failed", "not_authenticated")


def test_revoked_and_expired_tokens_stop_working(world):
    token = ApiToken.objects.get(user=world.owner)
    client = world.client("owner")
    assert client.get(URL).status_code == 200
    token_revoke(token=token, by=world.admin)
    assert "revoked" in _error(client.get(URL), 401)["message"]
    teammate = ApiToken.objects.get(user=world.teammate)
    ApiToken.objects.filter(id=teammate.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    _error(world.client("teammate").get(URL), 401)


def test_tokens_are_stored_hashed_and_record_use(world):
    token = ApiToken.objects.get(user=world.owner)
    raw = world.tokens["owner"]
    assert raw not in (token.digest, token.prefix)
    assert raw.startswith(token.prefix)
    assert token.last_used_at is None
    world.client("owner").get(URL)
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_method_not_allowed(world, submit):
    uid = submit()["uid"]
    _error(world.client("owner").delete(f"{URL}{uid}/"), 405)


def test_throttled_per_token_with_retry_after(world):
    rates = {"token": "3/min"}
    from django.conf import settings

    with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}):
        owner = world.client("owner")
        codes = [owner.get(URL).status_code for _ in range(3)]
        refused = owner.get(URL)
        # Another token has its own allowance.
        other = world.client("teammate").get(URL)
    assert codes == [200, 200, 200]
    error = _error(refused, 429)
    assert error["code"] == "throttled"
    assert 0 < int(refused["Retry-After"]) <= 60
    assert other.status_code == 200


def test_unknown_api_paths_answer_in_the_error_format(world):
    for path in ("/api/v1/nothing-here/", "/api/v1/workloads/%0Abad/events/", "/api/v1/workloads/UPPER/"):
        error = _error(world.client("owner").get(path), 404)
        assert error["code"] == "not_found"


def test_a_team_slug_with_a_nul_character_is_a_400_naming_team(world):
    """PostgreSQL cannot compare text holding a NUL: the lookup of such a `team` was a 500."""
    from jobs.models import TeamSecret

    client = world.client("manager")
    stored = client.post("/api/v1/secrets/", {"name": "hf-token", "value": "x", "team": "vis\x00ion"}, format="json")
    assert stored.status_code == 400, stored.content
    assert list(stored.json()["error"]["fields"]) == ["team"]
    assert not TeamSecret.objects.exists()


def test_a_query_parameter_with_a_nul_character_is_a_400_naming_it_on_pages_admin_and_api(world, client):
    """PostgreSQL cannot compare text holding a NUL: Django admin's list filter and autocomplete passed
    one straight to a query (a 500). Every such parameter is refused before any view runs."""
    client.force_login(world.admin)
    for url in (
        "/admin/jobs/workload/?state__exact=RUN%00",
        "/admin/autocomplete/?term=vis%00&app_label=telemetry&model_name=idlepolicy&field_name=team",
    ):
        refused = client.get(url)
        assert refused.status_code == 400, (url, refused.status_code)
    api = world.client("manager").get("/api/v1/workloads/?owner=tom%00")
    assert api.status_code == 400
    assert api.json()["error"]["fields"] == {"owner": ["May not contain NUL characters."]}
    assert world.client("manager").get("/api/v1/workloads/?owner=tom").status_code == 200


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "hf-token", "value": "abc\ud800"}, "value"),  # sealing encodes it as UTF-8: was a 500
        ({"name": "hf-token", "value": "x", "team": "vision\ud800"}, "team"),  # PostgreSQL cannot compare it
    ],
)
def test_a_secret_with_a_lone_surrogate_is_a_400_naming_the_field(world, body, field):
    from jobs.models import TeamSecret

    raw = json.dumps(body)  # "\\ud800" on the wire, a lone surrogate once parsed
    stored = world.client("manager").generic("POST", "/api/v1/secrets/", raw, content_type="application/json")
    assert stored.status_code == 400, stored.content
    assert list(stored.json()["error"]["fields"]) == [field]
    assert not TeamSecret.objects.exists()


@pytest.mark.parametrize(
    ("path", "typo"),
    [
        ("/api/v1/workloads/?status=RUNNING", "status"),
        ("/api/v1/workloads/?gpu-type=p100", "gpu-type"),
        ("/api/v1/workloads/?user=tom&state=QUEUED", "user"),
        ("/api/v1/usage/?groupby=user", "groupby"),
        ("/api/v1/usage/?from=2026-01-01", "from"),
    ],
)
def test_a_query_parameter_the_endpoint_does_not_take_is_a_400_naming_it(world, submit, path, typo):
    """`?status=RUNNING` (for `state`) was ignored: the list came back whole, every state in it, and a script
    that cancels what it believes is running cancelled everything. Unknown parameters are refused, naming
    the parameter and what the endpoint does take."""
    submit()
    response = world.client("owner").get(path)
    assert response.status_code == 400, response.content
    message = response.json()["error"]["fields"][typo][0]
    assert message.startswith("Not a parameter of this endpoint; it takes: ")
    assert ("state" in message) if "workloads" in path else ("group_by" in message)


def test_the_list_still_takes_every_parameter_it_documents_and_its_own_next_links(world, submit):
    for _ in range(3):
        submit()
    client = world.client("owner")
    query = "state=QUEUED&kind=batch&gpu_type=p100&owner=olivia&team=vision&created_after=2020-01-01T00:00:00Z"
    first = client.get(f"/api/v1/workloads/?{query}&created_before=2100-01-01T00:00:00Z&page_size=2&format=json")
    assert first.status_code == 200, first.content
    assert len(first.json()["results"]) == 2
    second = client.get(first.json()["next"])
    assert second.status_code == 200, second.content
    assert len(second.json()["results"]) == 1


def test_an_owner_filter_that_names_no_one_in_your_teams_is_a_400_naming_owner(world, submit):
    """`?owner=olvia` (a typo) answered an empty list, read as "she has nothing running", as `team` and
    `gpu_type` did before they were checked. Someone of another team gets the same answer as no one, so the
    filter tells nobody who exists elsewhere."""
    submit()
    client = world.client("teammate")
    assert [w["owner"] for w in client.get(f"{URL}?owner=olivia").json()["results"]] == ["olivia"]
    assert client.get(f"{URL}?owner=maria").json()["results"] == []  # a teammate with nothing: empty, fine
    typo = _error(client.get(f"{URL}?owner=olvia"), 400)
    elsewhere = _error(client.get(f"{URL}?owner=oscar"), 400)
    assert typo["fields"]["owner"] == ["No one in your teams has the username 'olvia'."]
    assert elsewhere["fields"]["owner"] == ["No one in your teams has the username 'oscar'."]


def test_a_state_filter_it_does_not_know_names_the_states_it_does(world):
    """`?state=running` or `?state=DONE` said "not one of the available choices" without saying which are:
    the states, in the order a workload goes through them, are named; any case is taken."""
    client = world.client("owner")
    error = _error(client.get(f"{URL}?state=DONE"), 400)
    assert error["fields"]["state"] == [
        "'DONE' is not a state; one of: QUEUED, SUBMITTING, PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, PREEMPTED."
    ]
    assert client.get(f"{URL}?state=running&state=Queued").status_code == 200
