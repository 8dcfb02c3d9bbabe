"""Real JupyterLab behind Open (issue 35, item 4): the local JupyterLab catalog entry, launched in the
browser with 1 GPU of a real node's type, runs in containerd on a real node (tests/realnode_fixtures.py);
Open shows JupyterLab itself through the portal's proxy at /w/<uid>/, a notebook cell runs through the
kernel's WebSocket (proxied too) and shows its output, and the notebook, saved in the user's home
workspace (a PersistentVolume of the local cluster's class, hostPath, mounted by the real kubelet), is
still there after cancel and a new launch. No simulator page is involved: the node simulator serves only
pods on simulated nodes."""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from jobs.models import State
from jobs.services.cancel import workload_cancel
from tests.ui.conftest import PASSWORD, screenshot, sign_in
from tests.ui.test_browser_engine import _engine_before_live_server  # noqa: F401 (fixture)
from tests.ui.test_browser_open import browser_tab, front, proxy_api  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]


@pytest.fixture
def lab(real_engine, settings):
    settings.WORKSPACE_STORAGE_CLASS = "gpuportal-local"  # homes on: the local cluster's hostPath class
    real_engine.owner.set_password(PASSWORD)
    real_engine.owner.save()
    return real_engine


def launch_and_open(page, lab, name: str):
    """Launch the local JupyterLab entry with 1 real-p100 GPU, wait for it to run, press Open; returns the
    workload and the JupyterLab tab once the Lab UI has loaded."""
    page.goto("/launch/")
    page.get_by_label("Image", exact=True).select_option(label="JupyterLab (local)")
    page.get_by_label("Service").check()
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("GPU type").select_option("real-p100")
    page.get_by_label("GPUs", exact=True).fill("1")
    page.get_by_label("Time limit", exact=True).fill("10")
    page.get_by_label("Time limit unit").select_option("minutes")
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page.locator("#live")).to_have_attribute("data-state", "RUNNING", timeout=180_000)
    workload = lab.team.workloads.get(name=name)
    assert workload.node_name == "real-p100-1"
    with page.context.expect_page() as opened:
        page.get_by_role("link", name="Open", exact=True).click()
    jupyter = opened.value
    # The container runs before JupyterLab listens (the pod has no readiness probe): until it does, the
    # proxy's own page says so and asks for a reload, as a user would see it.
    deadline = time.monotonic() + 120
    while not jupyter.locator(".jp-Launcher").is_visible():
        assert time.monotonic() < deadline, "JupyterLab did not load within 120 s"
        if jupyter.get_by_role("heading", name=f"{name} cannot be reached").is_visible():
            jupyter.wait_for_timeout(2000)
            jupyter.reload(timeout=30_000)
        else:
            jupyter.wait_for_timeout(500)
    assert jupyter.url.startswith(f"{page.url.split('/workloads/')[0]}/w/{workload.uid}/")
    return workload, jupyter


def open_folder(jupyter, folder: str) -> None:
    jupyter.locator(".jp-DirListing-item", has_text=folder).dblclick()
    expect(jupyter.locator(".jp-BreadCrumbs")).to_contain_text(folder)


def test_open_shows_real_jupyterlab_runs_a_cell_and_keeps_the_saved_notebook(chromium, front, lab):  # noqa: F811
    context, page = browser_tab(chromium, front)
    sign_in(page, lab.owner.username)
    workload, jupyter = launch_and_open(page, lab, "real-lab")
    screenshot(jupyter, "real_jupyterlab_launcher")

    # In the home workspace's folder, a new notebook from the launcher; a cell run with Shift+Enter: code,
    # kernel and output over the kernel's WebSocket, through the proxy.
    home = lab.owner.username
    open_folder(jupyter, home)
    jupyter.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
    editor = jupyter.locator(".jp-Notebook .jp-Cell .cm-content").first
    expect(editor).to_be_visible(timeout=30_000)
    expect(jupyter.get_by_role("button", name="Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60_000)
    editor.fill("import os; print('gpus', os.environ['NVIDIA_VISIBLE_DEVICES'], 6 * 7)")
    expect(editor).to_contain_text("NVIDIA_VISIBLE_DEVICES")
    editor.press("Shift+Enter")
    output = jupyter.locator(".jp-OutputArea-output").first
    expect(output).to_contain_text("gpus GPU-", timeout=120_000)
    expect(output).to_contain_text(" 42")
    jupyter.get_by_role("button", name="Save and create checkpoint (Ctrl+S)").click()
    # JupyterLab 4 asks for a name on a new notebook's first save; the proposed one will do.
    jupyter.locator(".jp-Dialog").get_by_role("button", name="Rename and Save").click()
    # Saved: the tab loses its unsaved-changes mark once the contents API has the notebook.
    expect(jupyter.locator(".lm-TabBar-tab.jp-mod-dirty")).to_have_count(0, timeout=30_000)
    screenshot(jupyter, "real_jupyterlab_cell_output")

    workload_cancel(workload=workload, by=lab.owner)
    lab.wait_for(workload, State.CANCELLED)

    # A new launch, on a new pod: the notebook and its output are in the home folder still.
    again, jupyter2 = launch_and_open(page, lab, "real-lab-again")
    assert again.uid != workload.uid
    open_folder(jupyter2, home)
    jupyter2.locator(".jp-DirListing-item", has_text="Untitled.ipynb").dblclick()
    expect(jupyter2.locator(".jp-OutputArea-output").first).to_contain_text(" 42", timeout=30_000)
    screenshot(jupyter2, "real_jupyterlab_notebook_kept")
    workload_cancel(workload=again, by=lab.owner)
    lab.wait_for(again, State.CANCELLED)
    context.close()
