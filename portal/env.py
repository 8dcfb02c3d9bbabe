"""Small, typed readers for configuration that comes from the environment.

Everything the portal reads from the environment goes through here (called from settings.py), so a
value is parsed and validated in one place and a mistake stops start-up with a message naming the
variable instead of surfacing later as a strange failure.
"""

from __future__ import annotations

import os
from pathlib import Path

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
