"""`manage.py check --deploy` finds nothing to warn about with the settings the chart gives the web pods."""

from __future__ import annotations

import base64
import os
import subprocess
import sys

from tests.deploy.helm import REPO_ROOT, render


def chart_environment() -> dict[str, str]:
    """What the web pod's environment holds on a default install: the ConfigMap and the portal's Secret."""
    manifests = render()
    [config] = [m.obj for m in manifests if m.kind == "ConfigMap" and m.name.endswith("-config")]
    env = dict(config["data"])
    for secret in (m.obj for m in manifests if m.kind == "Secret"):
        env.update(secret.get("stringData") or {})
        env.update({k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()})
    return env


def test_check_deploy_is_clean_with_the_charts_settings() -> None:
    env = chart_environment()
    assert env["DEBUG"] == "0"
    assert len(env["SECRET_KEY"]) >= 50  # the chart's generated key, not a stand-in
    keep = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO_ROOT, env={**keep, **env}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
