"""The schema and the docs are served by the portal itself, with no outside network."""

from __future__ import annotations

import re


def test_schema_is_openapi_3_and_lists_every_endpoint(client, db):
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert set(schema["paths"]) >= {
        "/api/v1/workloads/", "/api/v1/workloads/{uid}/", "/api/v1/workloads/{uid}/cancel/",
        "/api/v1/workloads/{uid}/logs/", "/api/v1/workloads/{uid}/events/", "/api/v1/gpu-types/",
        "/api/v1/teams/", "/api/v1/teams/{slug}/quotas/", "/api/v1/teams/{slug}/queue/", "/api/v1/usage/",
        "/api/v1/images/",
    }  # fmt: skip
    create = schema["paths"]["/api/v1/workloads/"]["post"]
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in create["parameters"])
    assert "422" in create["responses"]
    logs = schema["paths"]["/api/v1/workloads/{uid}/logs/"]["get"]["responses"]
    assert list(logs["200"]["content"]) == ["text/plain"]
    assert list(logs["503"]["content"]) == ["application/json"]
    assert schema["components"]["schemas"]["WorkloadCreateRequest"]["additionalProperties"] is False
    assert "Retry-After" in create["responses"]["429"]["headers"]


def test_docs_load_their_assets_from_the_portal(client, db):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets
    assert all(not a.startswith(("http://", "https://", "//")) for a in assets), assets
    assert any("swagger-ui" in a for a in assets)
