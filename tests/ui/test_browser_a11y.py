"""The accessibility and layout gate: every page a researcher or manager sees, at laptop and phone width.

axe-core (pinned in package.json, injected by the test only, never served to users) must find no critical
or serious violation, and no page may scroll sideways at 375 px. A page added later gets the same check
by being listed in PAGES. One browser, one signed-in session, the pages visited in a loop: it stays fast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from api.tokens import token_create
from jobs.models import Kind, State, TeamSecret
from proxy.app import ServiceProxy
from tests.proxy.backend import Backend
from tests.proxy.conftest import _free_port, serve
from tests.ui.conftest import CHROMIUM, PASSWORD, SCREENSHOTS, World, make_workload

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
WIDTHS = {"desktop": (1280, 800), "phone": (375, 812)}
BLOCKING = ("critical", "serious")


@dataclass(frozen=True)
class Page:
    name: str
    path: Callable[[dict], str]  # from the workloads the test made (by name) to the page's URL
    before: str = ""  # JavaScript run before the check (e.g. submit a form so its errors show)
    signed_in: bool = True
    status: int = 200  # what the page answers; another status in the console is an error


def detail(name: str) -> Callable[[dict], str]:
    return lambda made: f"/workloads/{made[name].uid}/"


# Every page a researcher or a manager sees. Add new pages here.
PAGES = [
    Page("sign-in", lambda made: "/login/", signed_in=False),
    Page("dashboard", lambda made: "/"),
    Page("launch", lambda made: "/launch/"),
    Page(
        "launch-errors",
        lambda made: "/launch/",
        before="document.querySelector('#id_name').value = 'Bad_Name!';"
        "document.querySelector('#launch-form').requestSubmit();",
        status=400,
    ),
    Page("workloads-mine", lambda made: "/workloads/"),
    Page("workloads-team", lambda made: "/workloads/?scope=team&state=&kind=&gpu_type="),
    Page("batch-queued", detail("batch-queued")),
    Page("batch-running", detail("batch-running")),
    Page("batch-succeeded", detail("batch-succeeded")),
    Page("batch-failed", detail("batch-failed")),
    Page("batch-cancelled", detail("batch-cancelled")),
    Page("service-running", detail("service-running")),
    Page("service-cancelled", detail("service-cancelled")),
    Page("cancel-confirm", lambda made: f"/workloads/{made['batch-running'].uid}/cancel/"),
    Page("usage", lambda made: "/usage/"),
    Page("queue", lambda made: "/queue/"),
    Page("secrets", lambda made: "/secrets/"),
    Page(
        "secrets-errors",
        lambda made: "/secrets/",
        before="document.querySelector('#id_name').value = 'Bad_Name!';"
        "document.querySelector('#secret-form').requestSubmit();",
        status=400,
    ),
    Page("members", lambda made: "/members/"),
    Page(
        "members-errors",
        lambda made: "/members/",
        before="document.querySelector('#id_username').value = 'nobody-by-that-name';"
        "document.querySelector('#invite-form').requestSubmit();",
        status=400,
    ),
    Page("tokens", lambda made: "/profile/tokens/"),
    Page("nodes", lambda made: "/nodes/"),
    Page("notification-settings", lambda made: "/notifications/"),
    Page("password", lambda made: "/password/"),
    Page("not-found", lambda made: "/workloads/doesnotexist/", status=404),
]


def _workloads(world: World) -> dict:
    """One workload in each state the pages can show without a cluster (the engine tests show the rest)."""
    made = {}
    for state in (State.QUEUED, State.RUNNING, State.SUCCEEDED, State.FAILED, State.CANCELLED):
        made[f"batch-{state.lower()}"] = make_workload(
            world,
            owner=world.manager,
            state=state,
            name=f"batch-{state.lower()}",
            exit_code=1 if state == State.FAILED else None,
        )
    for state in (State.RUNNING, State.CANCELLED):
        made[f"service-{state.lower()}"] = make_workload(
            world, owner=world.manager, state=state, name=f"service-{state.lower()}", kind=Kind.SERVICE, port=8888
        )
    make_workload(world, owner=world.teammate, state=State.RUNNING, name="a-teammates-rather-long-workload-name")
    token_create(user=world.manager, name="laptop-of-a-rather-long-name")  # the tokens page shows its table
    # The secrets page shows its table: a shared one and one of the manager's own.
    TeamSecret.objects.create(team=world.team, owner=world.manager, name="hf-token", k8s_name="s-hf", shared=True)
    TeamSecret.objects.create(team=world.team, owner=world.manager, name="a-rather-long-secret-name-of-maria",
                              k8s_name="s-maria")  # fmt: skip
    # The members page shows a history: a role changed by hand (the signal records it).
    teammate = world.team.memberships.get(user=world.teammate)
    teammate.role = "manager"
    teammate.save()
    return made


CHECK = """async (preload) => {
  const result = await axe.run(document, {resultTypes: ["violations"], preload: preload !== false});
  return {
    violations: result.violations
      .filter((v) => ["critical", "serious"].includes(v.impact))
      .map((v) => ({id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(" "))})),
    overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
    wide: Array.from(document.querySelectorAll("body *"))
      .filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
      .filter((e) => !e.closest(".table-wrap, pre"))
      .slice(0, 5).map((e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className ? "." + e.className : "")),
  };
}"""


def test_every_page_passes_axe_and_fits_a_phone(chromium, live_server, world):
    if not AXE.exists():
        pytest.skip("axe-core is not installed (`npm ci` installs it)")
    made = _workloads(world)
    axe = AXE.read_text()
    # With the portal's Content-Security-Policy on: a page that breaks it logs a console error and fails here
    # (the checker itself goes in through the DevTools protocol, which the policy does not govern).
    context = chromium.new_context(base_url=live_server.url)
    context.set_default_timeout(15_000)
    tab = context.new_page()
    console: list[str] = []
    tab.on("console", lambda message: message.type == "error" and console.append(message.text))
    failures: list[str] = []
    SCREENSHOTS.mkdir(exist_ok=True)
    for signed_in in (False, True):
        if signed_in:
            tab.goto("/login/")
            tab.get_by_label("Username").fill("maria")
            tab.get_by_label("Password").fill(PASSWORD)
            tab.get_by_role("button", name="Sign in").click()
            tab.wait_for_url("**/")
        for page in (p for p in PAGES if p.signed_in == signed_in):
            for width_name, (width, height) in WIDTHS.items():
                tab.set_viewport_size({"width": width, "height": height})
                console.clear()
                tab.goto(page.path(made))
                if page.before:
                    with tab.expect_navigation():
                        tab.evaluate(page.before)
                tab.wait_for_load_state("networkidle")
                tab.evaluate(axe)
                found = tab.evaluate(CHECK)
                label = f"{page.name} at {width} px"
                for v in found["violations"]:
                    failures.append(f"{label}: axe {v['impact']} {v['id']} on {v['nodes']}")
                if width_name == "phone" and found["overflow"] > 0:
                    failures.append(f"{label}: scrolls sideways by {found['overflow']} px ({found['wide']})")
                # Every page names its icon (no /favicon.ico 404) and loads without a console error.
                expected = f"status of {page.status} "
                failures += [f"{label}: console error {e}" for e in console if expected not in e]
                tab.screenshot(path=str(SCREENSHOTS / f"a11y_{page.name}_{width_name}.png"), full_page=True)
    context.close()
    assert not failures, "\n".join(failures)


# The proxy's own pages at /w/<uid>/ (served by proxy/, not the web): each with the status it answers.
PROXY_PAGES = [
    Page("proxy-starting", lambda made: f"/w/{made['service-pending'].uid}/", status=503),
    Page("proxy-ended", lambda made: f"/w/{made['service-cancelled'].uid}/", status=410),
    Page("proxy-timeout", lambda made: f"/w/{made['service-slow'].uid}/hang", status=504),
    Page("proxy-unreachable", lambda made: f"/w/{made['service-running'].uid}/", status=502),
    Page("proxy-not-found", lambda made: "/w/ffffffffffffffff/", status=404),
    Page("proxy-handoff", lambda made: "/w/_login?ticket=expired", status=403, signed_in=False),
]


def test_the_proxys_pages_pass_axe_and_fit_a_phone(chromium, live_server, world, settings):
    """Starting, ended, timeout, unreachable, not found: the proxy in front of the live portal (one origin,
    as `make run` serves it); the handoff page on a separate apps' origin, styled from the portal's."""
    if not AXE.exists():
        pytest.skip("axe-core is not installed (`npm ci` installs it)")
    settings.PROXY_STARTING_REFRESH_SECONDS = 600  # the starting page must hold still while it is checked
    settings.PROXY_RESPONSE_TIMEOUT = 1
    settings.PROXY_ACCESS_CACHE_SECONDS = 0
    made = _workloads(world)
    made["service-pending"] = make_workload(
        world, owner=world.manager, state=State.PENDING, name="service-pending", kind=Kind.SERVICE, port=8888
    )
    made["service-slow"] = make_workload(
        world, owner=world.manager, state=State.RUNNING, name="service-slow", kind=Kind.SERVICE, port=8888
    )
    slow = Backend().start()
    closed_port = _free_port()  # nothing listens there: the unreachable page
    pods = {made["service-slow"].k8s_name: ("127.0.0.1", slow.port)}
    proxy = ServiceProxy(
        portal_upstream=live_server.url,
        endpoints=lambda namespace, service: pods.get(service, ("127.0.0.1", closed_port)),
    )
    port = _free_port()
    server, thread = serve(proxy, port)
    origin = f"http://127.0.0.1:{port}"
    axe = AXE.read_text()
    context = chromium.new_context(base_url=origin)
    context.set_default_timeout(15_000)
    tab = context.new_page()
    console: list[str] = []
    tab.on("console", lambda message: message.type == "error" and console.append(message.text))
    failures: list[str] = []
    SCREENSHOTS.mkdir(exist_ok=True)
    try:
        tab.goto("/login/")
        tab.get_by_label("Username").fill("maria")
        tab.get_by_label("Password").fill(PASSWORD)
        tab.get_by_role("button", name="Sign in").click()
        tab.wait_for_url("**/")
        for page in PROXY_PAGES:
            if not page.signed_in:  # the handoff page lives on a separate apps' origin only
                settings.SITE_URL = live_server.url
                settings.PROXY_ORIGIN = origin
            for width_name, (width, height) in WIDTHS.items():
                tab.set_viewport_size({"width": width, "height": height})
                console.clear()
                tab.goto(page.path(made))
                tab.wait_for_load_state("networkidle")
                tab.evaluate(axe)
                # On the apps' origin axe would fetch the portal's style sheet itself (for its CSS rules) and
                # trip over CORS: a checker's request, not the page's (the page loads it as a style sheet).
                found = tab.evaluate(CHECK, page.signed_in)
                label = f"{page.name} at {width} px"
                if page.name == "proxy-starting" and not tab.get_by_role("button", name="Stop checking").is_visible():
                    failures.append(f"{label}: no way to stop the page from reloading itself")
                failures += [f"{label}: axe {v['impact']} {v['id']} on {v['nodes']}" for v in found["violations"]]
                if width_name == "phone" and found["overflow"] > 0:
                    failures.append(f"{label}: scrolls sideways by {found['overflow']} px ({found['wide']})")
                failures += [f"{label}: console error {e}" for e in console if f"status of {page.status} " not in e]
                if not tab.evaluate("() => getComputedStyle(document.body).fontFamily.includes('system-ui')"):
                    failures.append(f"{label}: the portal's style sheet did not load")
                tab.screenshot(path=str(SCREENSHOTS / f"a11y_{page.name}_{width_name}.png"), full_page=True)
    finally:
        context.close()
        server.should_exit = True
        thread.join(10)
        slow.stop()
    assert not failures, "\n".join(failures)


def test_the_checker_is_real(chromium, live_server, world):
    """The gate fails on a page that is wrong: an image without alt text and a box wider than a phone."""
    if not AXE.exists() or not Path(CHROMIUM).exists():
        pytest.skip("axe-core or chromium is not installed")
    context = chromium.new_context(viewport={"width": 375, "height": 812})
    tab = context.new_page()
    tab.set_content('<html lang="en"><title>t</title><main><img src="x.png"><div style="width:600px">wide</div></main>')
    tab.evaluate(AXE.read_text())
    found = tab.evaluate(CHECK)
    context.close()
    assert [v["id"] for v in found["violations"]] == ["image-alt"]
    assert found["overflow"] > 0
