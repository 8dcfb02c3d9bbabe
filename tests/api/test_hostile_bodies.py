"""Findings of the hostile-input catalogue (benchmarks/bench_security.py), each now a 4xx, never a 500."""

from __future__ import annotations

import json

import pytest

from tests.telemetry.helpers import make_report, post

pytestmark = pytest.mark.django_db


def test_json_nested_deeper_than_the_parser_follows_is_a_400(world):
    body = '{"env": ' + "[" * 5000 + "]" * 5000 + "}"
    response = world.client("owner").post("/api/v1/workloads/", body, content_type="application/json")
    assert response.status_code == 400


def test_a_workload_id_with_a_nul_byte_is_a_404(client, world):
    client.force_login(world.owner)
    assert client.get("/workloads/%00/").status_code == 404


@pytest.mark.parametrize("username", ["x" * 10_000, "a\x00b"])
def test_a_sign_in_with_an_absurd_username_is_a_failed_sign_in(client, world, username):
    response = client.post("/login/", {"username": username, "password": "nope"})
    assert response.status_code == 200
    assert "didn't match" in response.content.decode()


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.update(agent_version="a\x00b"), "agent_version"),
        (lambda r: r.update(agent_version="\ud800"), "agent_version"),
        (lambda r: r["gpus"][0].update(memory_used_bytes=2**63), "gpus[0].memory_used_bytes"),
        (lambda r: r["gpus"][0].update(index=2**40), "gpus[0].index"),
    ],
)
def test_an_agent_report_the_database_could_not_store_is_a_400(client, world, mutate, field):
    from telemetry.services.tokens import agent_token_issue

    _row, token = agent_token_issue(name="t", node="gpu-p100-1")
    body = make_report().to_dict()
    mutate(body)
    response = post(client, json.dumps(body), token)
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == [field]
