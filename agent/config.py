"""The agent's configuration, read from the environment in one place.

Every variable is parsed and checked here, so a mistake stops start-up with a message that names the
variable instead of surfacing later as a strange failure inside the sampling loop. This deliberately
does not reuse portal/env.py: the agent must run without Django or the portal's dependencies.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(Exception):
    """A variable in the environment is missing or malformed; the message names it."""


def _host_proc(env: Mapping[str, str]) -> Path:
    host_proc = Path(_str(env, "HOST_PROC") or "/proc")
    if not host_proc.is_dir():
        raise ConfigError(f"HOST_PROC={host_proc} is not a directory")
    return host_proc


def _check_portal(portal_url: str, token: str | None, token_file: Path | None) -> None:
    """The portal's address is http(s), and exactly one of the token and a readable token file is given."""
    parts = urlsplit(portal_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"PORTAL_URL={portal_url!r} is not an http(s) URL")
    if token and token_file:
        raise ConfigError("set AGENT_TOKEN or AGENT_TOKEN_FILE, not both")
    if not token and not token_file:
        raise ConfigError("AGENT_TOKEN or AGENT_TOKEN_FILE must be set when PORTAL_URL is")
    if token_file is not None:
        try:
            read_token(token_file)
        except OSError as exc:
            raise ConfigError(f"AGENT_TOKEN_FILE={token_file} cannot be read: {exc.strerror}") from exc
        except ValueError as exc:
            raise ConfigError(f"AGENT_TOKEN_FILE={token_file} {exc}") from exc


@dataclass(frozen=True)
class AgentConfig:
    node_name: str
    # None: push nothing, only serve /metrics (a Prometheus-only install).
    portal_url: str | None
    # Exactly one of these is set when portal_url is. A token file is re-read at every push, so a
    # rotated Kubernetes Secret is picked up without restarting the agent.
    agent_token: str | None
    agent_token_file: Path | None
    sample_interval_seconds: float
    metrics_port: int
    host_proc: Path
    buffer_max_reports: int
    simulate: bool
    # Only read when simulate is on: the shape of the simulated node.
    simulate_gpus: int
    simulate_model: str
    simulate_cuda_version: str
    # GPU indexes a standalone simulated agent shows as busy (the node simulator passes busy_fn instead).
    simulate_busy: tuple[int, ...] = ()
    log_level: str = "INFO"
    # Persistent volumes' use, read from the kubelet's pod directories every so often (0: never).
    kubelet_root: Path = Path("/var/lib/kubelet")
    volume_interval_seconds: float = 60.0
    volume_max_entries: int = 200_000

    def __repr__(self) -> str:
        # The dataclass repr would print the token; this one never does.
        token = "<set>" if self.agent_token else None
        return (
            f"AgentConfig(node_name={self.node_name!r}, portal_url={self.portal_url!r}, "
            f"agent_token={token}, agent_token_file={self.agent_token_file}, "
            f"sample_interval_seconds={self.sample_interval_seconds}, metrics_port={self.metrics_port}, "
            f"host_proc={self.host_proc}, buffer_max_reports={self.buffer_max_reports}, "
            f"simulate={self.simulate})"
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AgentConfig:
        env = os.environ if environ is None else environ
        node_name = _str(env, "NODE_NAME")
        if not node_name:
            raise ConfigError("NODE_NAME must be set (in a DaemonSet: env valueFrom fieldRef spec.nodeName)")
        portal_url = _str(env, "PORTAL_URL").rstrip("/") or None
        token = _str(env, "AGENT_TOKEN") or None
        token_file_raw = _str(env, "AGENT_TOKEN_FILE")
        token_file = Path(token_file_raw) if token_file_raw else None
        if portal_url is not None:
            _check_portal(portal_url, token, token_file)
        host_proc = _host_proc(env)
        return cls(
            node_name=node_name,
            portal_url=portal_url,
            agent_token=token,
            agent_token_file=token_file,
            sample_interval_seconds=_float(env, "SAMPLE_INTERVAL_SECONDS", 5.0, minimum=0.1, maximum=3600),
            metrics_port=_int(env, "METRICS_PORT", 9400, minimum=0, maximum=65535),
            host_proc=host_proc,
            buffer_max_reports=_int(env, "BUFFER_MAX_REPORTS", 720, minimum=1, maximum=1_000_000),
            simulate=_bool(env, "SIMULATE", False),
            simulate_gpus=_int(env, "SIMULATE_GPUS", 4, minimum=0, maximum=64),
            simulate_model=_str(env, "SIMULATE_MODEL") or "Tesla P100-PCIE-16GB",
            simulate_cuda_version=_cuda_version(env, "SIMULATE_CUDA_VERSION", "12.2"),
            simulate_busy=_indexes(env, "SIMULATE_BUSY"),
            log_level=_log_level(env, "LOG_LEVEL"),
            kubelet_root=Path(_str(env, "KUBELET_ROOT") or "/var/lib/kubelet"),
            volume_interval_seconds=_float(env, "VOLUME_INTERVAL_SECONDS", 60.0, minimum=0, maximum=86400),
            volume_max_entries=_int(env, "VOLUME_MAX_ENTRIES", 200_000, minimum=1, maximum=100_000_000),
        )

    def token(self) -> str | None:
        """The bearer token now; from the file when one is configured (it may have been rotated)."""
        if self.agent_token_file is not None:
            return read_token(self.agent_token_file)
        return self.agent_token


def read_token(path: Path) -> str:
    token = path.read_text().strip()
    if not token:
        raise ValueError("is empty")
    return token


def _str(env: Mapping[str, str], name: str) -> str:
    return env.get(name, "").strip()


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def _int(env: Mapping[str, str], name: str, default: int, *, minimum: int, maximum: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not an integer") from exc
    if not minimum <= value <= maximum:
        raise ConfigError(f"{name}={value} is outside {minimum}..{maximum}")
    return value


def _float(env: Mapping[str, str], name: str, default: float, *, minimum: float, maximum: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not a number") from exc
    if not minimum <= value <= maximum:  # also refuses nan
        raise ConfigError(f"{name}={value} is outside {minimum}..{maximum}")
    return value


def _cuda_version(env: Mapping[str, str], name: str, default: str) -> str:
    raw = env.get(name, "").strip() or default
    major, _, minor = raw.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise ConfigError(f"{name}={raw!r} is not a CUDA version like 12.2")
    return f"{int(major)}.{int(minor)}"


def _indexes(env: Mapping[str, str], name: str) -> tuple[int, ...]:
    raw = env.get(name, "").strip()
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if not all(item.isdigit() for item in items):
        raise ConfigError(f"{name}={raw!r} is not a comma-separated list of GPU indexes")
    return tuple(sorted({int(item) for item in items}))


def _log_level(env: Mapping[str, str], name: str) -> str:
    raw = env.get(name, "").strip().upper() or "INFO"
    if raw not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"{name}={raw!r} is not one of DEBUG, INFO, WARNING, ERROR")
    return raw
