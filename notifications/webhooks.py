"""Webhooks: which URLs may receive them, how they are sent, and what they are sent (JSON, Slack, Mattermost).

One parser decides and sends. `webhook_target` reads a URL once (scheme, host, port, path; nothing else),
resolves the host once, checks every address, and returns the address it will connect to; `webhook_post`
connects to exactly that address (keeping the name for the Host header, TLS SNI and certificate checks),
so neither a second parser reading the URL differently (a backslash or user part that one library ends the
host at and another does not) nor a second lookup answering differently (DNS rebinding) can send the
request anywhere the check did not see.

Refused: anything but http(s); user info (`user@`) and backslashes anywhere; the portal itself; private,
loopback, link-local and other non-public addresses unless NOTIFY_WEBHOOK_ALLOWED_NETWORKS lists their
network (a site's own chat server; tests and `make run` list 127.0.0.0/8); and, whatever the allow-list
says, the clouds' metadata addresses and the Kubernetes API server's address and port. The URL is checked
when it is saved and again before every send.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import certifi
import urllib3
from django.conf import settings

from notifications.models import WebhookFormat

log = logging.getLogger(__name__)

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Instance metadata services (AWS IPv4/IPv6 and ECS, GCP and Azure share 169.254.169.254, Alibaba): never.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "169.254.170.23", "fd00:ec2::254", "fd00:ec2::23", "100.100.100.200")
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")
# scheme://authority then the rest; the authority ends at the first / ? or #, as the URL standard says.
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)(?P<rest>[^#]*)(?:#.*)?", re.S)
_HOST_NAME = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?"
)


class WebhookUrlError(ValueError):
    """A webhook URL the portal will not call; the message says why, for the person who entered it."""


@dataclass(frozen=True)
class WebhookTarget:
    """A checked webhook URL: where to connect (`address`, pinned) and what to ask for there."""

    scheme: str
    host: str  # the name (or literal) as written, lower case; IPv6 without brackets
    port: int
    path: str  # path and query, as sent in the request line
    address: str  # the checked address the request goes to

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def _parse(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of a webhook URL, or WebhookUrlError. Strict on purpose: printable ASCII
    only (no spaces, controls or backslashes), no user info, a host name, IPv4 or bracketed IPv6 literal."""
    _check_characters(url)
    match = _URL.fullmatch(url)
    if match is None:
        raise WebhookUrlError("Enter a full http:// or https:// address.")
    scheme = match["scheme"].lower()
    if scheme not in ("http", "https"):
        raise WebhookUrlError("Only http:// and https:// webhook addresses are allowed.")
    authority = match["authority"]
    if "@" in authority:
        raise WebhookUrlError("The webhook address may not contain a user name or password (user@host).")
    host, port_text = _bracketed_host(authority) if authority.startswith("[") else _named_host(authority)
    path = match["rest"] or "/"
    if not path.startswith("/"):
        path = "/" + path  # only a query: `http://host?x` asks for `/?x`
    return scheme, host.lower().rstrip("."), _port(port_text, scheme), path


def _check_characters(url: str) -> None:
    if not isinstance(url, str) or any(not (0x21 <= ord(c) <= 0x7E) for c in url):
        raise WebhookUrlError("The webhook address may contain no spaces, control or non-ASCII characters.")
    if "\\" in url:
        raise WebhookUrlError("The webhook address may not contain a backslash.")


def _bracketed_host(authority: str) -> tuple[str, str]:
    """(IPv6 address, port as written) of `[address]:port`."""
    host, _, after = authority[1:].partition("]")
    try:
        ipaddress.IPv6Address(host)
    except ValueError as exc:
        raise WebhookUrlError("The webhook address names no valid host.") from exc
    if after and not after.startswith(":"):
        raise WebhookUrlError("The webhook address names no valid host.")
    return host, after[1:] if after else ""


def _named_host(authority: str) -> tuple[str, str]:
    """(host name or IPv4 address, port as written) of `host:port`."""
    host, colon, port_text = authority.partition(":")
    if colon and not port_text:
        raise WebhookUrlError("The webhook address has an invalid port.")
    if not host:
        raise WebhookUrlError("The webhook address names no host.")
    if len(host) > 253 or not _HOST_NAME.fullmatch(host):
        raise WebhookUrlError("The webhook address names no valid host.")
    return host, port_text


def _port(port_text: str, scheme: str) -> int:
    if not port_text:
        return 443 if scheme == "https" else 80
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise WebhookUrlError("The webhook address has an invalid port.")
    return int(port_text)


def webhook_target(url: str) -> WebhookTarget:
    """The checked target of `url`, resolved once; raises WebhookUrlError unless the portal may POST there."""
    scheme, host, port, path = _parse(url)
    if _is_portal(host, port):
        raise WebhookUrlError("A webhook cannot point at the portal itself.")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:  # gaierror, an IDNA error
        raise WebhookUrlError(f"The host {host} cannot be resolved.") from exc
    addresses = [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]
    if not addresses:
        raise WebhookUrlError(f"The host {host} cannot be resolved.")
    # Another name of the portal (localhost:8000 for 127.0.0.1:8000) is the portal too.
    if _portal_addresses(port) & {each for address in addresses for each in _embedded(address)}:
        raise WebhookUrlError("A webhook cannot point at the portal itself.")
    forbidden = _api_server_endpoints()
    for address in addresses:
        _check_address(host, address, port, forbidden)
    return WebhookTarget(scheme=scheme, host=host, port=port, path=path, address=str(addresses[0]))


def check_webhook_url(url: str) -> None:
    """Raise WebhookUrlError unless the portal may POST to `url`."""
    webhook_target(url)


def _embedded(address: IpAddress) -> list[IpAddress]:
    """The address and any IPv4 address it carries (IPv4-mapped, NAT64), each judged on its own."""
    found: list[IpAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            found.append(address.ipv4_mapped)
        if address in NAT64:
            found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _check_address(host: str, address: IpAddress, port: int, forbidden: set[tuple[IpAddress, int]]) -> None:
    allowed = [ipaddress.ip_network(net, strict=False) for net in settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS]
    for each in _embedded(address):
        if each in METADATA_ADDRESSES:
            raise WebhookUrlError(f"The host {host} resolves to {each}, the cloud's metadata address.")
        if (each, port) in forbidden:
            raise WebhookUrlError(f"The host {host} resolves to the cluster's API server.")
    if any(address in net for net in allowed):
        return
    if any(not each.is_global or each.is_multicast for each in _embedded(address)):
        raise WebhookUrlError(
            f"The host {host} resolves to {address}, a private or internal address; webhooks may only "
            "go to public addresses (an administrator can allow internal networks)."
        )


def _api_server_endpoints() -> set[tuple[IpAddress, int]]:
    """The Kubernetes API server's (address, port) pairs this process knows of: the in-cluster service
    (KUBERNETES_SERVICE_HOST/PORT) and the host of the portal's own kube configuration."""
    found: set[tuple[IpAddress, int]] = set()
    candidates = []
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        candidates.append((os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")))
    try:
        from jobs.kube import client as kube

        configured = urlsplit(kube.api_client().configuration.host)
        if configured.hostname:
            candidates.append((configured.hostname, str(configured.port or 443)))
    except Exception as exc:  # no kube configuration here (a web without a cluster): nothing more to refuse
        log.debug("webhooks: no kube configuration to learn the API server from (%s)", exc)
    for host, port in candidates:
        try:
            for info in socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM):
                found.add((ipaddress.ip_address(info[4][0].split("%", 1)[0]), int(port)))
        except (OSError, ValueError):
            continue
    return found


def webhook_post(target: WebhookTarget, body: bytes, headers: dict[str, str], *, timeout: float) -> int:
    """POST `body` to the checked target's pinned address (never resolving its name again, never following
    a redirect); returns the HTTP status. Raises urllib3's errors for timeouts and refused connections."""
    pool_args: dict[str, Any] = {
        "timeout": urllib3.Timeout(connect=timeout, read=timeout),
        "retries": False,
        "maxsize": 1,
    }
    if target.scheme == "https":
        pool: urllib3.HTTPConnectionPool = urllib3.HTTPSConnectionPool(
            target.address,
            target.port,
            server_hostname=target.host,
            assert_hostname=target.host,
            cert_reqs="CERT_REQUIRED",
            ca_certs=os.environ.get("REQUESTS_CA_BUNDLE") or certifi.where(),
            **pool_args,
        )
    else:
        pool = urllib3.HTTPConnectionPool(target.address, target.port, **pool_args)
    try:
        response = pool.urlopen(
            "POST",
            target.path,
            body=body,
            headers={**headers, "Host": target.authority},
            redirect=False,
            retries=False,
            assert_same_host=False,
        )
        return response.status
    finally:
        pool.close()


def _is_portal(host: str, port: int) -> bool:
    """The portal's public address (SITE_URL), or any port of a name it serves (ALLOWED_HOSTS). Loopback
    and IP literals among ALLOWED_HOSTS count only with SITE_URL's port: other local ports are other
    programs (and private addresses are refused anyway unless allowed)."""
    site = urlsplit(settings.SITE_URL)
    site_port = site.port or (443 if site.scheme == "https" else 80)
    if site.hostname and host == site.hostname.lower() and port == site_port:
        return True
    return any(_served_name(host, allowed.lower().strip("[]")) for allowed in settings.ALLOWED_HOSTS)


def _portal_addresses(port: int) -> set[IpAddress]:
    """The addresses SITE_URL's host resolves to, where `port` is SITE_URL's port; empty otherwise."""
    site = urlsplit(settings.SITE_URL)
    if not site.hostname or port != (site.port or (443 if site.scheme == "https" else 80)):
        return set()
    try:
        infos = socket.getaddrinfo(site.hostname, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError):
        return set()
    return {ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos}


def _served_name(host: str, name: str) -> bool:
    """Is `host` the name (or under the domain, `.example.org`) an ALLOWED_HOSTS entry names? Not for the
    wildcard, localhost or an IP literal."""
    if not name or name == "*" or name == "localhost" or _is_ip(name):
        return False
    return host == name.lstrip(".") or (name.startswith(".") and host.endswith(name))


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
