"""The Content-Security-Policy in a real browser: every page's scripts (htmx, Chart.js, the portal's own)
still run, and the browser reports no violation on any page."""

from __future__ import annotations

import pytest

from jobs.models import State
from tests.ui.conftest import make_workload, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_no_page_breaks_the_policy_and_the_scripts_run(page, world):
    running = make_workload(world, state=State.RUNNING)
    make_workload(world, state=State.SUCCEEDED)
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: violations.append(str(e)))
    sign_in(page, "olivia")
    for path in ("/", "/launch/", "/workloads/", f"/workloads/{running.uid}/", "/usage/", "/nodes/"):
        response = page.goto(path)
        assert response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_load_state("networkidle")
        assert page.evaluate("typeof window.htmx") == "object", path
    page.goto("/usage/")
    page.wait_for_load_state("networkidle")
    assert page.evaluate("!!document.getElementById('usage-chart').chart"), "Chart.js did not draw the usage chart"
    assert violations == []
