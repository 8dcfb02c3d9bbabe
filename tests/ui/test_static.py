"""The pages' static files survive the production pipeline (manifest storage, as in the image)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_vendor_libraries_are_installed():
    for name in ("htmx.min.js", "chart.umd.min.js"):
        assert (ROOT / "static" / "vendor" / name).is_file(), f"static/vendor/{name} missing: run `make vendor`"


def test_collectstatic_with_the_manifest_storage(tmp_path):
    env = {**os.environ, "DEBUG": "0", "SECRET_KEY": "collectstatic-only", "STATIC_ROOT": str(tmp_path)}
    env.pop("DATABASE_URL", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    manifest = (tmp_path / "staticfiles.json").read_text()
    for name in ("vendor/htmx.min.js", "vendor/chart.umd.min.js", "css/portal.css", "js/launch.js"):
        assert f'"{name}"' in manifest


def test_every_page_names_an_icon_and_favicon_ico_is_not_a_404(client, db):
    # Browsers asked for /favicon.ico on every page and logged its 404 as a console error.
    page = client.get("/login/")
    assert b'rel="icon"' in page.content
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("favicon.svg")
    assert (ROOT / "static" / "favicon.svg").is_file()
