"""The agent's environment configuration: defaults, and errors that name the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.config import AgentConfig, ConfigError


def test_defaults():
    config = AgentConfig.from_env({"NODE_NAME": "gpu-node-1"})
    assert config.node_name == "gpu-node-1"
    assert config.portal_url is None
    assert config.sample_interval_seconds == 5.0
    assert config.metrics_port == 9400
    assert config.host_proc == Path("/proc")
    assert config.buffer_max_reports == 720
    assert config.simulate is False


def test_full_configuration(tmp_path: Path):
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    config = AgentConfig.from_env(
        {
            "NODE_NAME": "n1",
            "PORTAL_URL": "https://portal.example.org/",
            "AGENT_TOKEN_FILE": str(token),
            "SAMPLE_INTERVAL_SECONDS": "2.5",
            "METRICS_PORT": "9500",
            "HOST_PROC": str(tmp_path),
            "BUFFER_MAX_REPORTS": "10",
            "SIMULATE": "1",
            "SIMULATE_GPUS": "8",
            "SIMULATE_BUSY": "3,1",
            "SIMULATE_CUDA_VERSION": "11.8",
        }
    )
    assert config.portal_url == "https://portal.example.org"
    assert config.token() == "t0ken"
    assert config.sample_interval_seconds == 2.5
    assert config.metrics_port == 9500
    assert config.host_proc == tmp_path
    assert config.buffer_max_reports == 10
    assert config.simulate is True
    assert config.simulate_gpus == 8
    assert config.simulate_busy == (1, 3)
    assert config.simulate_cuda_version == "11.8"


def test_repr_never_shows_the_token():
    config = AgentConfig.from_env({"NODE_NAME": "n", "PORTAL_URL": "http://p", "AGENT_TOKEN": "sekrit"})
    assert "sekrit" not in repr(config)
    assert config.token() == "sekrit"


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, "NODE_NAME"),
        ({"NODE_NAME": "n", "SAMPLE_INTERVAL_SECONDS": "often"}, "SAMPLE_INTERVAL_SECONDS"),
        ({"NODE_NAME": "n", "SAMPLE_INTERVAL_SECONDS": "0"}, "SAMPLE_INTERVAL_SECONDS"),
        ({"NODE_NAME": "n", "METRICS_PORT": "70000"}, "METRICS_PORT"),
        ({"NODE_NAME": "n", "BUFFER_MAX_REPORTS": "0"}, "BUFFER_MAX_REPORTS"),
        ({"NODE_NAME": "n", "SIMULATE": "maybe"}, "SIMULATE"),
        ({"NODE_NAME": "n", "HOST_PROC": "/nonexistent/proc"}, "HOST_PROC"),
        ({"NODE_NAME": "n", "PORTAL_URL": "portal:8000", "AGENT_TOKEN": "t"}, "PORTAL_URL"),
        ({"NODE_NAME": "n", "PORTAL_URL": "http://portal"}, "AGENT_TOKEN"),
        (
            {"NODE_NAME": "n", "PORTAL_URL": "http://p", "AGENT_TOKEN_FILE": "/nonexistent/t"},
            "AGENT_TOKEN_FILE",
        ),
        ({"NODE_NAME": "n", "SIMULATE_BUSY": "0,x"}, "SIMULATE_BUSY"),
        ({"NODE_NAME": "n", "SIMULATE_CUDA_VERSION": "12"}, "SIMULATE_CUDA_VERSION"),
        ({"NODE_NAME": "n", "LOG_LEVEL": "LOUD"}, "LOG_LEVEL"),
    ],
)
def test_errors_name_the_variable(env, names):
    with pytest.raises(ConfigError, match=names):
        AgentConfig.from_env(env)


def test_empty_token_file_is_refused(tmp_path: Path):
    token = tmp_path / "token"
    token.write_text("\n")
    with pytest.raises(ConfigError, match=r"AGENT_TOKEN_FILE.*empty"):
        AgentConfig.from_env({"NODE_NAME": "n", "PORTAL_URL": "http://p", "AGENT_TOKEN_FILE": str(token)})


def test_agent_process_with_a_bad_variable_exits_78_naming_it(tmp_path: Path):
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "NODE_NAME": "n1", "SAMPLE_INTERVAL_SECONDS": "soon"}
    result = subprocess.run(
        [sys.executable, "-m", "agent"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 78
    assert "SAMPLE_INTERVAL_SECONDS='soon' is not a number" in result.stderr


def test_the_token_file_is_one_token_never_a_directory_of_every_nodes(tmp_path: Path):
    # The chart used to mount a Secret of every node's tokens into every agent; now each pod has its own.
    (tmp_path / "gpu-a").write_text("token-of-a\n")
    env = {"PORTAL_URL": "http://p", "AGENT_TOKEN_FILE": str(tmp_path), "NODE_NAME": "gpu-a"}
    with pytest.raises(ConfigError, match="AGENT_TOKEN_FILE"):
        AgentConfig.from_env(env)


def test_start_up_line_says_it_pushes_when_portal_url_is_set(tmp_path: Path):
    # The Pusher starts with an empty buffer, and an empty buffer made it falsy: the line said
    # "not pushing" on a node that pushed. Nothing listens at the URL; only the start-up line matters.
    repo = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": str(repo),
        "NODE_NAME": "n1",
        "SIMULATE": "1",
        "METRICS_PORT": "0",
        "PORTAL_URL": "http://127.0.0.1:9",
        "AGENT_TOKEN": "t0ken",
    }
    agent = subprocess.Popen([sys.executable, "-m", "agent"], env=env, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        line = ""
        while "gpuportal-agent" not in line:
            line = agent.stderr.readline()
            assert line, "the agent exited before its start-up line"
    finally:
        agent.terminate()
        agent.wait(timeout=30)
    assert "pushing to http://127.0.0.1:9" in line
    assert "not pushing" not in line
