"""End to end in the browser: launch the notebook, click Open, use the service through the portal's proxy.

Everything is real: the portal (live server) behind the service proxy on one origin (as `make run` serves
it), the workload engine, the local GPU cluster whose node simulator serves each service pod's port with a
small HTTP + WebSocket app on the pod's loopback IP, and the proxy finding that pod through the Service's
EndpointSlices with its own least-privilege identity (files/rbac-rules.yaml `proxy`).
"""

from __future__ import annotations

import re

import pytest
from kubernetes import config as k8s_config
from playwright.sync_api import expect

from jobs.kube import client as kube
from jobs.models import State
from jobs.services.cancel import workload_cancel
from proxy.app import ServiceProxy
from tests.proxy.conftest import _free_port, serve
from tests.ui.conftest import PASSWORD, screenshot, sign_in
from tests.ui.test_browser_engine import _engine_before_live_server, fill_launch  # noqa: F401 (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]

WS_EXCHANGE = """async (path) => {
  const url = location.origin.replace(/^http/, "ws") + path;
  return await new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.onopen = () => ws.send("hello through the portal");
    ws.onmessage = (event) => { resolve(String(event.data)); ws.close(1000); };
    ws.onerror = () => reject(new Error("websocket failed"));
    setTimeout(() => reject(new Error("no echo within 10 s")), 10000);
  });
}"""


@pytest.fixture(scope="module")
def proxy_api(portal_identity):
    """A Kubernetes client as the proxy's own service account, as the chart runs it: it reads services and
    EndpointSlices only in the team namespaces the provisioner bound it in (files/rbac-rules.yaml `proxy`)."""
    api = k8s_config.new_client_from_config(config_file=str(portal_identity.kubeconfigs["proxy"]))
    yield api
    api.close()


@pytest.fixture
def front(live_server, proxy_api, settings):
    """The proxy on its own port, passing everything outside /w/ to the live portal: one origin."""
    settings.PROXY_ACCESS_CACHE_SECONDS = 0  # sharing takes effect on the next request
    settings.PROXY_ENDPOINT_CACHE_SECONDS = 1
    app = ServiceProxy(
        portal_upstream=live_server.url,
        endpoints=lambda namespace, service: kube.ready_endpoint(namespace, service, api=proxy_api),
    )
    port = _free_port()
    server, thread = serve(app, port)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def lab(engine_or_skip):
    engine = engine_or_skip
    for user in (engine.owner, engine.teammate, engine.manager, engine.outsider):
        user.set_password(PASSWORD)
        user.save()
    return engine


def browser_tab(chromium, base: str):
    context = chromium.new_context(base_url=base, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    return context, context.new_page()


def test_open_the_notebook_share_it_and_see_it_end(chromium, front, lab):
    owner_context, page = browser_tab(chromium, front)
    sign_in(page, lab.owner.username)
    fill_launch(page, name="e2e-open", kind="service", port=8888)
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page.locator("#live")).to_have_attribute("data-state", "RUNNING", timeout=90_000)
    workload = lab.team.workloads.get(name="e2e-open")
    path = f"/w/{workload.uid}/"

    # Open: a new tab on the service's own page, under the portal's origin and prefix.
    with page.context.expect_page() as opened:
        page.get_by_role("link", name="Open", exact=True).click()
    service = opened.value
    expect(service.locator("#method")).to_have_text("GET", timeout=30_000)
    expect(service.locator("#path")).to_have_text(path)
    expect(service.locator("#base-url")).to_have_text(path)  # the app was told its prefix
    assert service.url == f"{front}{path}"
    assert service.evaluate(WS_EXCHANGE, f"{path}api/kernels/x/channels") == "hello through the portal"
    screenshot(service, "e2e_open_service_page")

    # A teammate is refused until the owner shares it, then gets in; an outsider never does.
    mate_context, mate = browser_tab(chromium, front)
    sign_in(mate, lab.teammate.username)
    refused = mate.goto(path)
    assert refused.status == 404
    expect(mate.locator("body")).to_contain_text("not been shared with your team")
    page.get_by_label("Shared with my team").check()
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("Your teammates can open it now.")
    allowed = mate.goto(path)
    assert allowed.status == 200
    expect(mate.locator("#path")).to_have_text(path)

    outsider_context, outsider = browser_tab(chromium, front)
    sign_in(outsider, lab.outsider.username)
    assert outsider.goto(path).status == 404
    expect(outsider.locator("body")).not_to_contain_text("shared")

    # Anonymous: to the sign-in page, and back to the service after signing in.
    anonymous_context, anonymous = browser_tab(chromium, front)
    anonymous.goto(path)
    expect(anonymous).to_have_url(re.compile(r"/login/\?next="))
    anonymous.get_by_label("Username").fill(lab.owner.username)
    anonymous.get_by_label("Password").fill(PASSWORD)
    anonymous.get_by_role("button", name="Sign in").click()
    expect(anonymous.locator("#path")).to_have_text(path)

    # Cancelled: the service's address says it ended, with its state and a link to its page.
    # (Cancelling from its page is test_browser_engine's; here it only has to end.)
    workload_cancel(workload=workload, by=lab.owner)
    lab.wait_for(workload, State.CANCELLED)
    ended = service.goto(path)
    assert ended.status == 410
    expect(service.locator("body")).to_contain_text("has ended")
    expect(service.locator("body")).to_contain_text("cancelled")
    service.get_by_role("link", name="Its page in the portal").click()
    expect(service).to_have_url(f"{front}/workloads/{workload.uid}/")
    screenshot(service, "e2e_open_service_ended")
    workload.refresh_from_db()
    assert workload.state == State.CANCELLED
    assert workload.last_activity_at is not None  # the proxied traffic was recorded
    for context in (owner_context, mate_context, outsider_context, anonymous_context):
        context.close()
