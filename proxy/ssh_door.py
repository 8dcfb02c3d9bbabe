"""Who may open an SSH tunnel into a service: the proxy's synchronous half for `/w/_ssh/<uid>`.

The tunnel is for programs (ssh's ProxyCommand, VS Code, scp, rsync), so it is opened with the person's API
token (`Authorization: Bearer gpp_…`), never a browser cookie: no web page can open it on someone's behalf.
The rule is the same as Open's (jobs.policy.may_open, through proxy.access): the owner, or teammates when the
owner shares the service; anyone else, and any bad, expired or revoked token, gets 404 (nothing tells an
outsider that the service exists). An open tunnel asks again every SSH_RECHECK_SECONDS, so a revoked token,
an un-share or a removal from the team cuts it within that time.
"""

from __future__ import annotations

import re

from django.db import close_old_connections

from api.tokens import token_authenticate
from proxy.access import Door, Outcome, decide

SSH_PATH = re.compile(r"^/w/_ssh/(?P<uid>[0-9a-f]{1,16})/?$")


def bearer(headers: list[tuple[bytes, bytes]]) -> str:
    """The token in an `Authorization: Bearer …` (or `Token …`) header; "" when there is none."""
    for name, value in headers:
        if name == b"authorization":
            parts = value.decode("latin-1").split()
            if len(parts) == 2 and parts[0].lower() in ("bearer", "token"):
                return parts[1]
    return ""


def ssh_door(raw_token: str, uid: str) -> Door:
    """The door for this token and service: OPEN, STARTING, ENDED, or NOT_FOUND (bad token included)."""
    close_old_connections()  # the proxy is long-lived; Django's request signals never run here
    token = token_authenticate(raw_token) if raw_token else None
    if token is None:
        return Door(Outcome.NOT_FOUND)
    return decide(token.user, uid)
