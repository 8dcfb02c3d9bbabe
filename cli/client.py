"""A small client for the portal's REST API (v1)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import requests

USER_AGENT = "gpuportal-cli/1"
RETRYABLE = {429, 502, 503, 504}


class ApiError(Exception):
    """The portal answered with an error; `fields` names what was wrong with the request."""

    def __init__(self, status: int, message: str, fields: dict[str, list[str]] | None = None, code: str = ""):
        super().__init__(message)
        self.status = status
        self.message = message
        self.fields = fields or {}
        self.code = code


class Unreachable(Exception):
    """No answer from the portal (connection refused, DNS, timeout)."""


class PortalClient:
    def __init__(self, url: str, token: str, *, timeout: float = 30.0, retries: int = 3) -> None:
        self.base_url = url.rstrip("/")  # the portal's address, as configured (services open under it)
        self.base = f"{self.base_url}/api/v1"
        self.timeout = timeout
        self.retries = retries
        self.token = token  # `gpuportal ssh` hands it on to the ProxyCommand it starts
        self.session = requests.Session()
        self.session.headers.update({"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT})

    # --- transport ------------------------------------------------------------------------------
    def _request(self, method: str, path: str, *, retry: bool = False, **kwargs: Any) -> requests.Response:
        """One call; with retry=True, transient failures are retried (only for idempotent requests)."""
        attempts = self.retries + 1 if retry else 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self.session.request(method, f"{self.base}{path}", timeout=self.timeout, **kwargs)
            except requests.RequestException as exc:
                if last:
                    raise Unreachable(f"cannot reach the portal at {self.base}: {exc.__class__.__name__}") from exc
                time.sleep(min(2**attempt, 10))
                continue
            if response.status_code in RETRYABLE and not last:
                time.sleep(_retry_after(response, attempt))
                continue
            if response.status_code >= 400:
                raise _api_error(response)
            return response
        raise AssertionError("unreachable")

    # --- workloads ------------------------------------------------------------------------------
    def submit(self, spec: dict[str, Any], *, idempotency_key: str | None = None) -> dict:
        # The same key on every retry: a create that timed out but went through is never made twice.
        key = idempotency_key or str(uuid.uuid4())
        return self._request("POST", "/workloads/", retry=True, json=spec, headers={"Idempotency-Key": key}).json()

    def submit_many(self, specs: list[dict[str, Any]], *, team: str | None = None) -> list[dict]:
        """Several workloads in one request, stored all or none (one key for every retry of it)."""
        body: dict[str, Any] = {"workloads": specs}
        if team:
            body["team"] = team
        headers = {"Idempotency-Key": str(uuid.uuid4())}
        return self._request("POST", "/workloads/batch/", retry=True, json=body, headers=headers).json()["workloads"]

    def workloads(self, *, limit: int = 50, **filters: Any) -> Iterator[dict]:
        params: dict[str, Any] = {k: v for k, v in filters.items() if v not in (None, [], "")}
        params["page_size"] = min(max(limit, 1), 200)
        url: str | None = "/workloads/"
        seen = 0
        while url and seen < limit:
            page = self._request("GET", url, retry=True, params=params).json()
            for workload in page["results"]:
                yield workload
                seen += 1
                if seen >= limit:
                    return
            next_url = page.get("next")
            # Follow the cursor, not the host in the link (the portal may sit behind a proxy).
            url = "/workloads/?" + next_url.split("?", 1)[1] if next_url and "?" in next_url else None
            params = {}

    def get(self, path: str, **params: Any) -> Any:
        """A read under /api/v1 (teams, GPU types, usage, a team's queue), as JSON."""
        params = {k: v for k, v in params.items() if v not in (None, "")}
        return self._request("GET", path, retry=True, params=params).json()

    # --- secrets --------------------------------------------------------------------------------
    def store_secret(self, body: dict[str, Any]) -> tuple[dict, int]:
        """Store or replace a secret: (its listing entry, 201 written or 202 still being written)."""
        response = self._request("POST", "/secrets/", json=body)
        return response.json(), response.status_code

    def delete_secret(self, name: str, *, team: str | None = None) -> None:
        self._request("DELETE", f"/secrets/{quote(name, safe='')}/", params={"team": team} if team else {})

    # --- members --------------------------------------------------------------------------------
    def add_member(self, team: str, username: str, role: str) -> dict:
        return self._request(
            "POST", f"/teams/{quote(team, safe='')}/members/", json={"username": username, "role": role}
        ).json()

    def set_member_role(self, team: str, username: str, role: str) -> dict:
        path = f"/teams/{quote(team, safe='')}/members/{quote(username, safe='')}/"
        return self._request("PATCH", path, json={"role": role}).json()

    def remove_member(self, team: str, username: str) -> None:
        self._request("DELETE", f"/teams/{quote(team, safe='')}/members/{quote(username, safe='')}/")

    # --- workloads, one at a time ---------------------------------------------------------------
    def workload(self, uid: str) -> dict:
        return self._request("GET", f"/workloads/{uid}/", retry=True).json()

    def report_checkpoint(self, uid: str, body: dict[str, Any]) -> dict:
        # Retried: a second report of the same checkpoint only refreshes "last checkpoint".
        return self._request("POST", f"/workloads/{uid}/checkpoints/", retry=True, json=body).json()

    def checkpoints(self, uid: str) -> dict:
        return self._request("GET", f"/workloads/{uid}/checkpoints/", retry=True).json()

    def cancel(self, uid: str) -> dict:
        return self._request("POST", f"/workloads/{uid}/cancel/").json()

    def logs(self, uid: str, *, tail: int | None = None, since: int | None = None, rank: int | None = None) -> str:
        params = {k: v for k, v in {"tail": tail, "since": since, "rank": rank}.items() if v is not None}
        return self._request("GET", f"/workloads/{uid}/logs/", retry=True, params=params).text

    def follow_logs(
        self, uid: str, *, tail: int | None = None, since: int | None = None, rank: int | None = None
    ) -> Iterator[str]:
        params: dict[str, Any] = {"follow": "true"}
        if tail is not None:
            params["tail"] = tail
        if since is not None:
            params["since"] = since
        if rank is not None:
            params["rank"] = rank
        try:
            response = self.session.get(
                f"{self.base}/workloads/{uid}/logs/", params=params, stream=True, timeout=(self.timeout, None)
            )
        except requests.RequestException as exc:
            raise Unreachable(f"cannot reach the portal at {self.base}: {exc.__class__.__name__}") from exc
        with response:
            if response.status_code >= 400:
                raise _api_error(response)
            response.encoding = response.encoding or "utf-8"
            yield from response.iter_lines(decode_unicode=True)


def _retry_after(response: requests.Response, attempt: int) -> float:
    header = response.headers.get("Retry-After", "")
    if header.isdigit():
        return min(float(header), 60.0)
    return float(min(2**attempt, 10))


def _api_error(response: requests.Response) -> ApiError:
    try:
        error = response.json()["error"]
        return ApiError(response.status_code, error["message"], error.get("fields") or {}, error.get("code", ""))
    except (ValueError, KeyError, TypeError):
        text = response.text.strip().splitlines()[0][:200] if response.text.strip() else response.reason
        return ApiError(response.status_code, f"HTTP {response.status_code}: {text}")
