"""A provider that answers the token request with an ID token the test chose (signed with the wrong key,
for another audience, with an old expiry...), to prove the portal refuses each. Discovery and keys are
real HTTP; the tokens are real JWTs (joserfc)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey


class RogueProvider:
    def __init__(self) -> None:
        self.key = RSAKey.generate_key(2048, parameters={"kid": "k1"})
        self.other_key = RSAKey.generate_key(2048, parameters={"kid": "k1"})  # same kid, not published
        self.claims: dict[str, Any] = {}
        self.sign_with_other_key = False
        rogue = self

        class Handler(BaseHTTPRequestHandler):
            def _json(self, body: dict) -> None:
                raw = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    self._json(
                        {
                            "issuer": rogue.issuer,
                            "authorization_endpoint": rogue.issuer + "/auth",
                            "token_endpoint": rogue.issuer + "/token",
                            "jwks_uri": rogue.issuer + "/jwks",
                            "response_types_supported": ["code"],
                            "id_token_signing_alg_values_supported": ["RS256"],
                        }
                    )
                elif self.path == "/jwks":
                    self._json(KeySet([rogue.key]).as_dict(private=False))
                else:
                    self.send_error(404)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                key = rogue.other_key if rogue.sign_with_other_key else rogue.key
                id_token = jwt.encode({"alg": "RS256", "kid": "k1"}, rogue.claims, key)
                self._json({"access_token": "at", "token_type": "Bearer", "expires_in": 300, "id_token": id_token})

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def good_claims(self, *, client_id: str, nonce: str, sub: str = "eve") -> dict[str, Any]:
        now = int(time.time())
        return {"iss": self.issuer, "aud": client_id, "sub": sub, "nonce": nonce, "iat": now, "exp": now + 300,
                "email": f"{sub}@uni.example", "email_verified": True, "preferred_username": sub}  # fmt: skip

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
