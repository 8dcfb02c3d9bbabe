"""Sign-in through the institution's OpenID Connect provider, and teams from its claims.

The flow (authorization code with PKCE, discovery from the issuer URL, ID-token checks of signature,
issuer, audience, expiry and nonce) is Authlib's; this app decides who the person is in the portal
(`services.signin_complete`) and which teams they are in (`teams.memberships_sync`).
"""
