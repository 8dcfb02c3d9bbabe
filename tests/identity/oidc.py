"""The test OIDC provider (tests/identity/provider.mjs, npm `oidc-provider`) as a process, and a way to
sign in through it without a browser (its development sign-in forms, posted with requests)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import requests

from tests.sinks import free_port

REPO = Path(__file__).resolve().parents[2]
CLIENT_ID = "gpuportal-test"
CLIENT_SECRET = "test-client-secret-0123456789abcdef"


class OidcProvider:
    def __init__(self, directory: Path, *, redirect_uris: list[str], post_logout_redirect_uris: list[str]) -> None:
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.users_file = directory / "users.json"
        self.users_file.write_text("{}")
        self.config_file = directory / "provider.json"
        self.config_file.write_text(
            json.dumps(
                {
                    "port": self.port,
                    "issuer": self.issuer,
                    "usersFile": str(self.users_file),
                    "client": {
                        "client_id": CLIENT_ID,
                        "client_secret": CLIENT_SECRET,
                        "redirect_uris": redirect_uris,
                        "post_logout_redirect_uris": post_logout_redirect_uris,
                        "grant_types": ["authorization_code"],
                        "response_types": ["code"],
                    },
                }
            )
        )
        self.log = directory / "provider.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> OidcProvider:
        log = open(self.log, "ab")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(
            ["node", str(REPO / "tests/identity/provider.mjs"), str(self.config_file)],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(self.issuer + "/.well-known/openid-configuration", timeout=1).ok:
                    return self
            except requests.RequestException:
                time.sleep(0.2)
        raise RuntimeError(f"the OIDC provider did not start:\n{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def set_user(self, login: str, **claims: Any) -> None:
        users = json.loads(self.users_file.read_text())
        users[login] = claims
        self.users_file.write_text(json.dumps(users))


def sign_in_without_browser(session: requests.Session, start_url: str, login: str) -> requests.Response:
    """Follow the sign-in from the portal's button through the provider's login and consent forms, back to
    the portal's callback; returns the portal's last answer."""
    response = session.get(start_url, timeout=10)
    for _ in range(6):
        form = re.search(r'<form[^>]*action="([^"]+)"[^>]*method="post"', response.text)
        if not form or response.url.startswith(start_url.split("/sso/")[0]):
            return response
        fields = dict(re.findall(r'<input[^>]*type="hidden"[^>]*name="([^"]+)"[^>]*value="([^"]*)"', response.text))
        if 'name="login"' in response.text:
            fields["login"] = login
            fields["password"] = "any"
        response = session.post(urljoin(response.url, form.group(1)), data=fields, timeout=10)
    return response
