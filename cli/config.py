"""Where the client finds the portal and its token: flags, then the environment, then a config file."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


class ConfigError(Exception):
    pass


def config_path() -> Path:
    explicit = os.environ.get("GPUPORTAL_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuportal" / "config.toml"


@dataclass(frozen=True)
class Settings:
    url: str
    token: str


def load_in_workload() -> Settings:
    """Inside a workload's container: the portal's address as its pods reach it (GPUPORTAL_API_URL) and the
    workload's own checkpoint token (the file GPUPORTAL_TOKEN_FILE names), both set by the portal."""
    url = os.environ.get("GPUPORTAL_API_URL") or os.environ.get("GPUPORTAL_URL")
    token_file = os.environ.get("GPUPORTAL_TOKEN_FILE")
    if not url or not token_file:
        raise ConfigError(
            "not inside a GPU Portal batch job: GPUPORTAL_API_URL and GPUPORTAL_TOKEN_FILE are not set "
            "(the portal sets them in every batch job it runs)"
        )
    try:
        token = Path(token_file).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the workload token {token_file}: {exc.strerror}") from exc
    return Settings(url=url.rstrip("/"), token=token)


def load(*, url: str | None = None, token: str | None = None) -> Settings:
    """Flags win over GPUPORTAL_URL / GPUPORTAL_TOKEN, which win over the config file."""
    file_values: dict = {}
    path = config_path()
    if path.exists():
        try:
            file_values = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from exc
    url_from = "--url" if url else "GPUPORTAL_URL" if os.environ.get("GPUPORTAL_URL") else str(path)
    token_from = "--token" if token else "GPUPORTAL_TOKEN" if os.environ.get("GPUPORTAL_TOKEN") else str(path)
    url = url or os.environ.get("GPUPORTAL_URL") or file_values.get("url")
    token = token or os.environ.get("GPUPORTAL_TOKEN") or file_values.get("token")
    if not url:
        raise ConfigError(f'no portal URL: pass --url, set GPUPORTAL_URL, or put url = "https://..." in {path}')
    if not token:
        raise ConfigError(
            f"no API token: create one on the portal's profile page (/profile/tokens/), then pass --token, "
            f'set GPUPORTAL_TOKEN, or put token = "gpp_..." in {path}'
        )
    if not str(url).startswith(("http://", "https://")):
        raise ConfigError(f"the portal URL must start with http:// or https:// (got {url!r})")
    _check_url(str(url), url_from)
    _check_token(str(token), token_from)
    # The REST API's address (https://host/api/v1) names the same portal: the client adds /api/v1 itself.
    return Settings(url=str(url).rstrip("/").removesuffix("/api/v1"), token=str(token))


def _check_url(url: str, source: str) -> None:
    """A URL with no host or a port that is no port is a mistake in the configuration, said as one (requests
    would call it InvalidURL, read as "cannot reach the portal")."""
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError for a port that is not a number from 0 to 65535
    except ValueError as exc:
        raise ConfigError(f"the portal URL {url!r} (from {source}) is not a URL: {exc}") from None
    if not parts.hostname:
        raise ConfigError(f"the portal URL {url!r} (from {source}) names no host, e.g. https://gpus.example.org")
    if port == 0:
        raise ConfigError(f"the portal URL {url!r} (from {source}) names port 0")


# What the portal's tokens are made of (api/tokens.py: a prefix and URL-safe characters); any printable
# ASCII is let through, so that a token of another form reaches the portal and gets its 401.
_TOKEN = re.compile(r"[\x21-\x7e]+")


def _check_token(token: str, source: str) -> None:
    """A token that could not travel in an HTTP header (typographic quotes, a line break, a space: most often
    pasted with more than the token) is named here; the token itself is never printed."""
    if not _TOKEN.fullmatch(token):
        raise ConfigError(
            f"the API token from {source} has characters no token has (a space, a line break, quotes or "
            "letters outside ASCII): copy it again from the portal's /profile/tokens/ page, the token alone"
        )
