from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from identity.services import provider
from tests.identity.oidc import CLIENT_ID, CLIENT_SECRET, OidcProvider


@pytest.fixture(scope="session")
def oidc_provider(live_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    """A real OIDC provider process whose client redirects back to the live portal."""
    running = OidcProvider(
        tmp_path_factory.mktemp("oidc"),
        redirect_uris=[f"{live_server.url}/sso/callback/"],
        post_logout_redirect_uris=[f"{live_server.url}/login/"],
    ).start()
    yield running
    running.stop()


@pytest.fixture
def sso(settings, oidc_provider: OidcProvider) -> Iterator[OidcProvider]:
    """The portal configured for the test provider (as OIDC_* in the environment would)."""
    settings.OIDC_ISSUER = oidc_provider.issuer
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_PROVIDER_NAME = "Test University"
    settings.OIDC_SCOPES = ["openid", "email", "profile"]
    settings.SESSION_COOKIE_SECURE = False  # the live server speaks plain HTTP
    settings.CSRF_COOKIE_SECURE = False
    provider.cache_clear()
    yield oidc_provider
    provider.cache_clear()
