"""Webhooks: which URLs may receive them, and what they are sent (JSON, Slack, Mattermost).

A webhook URL is checked when it is saved and again before every send (a name may resolve elsewhere
later): http(s) only, never the portal itself, and never a private, loopback, link-local or otherwise
non-public address unless NOTIFY_WEBHOOK_ALLOWED_NETWORKS lists its network (a site's own chat server on
an internal network; tests and `make run` list 127.0.0.0/8). This keeps a user's webhook from becoming a
way to reach the cluster's internal services or the cloud's metadata address.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from notifications.models import WebhookFormat


class WebhookUrlError(ValueError):
    """A webhook URL the portal will not call; the message says why, for the person who entered it."""


def check_webhook_url(url: str) -> None:
    """Raise WebhookUrlError unless the portal may POST to `url`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise WebhookUrlError("Only http:// and https:// webhook addresses are allowed.")
    host = (parts.hostname or "").lower()
    if not host:
        raise WebhookUrlError("The webhook address names no host.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise WebhookUrlError("The webhook address has an invalid port.") from exc
    if _is_portal(host, port):
        raise WebhookUrlError("A webhook cannot point at the portal itself.")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:  # gaierror, an IDNA error, an embedded NUL
        raise WebhookUrlError(f"The host {host} cannot be resolved.") from exc
    allowed = [ipaddress.ip_network(net, strict=False) for net in settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS]
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%", 1)[0])
        if any(address in net for net in allowed):
            continue
        if not address.is_global or address.is_multicast:
            raise WebhookUrlError(
                f"The host {host} resolves to {address}, a private or internal address; webhooks may only "
                "go to public addresses (an administrator can allow internal networks)."
            )


def _is_portal(host: str, port: int) -> bool:
    """The portal's public address (SITE_URL), or any port of a name it serves (ALLOWED_HOSTS). Loopback
    and IP literals among ALLOWED_HOSTS count only with SITE_URL's port: other local ports are other
    programs (and private addresses are refused anyway unless allowed)."""
    site = urlsplit(settings.SITE_URL)
    site_port = site.port or (443 if site.scheme == "https" else 80)
    if site.hostname and host == site.hostname.lower() and port == site_port:
        return True
    for allowed in settings.ALLOWED_HOSTS:
        name = allowed.lower().strip("[]")
        if not name or name == "*" or name == "localhost" or _is_ip(name):
            continue
        if host == name.lstrip(".") or (name.startswith(".") and host.endswith(name)):
            return True
    return False


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def webhook_body(
    fmt: str, *, event_kind: str, summary: str, details: dict[str, Any], delivery_id: str
) -> dict[str, Any]:
    """The JSON body for a receiver of format `fmt`. The same on every attempt of one delivery."""
    link = details.get("url", "")
    if fmt == WebhookFormat.SLACK:
        text = f"{summary} <{link}|Open in GPU Portal>" if link else summary
        return {
            "text": text,
            "blocks": [
                {"type": "section", "text": {"type": "mrkdwn", "text": text}},
                {"type": "context", "elements": [{"type": "mrkdwn", "text": _facts_line(details)}]},
            ],
        }
    if fmt == WebhookFormat.MATTERMOST:
        return {
            "text": f"{summary} [Open in GPU Portal]({link})" if link else summary,
            "username": "GPU Portal",
            "props": {"card": _facts_line(details)},
        }
    return {"id": delivery_id, "event": event_kind, "text": summary, "workload": details}


def _facts_line(details: dict[str, Any]) -> str:
    return (
        f"team {details.get('team', '')} · {details.get('state', '')}"
        f"{' (' + details['reason'] + ')' if details.get('reason') else ''}"
        f" · {details.get('gpu_count', 0)} × {details.get('gpu_type', '')} · {details.get('gpu_hours', 0)} GPU-hours"
    )
