"""The Terminal tab on a running service's page (issue 39): xterm.js in the browser, a WebSocket through the
portal's proxy, and the proxy's own SSH login into the pod's sshd (proxy/terminal.py). The dev-environment
entry runs on a real node (tests/realnode_fixtures.py); a command typed in the page runs in the container
and its output shows in the page."""

from __future__ import annotations

import base64

import pytest
from kubernetes import client as k8s
from playwright.sync_api import expect

from jobs.kube.ssh_objects import KEYS_FILE, keys_secret_name
from jobs.models import State
from jobs.services.cancel import workload_cancel
from jobs.services.ssh_access import terminal_public_key
from localcluster import images
from tests.ui.conftest import PASSWORD, screenshot, sign_in
from tests.ui.test_browser_engine import _engine_before_live_server  # noqa: F401 (fixture)
from tests.ui.test_browser_open import browser_tab, front, proxy_api  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]


@pytest.fixture(scope="module")
def devenv_on_real_nodes(real_nodes):
    path = images.ensure(["devenv"])["devenv"]
    for spec in real_nodes.specs:
        real_nodes.import_image(spec, path)
    real_nodes.wait_until_listed()  # the portal refuses images its nodes do not list
    return real_nodes


@pytest.fixture
def lab(real_engine, devenv_on_real_nodes, settings):
    settings.WORKSPACE_STORAGE_CLASS = "gpuportal-local"
    real_engine.owner.set_password(PASSWORD)
    real_engine.owner.save()
    return real_engine


def test_the_terminal_tab_runs_a_command_and_shows_its_output(chromium, front, lab, kube_api):  # noqa: F811
    context, page = browser_tab(chromium, front)
    problems: list[str] = []  # CSP refusals (xterm's run-time <style>s carry the page's nonce) and page errors
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    sign_in(page, lab.owner.username)
    page.goto("/launch/")
    page.get_by_label("Image", exact=True).select_option(label="Dev environment: SSH + JupyterLab (local)")
    page.get_by_label("Service").check()
    page.get_by_label("Name", exact=True).fill("devbox-term")
    page.get_by_label("GPU type").select_option("real-p100")
    page.get_by_label("GPUs", exact=True).fill("1")
    page.get_by_label("Time limit", exact=True).fill("10")
    page.get_by_label("Time limit unit").select_option("minutes")
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page.locator("#live")).to_have_attribute("data-state", "RUNNING", timeout=240_000)
    workload = lab.team.workloads.get(name="devbox-term")
    expect(page.locator("#ssh-line")).to_have_text(f"gpuportal ssh {workload.uid}")

    # The key the engine put in the pod's authorized_keys is the one this proxy logs in with: both derive
    # it from the SECRET_KEY every portal process shares.
    keys = k8s.CoreV1Api(kube_api).read_namespaced_secret(keys_secret_name(workload.uid), workload.namespace).data
    assert terminal_public_key(workload.uid) in base64.b64decode(keys[KEYS_FILE]).decode()

    page.reload()  # the Terminal card shows on a running service's page
    # sshd starts beside JupyterLab: until it listens, a try ends at once; the page says so.
    terminal = page.locator("#terminal-screen")
    for _ in range(30):
        page.get_by_role("button", name="Open terminal").click()
        expect(page.locator("#terminal-status")).not_to_have_text("Connecting…", timeout=60_000)
        if "Connected" in page.locator("#terminal-status").inner_text():
            break
        page.wait_for_timeout(3000)
        page.reload()
    expect(page.locator("#terminal-status")).to_have_text("Connected.")
    terminal.click()
    page.keyboard.type("echo answer=$((6*7)) gpus=$NVIDIA_VISIBLE_DEVICES\n")
    rows = page.locator("#terminal-screen .xterm-rows")
    expect(rows).to_contain_text("answer=42", timeout=30_000)
    expect(rows).to_contain_text("gpus=GPU-")
    screenshot(page, "real_terminal_tab")
    assert problems == []
    workload_cancel(workload=workload, by=lab.owner)
    lab.wait_for(workload, State.CANCELLED)
    context.close()
