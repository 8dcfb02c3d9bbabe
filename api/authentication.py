from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from api.tokens import token_authenticate
from jobs.services.checkpoints.tokens import looks_like_workload_token


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer gpp_...` (the word `Token` works too)."""

    keywords = ("bearer", "token")

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].decode("latin-1").lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Give the token after the word Bearer, with no spaces in it.")
        try:
            raw = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        if looks_like_workload_token(raw):
            # A workload's checkpoint token reports that workload's checkpoints and does nothing else.
            raise exceptions.PermissionDenied("A workload token may only report its own workload's checkpoints.")
        token = token_authenticate(raw)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return token.user, token

    def authenticate_header(self, request) -> str:
        # Makes DRF answer 401 (not 403) to unauthenticated requests, with a hint how to authenticate.
        return 'Bearer realm="api"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token from your profile page (Authorization: Bearer gpp_...).",
        }
