"""The Content-Security-Policy in a real browser: every page's scripts (htmx, Chart.js, the portal's own)
still run, and the browser reports no violation on any page.

The policy allows no inline style and no inline script. Every page of the accessibility gate (its PAGES
list) is loaded under the portal's real policy, with a `securitypolicyviolation` listener installed before
the page's own scripts run; the dashboard also waits for one live (htmx) refresh, since swapped-in content
is checked too. A violation means something on the page (a style attribute, an inline <style>, a library
injecting one) is refused by the browser, so the page looks or works differently than intended.
"""

from __future__ import annotations

import re

import pytest
from django.conf import settings

from jobs.models import State
from tests.ui.conftest import PASSWORD, make_workload, sign_in
from tests.ui.test_browser_a11y import PAGES, _workloads

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
    page.locator("#usage-chart").scroll_into_view_if_needed()  # Chart.js is fetched when the chart comes near
    page.wait_for_load_state("networkidle")
    assert page.evaluate("!!document.getElementById('usage-chart').chart"), "Chart.js did not draw the usage chart"
    assert violations == []


LISTEN = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(
    `${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ${e.sourceFile || "?"}:${e.lineNumber} ` +
    `(${(e.sample || "").slice(0, 60)})`
  );
});
"""


def _policy_directives() -> dict[str, str]:
    directives = {}
    for part in settings.CONTENT_SECURITY_POLICY.split(";"):
        name, _, value = part.strip().partition(" ")
        directives[name] = value
    return directives


def test_the_policy_allows_no_inline_style_or_script():
    directives = _policy_directives()
    assert directives["style-src"] == "'self'"
    assert directives["script-src"] == "'self'"


def test_no_page_of_the_gate_has_a_violation(chromium, live_server, world):
    made = _workloads(world)
    context = chromium.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 800})
    context.set_default_timeout(15_000)
    context.add_init_script(LISTEN)
    tab = context.new_page()
    refused: list[str] = []
    tab.on("console", lambda m: m.type == "error" and "Content Security Policy" in m.text and refused.append(m.text))
    failures: list[str] = []
    for signed_in in (False, True):
        if signed_in:
            tab.goto("/login/")
            tab.get_by_label("Username").fill("maria")
            tab.get_by_label("Password").fill(PASSWORD)
            tab.get_by_role("button", name="Sign in").click()
            tab.wait_for_url("**/")
        for page in (p for p in PAGES if p.signed_in == signed_in):
            refused.clear()
            response = tab.goto(page.path(made))
            assert response is not None
            # The portal's real policy; a running service's page adds its own style nonce (the Terminal's xterm).
            policy = re.sub(r" 'nonce-[A-Za-z0-9_-]+'", "", response.headers.get("content-security-policy", ""))
            assert policy == settings.CONTENT_SECURITY_POLICY, page.name
            if page.before:
                with tab.expect_navigation():
                    tab.evaluate(page.before)
            tab.wait_for_load_state("networkidle")
            if page.name == "dashboard":  # one live refresh swaps the quota bars in again
                with tab.expect_response(lambda r: r.request.headers.get("hx-request") == "true", timeout=12_000):
                    pass
                tab.wait_for_load_state("networkidle")
            seen = tab.evaluate("window.__cspViolations")
            failures += [f"{page.name}: {v}" for v in seen]
            failures += [f"{page.name}: console: {text}" for text in refused]
    context.close()
    assert not failures, "\n".join(failures)


def test_the_listener_catches_an_inline_style_under_the_policy(chromium):
    """The check is real: under the same policy, a style attribute and an inline <style> are reported."""
    context = chromium.new_context()
    context.add_init_script(LISTEN)
    context.route(
        "http://csp.check/",
        lambda route: route.fulfill(
            status=200,
            content_type="text/html",
            headers={"Content-Security-Policy": settings.CONTENT_SECURITY_POLICY},
            body='<!doctype html><html lang="en"><title>t</title><style>p{color:red}</style>'
            '<p style="width:10px">x</p></html>',
        ),
    )
    tab = context.new_page()
    tab.goto("http://csp.check/")
    seen = tab.evaluate("window.__cspViolations")
    context.close()
    assert len(seen) == 2
    assert all(v.startswith("style-src") for v in seen)


def test_the_api_docs_render_without_a_violation(chromium, live_server, world):
    """Issue 32: /api/docs/ broke the policy (drf-spectacular's inline <style>). Swagger UI still draws the
    operations, and the browser reports nothing."""
    context = chromium.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 800})
    context.set_default_timeout(20_000)
    context.add_init_script(LISTEN)
    tab = context.new_page()
    refused: list[str] = []
    tab.on("console", lambda m: m.type == "error" and "Content Security Policy" in m.text and refused.append(m.text))
    sign_in(tab, "olivia")
    response = tab.goto("/api/docs/")
    assert response.headers.get("content-security-policy") == settings.CONTENT_SECURITY_POLICY
    tab.locator(".opblock").first.wait_for()  # the schema was fetched and drawn
    tab.wait_for_load_state("networkidle")
    seen = tab.evaluate("window.__cspViolations")
    margin = tab.evaluate("getComputedStyle(document.body).margin")
    context.close()
    assert seen + refused == []
    assert margin == "0px"  # the style moved to a stylesheet applies
