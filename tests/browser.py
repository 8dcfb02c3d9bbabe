"""The browser for the whole suite: one Debian chromium driven by Playwright's sync API, and a fresh tab
per test on the live portal.

Loaded once as a plugin from tests/conftest.py. It must be defined in exactly one place: Playwright's sync
API keeps an event loop running in the main thread while it is open, so a second session-scoped copy of
this fixture (for example one imported into another test module) cannot start, and every test after the
first copy that calls `asyncio.run()` fails.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
# One origin per proxied service (PROXY_ORIGIN `http://{uid}.apps.gpuportal.test:PORT`): every name under
# this domain resolves to loopback in the suite's chromium, as a wildcard DNS record would in production.
APPS_DOMAIN = "apps.gpuportal.test"
CHROMIUM_ARGS = [
    f"--host-resolver-rules=MAP *.{APPS_DOMAIN} 127.0.0.1",
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[1] / "test-output"


@pytest.fixture(scope="session")
def chromium():
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (`make test` installs it)")
    # Playwright's sync API keeps an event loop in this thread; the ORM calls the tests make to set up
    # data are still plain synchronous calls.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, live_server, request):
    """A fresh browser tab on the live portal; a screenshot of where it ended goes to test-output/."""
    context = chromium.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    tab = context.new_page()
    yield tab
    SCREENSHOTS.mkdir(exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    with contextlib.suppress(Exception):
        tab.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    context.close()


def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
