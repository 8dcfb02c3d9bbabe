"""Small, typed readers for configuration that comes from the environment.

Everything the portal reads from the environment goes through here (called from settings.py), so a
value is parsed and validated in one place and a mistake stops start-up with a message naming the
variable instead of surfacing later as a strange failure.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import environ

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(Exception):
    """A setting in the environment is missing or malformed."""


def env_str(name: str, default: str = "") -> str:
    """A string from NAME, or from the file named by NAME_FILE (mounted Kubernetes/Docker secrets)."""
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{name}_FILE={file_name} cannot be read: {exc.strerror}") from exc
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not an integer") from exc
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} is below the minimum {minimum}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name}={value} is above the maximum {maximum}")
    return value


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_networks(name: str) -> list[str]:
    """Comma-separated IP addresses or CIDR networks (10.0.0.0/8, 2001:db8::/32, 192.0.2.7); a bad entry stops
    start-up naming the variable and the entry, instead of failing every request that reads it later."""
    entries = env_list(name)
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError as exc:
            raise ConfigError(f"{name}: {entry!r} is not an IP address or network (e.g. 10.0.0.0/8)") from exc
    return entries


def env_dict(name: str, default: dict[str, str] | None = None) -> dict[str, str]:
    """`key=value,key2=value2` (label selectors and the like); empty means an empty dict."""
    raw = os.environ.get(name)
    if raw is None:
        return dict(default or {})
    result: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{name}: {item!r} is not key=value")
        result[key.strip()] = value.strip()
    return result


def env_database(name: str, default: str) -> dict:
    """A Django DATABASES entry from a URL (postgres://..., sqlite:///path)."""
    url = env_str(name, default)
    scheme = url.split("://", 1)[0]
    if "://" not in url or scheme not in environ.Env.DB_SCHEMES:
        known = ", ".join(sorted({"postgres", "postgresql", "sqlite"}))
        raise ConfigError(f"{name}: unsupported database URL scheme {scheme!r} (use one of: {known})")
    try:
        config = environ.Env.db_url_config(url)
    except Exception as exc:  # django-environ raises several types for a bad URL
        raise ConfigError(f"{name} is not a database URL Django understands: {exc}") from exc
    return config


# URL schemes of EMAIL_URL: (Django backend, implicit TLS, STARTTLS, default port).
_EMAIL_SCHEMES: dict[str, tuple[str, bool, bool, int]] = {
    "smtp": ("django.core.mail.backends.smtp.EmailBackend", False, False, 25),
    "smtp+tls": ("django.core.mail.backends.smtp.EmailBackend", False, True, 587),
    "smtp+starttls": ("django.core.mail.backends.smtp.EmailBackend", False, True, 587),
    "smtps": ("django.core.mail.backends.smtp.EmailBackend", True, False, 465),
    "smtp+ssl": ("django.core.mail.backends.smtp.EmailBackend", True, False, 465),
    "console": ("django.core.mail.backends.console.EmailBackend", False, False, 0),
    "dummy": ("django.core.mail.backends.dummy.EmailBackend", False, False, 0),
}


def _email_timeout(name: str, query: dict[str, list[str]]) -> int:
    """The e-mail URL's ?timeout= (10 s unless given); ConfigError for any option but timeout and from."""
    unknown = set(query) - {"timeout", "from"}
    if unknown:
        raise ConfigError(f"{name}: unknown option(s) {', '.join(sorted(unknown))} (known: timeout, from)")
    timeout_raw = query.get("timeout", ["10"])[-1]
    try:
        timeout = int(timeout_raw)
    except ValueError as exc:
        raise ConfigError(f"{name}: timeout={timeout_raw!r} is not a whole number of seconds") from exc
    if timeout < 1:
        raise ConfigError(f"{name}: timeout must be at least 1 second")
    return timeout


def env_email(name: str, default: str) -> dict[str, Any]:
    """Django's EMAIL_* settings from one URL (or NAME_FILE, since it may carry a password).

    smtp://host[:25] (plain), smtp+tls://user:password@host[:587] (STARTTLS), smtps://user:password@host[:465]
    (TLS from the start), console:// (into the log), dummy:// (dropped). The user and password are
    percent-decoded, so a password may hold any character. Query: ?timeout=<seconds>&from=<address>.
    """
    url = env_str(name).strip() or default  # set but empty (as in .env.example): the default
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _EMAIL_SCHEMES:
        known = ", ".join(_EMAIL_SCHEMES)
        raise ConfigError(f"{name}: unsupported e-mail URL scheme {scheme!r} (use one of: {known})")
    backend, use_ssl, use_tls, default_port = _EMAIL_SCHEMES[scheme]
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{name}: the port is not a number between 0 and 65535") from exc
    query = parse_qs(parts.query)
    timeout = _email_timeout(name, query)
    config: dict[str, Any] = {"EMAIL_BACKEND": backend, "EMAIL_TIMEOUT": timeout}
    if backend.endswith("smtp.EmailBackend"):
        if not parts.hostname:
            raise ConfigError(f"{name}: the URL names no mail server (e.g. smtp+tls://user:password@mail.example.org)")
        config.update(
            EMAIL_HOST=parts.hostname,
            EMAIL_PORT=port or default_port,
            EMAIL_HOST_USER=unquote(parts.username or ""),
            EMAIL_HOST_PASSWORD=unquote(parts.password or ""),
            EMAIL_USE_SSL=use_ssl,
            EMAIL_USE_TLS=use_tls,
        )
    if query.get("from"):
        config["DEFAULT_FROM_EMAIL"] = query["from"][-1]
    return config
