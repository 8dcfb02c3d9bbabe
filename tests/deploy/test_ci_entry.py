"""CI runs `make lint` before `make test`, and stops at a lint failure."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run_ci(tmp_path: Path, lint_status: int) -> list[str]:
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "make"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n[ "$1" = lint ] && exit {lint_status}\nexit 0\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    subprocess.run(["bash", str(REPO / ".ci" / "run")], env=env, check=False, capture_output=True)
    return calls.read_text().split("\n")[:-1] if calls.exists() else []


def test_ci_lints_then_tests(tmp_path):
    assert _run_ci(tmp_path, 0) == ["lint", "test"]


def test_a_lint_failure_stops_ci_before_the_suite(tmp_path):
    assert _run_ci(tmp_path, 1) == ["lint"]
