"""Real services behind Open (issue 35, item 4), on real nodes (tests/realnode_fixtures.py): no simulator
page is involved (the node simulator serves only pods on simulated nodes).

- JupyterLab: the local catalog entry, launched in the browser with 1 GPU of a real node's type, runs in
  containerd on a real node; Open shows its "starting" page until the pod is Ready (readiness probe), never
  "cannot be reached", then JupyterLab itself through the portal's proxy at /w/<uid>/; a notebook cell runs
  through the kernel's WebSocket (proxied too) and shows its output, and the notebook, saved in the user's
  home workspace (a PersistentVolume of the local cluster's class, hostPath, mounted by the real kubelet), is
  still there after cancel and a new launch.
- TensorBoard: a batch job writes event files into the team workspace; the TensorBoard entry opened through
  the proxy lists that run.
"""

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
    # The container runs before JupyterLab listens: until its readiness probe answers, the pod is not Ready,
    # the workload says it is starting, and the proxy shows its "starting" page, which opens JupyterLab by
    # itself once it answers. "Cannot be reached" is never shown on the way.
    deadline = time.monotonic() + 120
    while not jupyter.locator(".jp-Launcher").is_visible():
        assert time.monotonic() < deadline, "JupyterLab did not load within 120 s"
        assert not jupyter.get_by_role("heading", name=f"{name} cannot be reached").is_visible(), jupyter.url
        jupyter.wait_for_timeout(200)
    assert jupyter.url.startswith(f"{page.url.split('/workloads/')[0]}/w/{workload.uid}/")
    # Its timeline: running but starting up (not answering yet), then running once the probe answered.
    lab.wait_until(workload, lambda w: w.reason == "Running", "running and answering", timeout=30)
    reasons = list(workload.events.filter(to_state=State.RUNNING).values_list("reason", flat=True))
    assert reasons.index("Starting") < reasons.index("Running"), reasons
    return workload, jupyter


def test_open_shows_real_jupyterlab_runs_a_cell_and_keeps_the_saved_notebook(chromium, front, lab):  # noqa: F811
    context, page = browser_tab(chromium, front)
    sign_in(page, lab.owner.username)
    workload, jupyter = launch_and_open(page, lab, "real-lab")
    screenshot(jupyter, "real_jupyterlab_launcher")

    # Open lands in the home workspace, where files outlive the pod: a new notebook from the launcher, there
    # with no folder to find first; a cell run with Shift+Enter: code, kernel and output over the kernel's
    # WebSocket, through the proxy. The kernel works in that folder too.
    home = f"/home/{lab.owner.username}"
    jupyter.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
    editor = jupyter.locator(".jp-Notebook .jp-Cell .cm-content").first
    expect(editor).to_be_visible(timeout=30_000)
    expect(jupyter.get_by_role("button", name="Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60_000)
    editor.fill("import os; print('gpus', os.environ['NVIDIA_VISIBLE_DEVICES'], 6 * 7, 'in', os.getcwd())")
    expect(editor).to_contain_text("NVIDIA_VISIBLE_DEVICES")
    editor.press("Shift+Enter")
    output = jupyter.locator(".jp-OutputArea-output").first
    expect(output).to_contain_text("gpus GPU-", timeout=120_000)
    expect(output).to_contain_text(f" 42 in {home}")
    jupyter.get_by_role("button", name="Save and create checkpoint (Ctrl+S)").click()
    # JupyterLab 4 asks for a name on a new notebook's first save; the proposed one will do.
    jupyter.locator(".jp-Dialog").get_by_role("button", name="Rename and Save").click()
    # Saved: the tab loses its unsaved-changes mark once the contents API has the notebook.
    expect(jupyter.locator(".lm-TabBar-tab.jp-mod-dirty")).to_have_count(0, timeout=30_000)
    screenshot(jupyter, "real_jupyterlab_cell_output")

    workload_cancel(workload=workload, by=lab.owner)
    lab.wait_for(workload, State.CANCELLED)

    # A new launch, on a new pod: the notebook and its output are where Open lands, still.
    again, jupyter2 = launch_and_open(page, lab, "real-lab-again")
    assert again.uid != workload.uid
    jupyter2.locator(".jp-DirListing-item", has_text="Untitled.ipynb").dblclick()
    expect(jupyter2.locator(".jp-OutputArea-output").first).to_contain_text(" 42", timeout=30_000)
    screenshot(jupyter2, "real_jupyterlab_notebook_kept")
    workload_cancel(workload=again, by=lab.owner)
    lab.wait_for(again, State.CANCELLED)
    context.close()


WRITE_EVENTS = """
import os, time
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
logdir = "/team/tensorboard/mnist-run"
writer = EventFileWriter(logdir)
for step in range(20):
    value = summary_pb2.Summary.Value(tag="loss", simple_value=1.0 / (step + 1))
    writer.add_event(event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value])))
writer.close()
print("event files:", sorted(os.listdir(logdir)), flush=True)
"""


def test_a_batch_jobs_tensorboard_run_shows_in_tensorboard_opened_through_the_proxy(chromium, front, lab):  # noqa: F811
    """A batch job (REST, the TensorBoard image's Python) writes event files into the team workspace; the
    TensorBoard catalog entry, launched in the browser and opened at /w/<uid>/, lists that run and its
    scalar, read by TensorBoard from the same workspace on the other real node's kind of GPU."""
    from rest_framework.test import APIClient

    from localcluster.images import IMAGES

    api = APIClient()
    api.force_authenticate(lab.owner)
    response = api.post(
        "/api/v1/workloads/",
        {"name": "mnist", "image": IMAGES["tensorboard"], "gpu_type": "real-k2", "gpu_count": 1,
         "command": ["python", "-c", WRITE_EVENTS]},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.content
    job = lab.team.workloads.get(uid=response.json()["uid"])
    lab.wait_for(job, State.SUCCEEDED, State.FAILED, timeout=240)
    assert job.state == State.SUCCEEDED, job.message
    assert [m["mount_path"] for m in job.mounts][-1] == "/team"

    context, page = browser_tab(chromium, front)
    sign_in(page, lab.owner.username)
    page.goto("/launch/")
    page.get_by_label("Image", exact=True).select_option(label="TensorBoard (local)")
    page.get_by_label("Service").check()
    page.get_by_label("Name", exact=True).fill("board")
    page.get_by_label("GPU type").select_option("real-p100")
    page.get_by_label("GPUs", exact=True).fill("1")
    page.get_by_label("Arguments").fill("--logdir /team/tensorboard --bind_all")
    page.get_by_label("Time limit", exact=True).fill("10")
    page.get_by_label("Time limit unit").select_option("minutes")
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page.locator("#live")).to_have_attribute("data-state", "RUNNING", timeout=180_000)
    board = lab.team.workloads.get(name="board")
    with page.context.expect_page() as opened:
        page.get_by_role("link", name="Open", exact=True).click()
    tensorboard = opened.value
    # The "starting" page first, if TensorBoard does not listen yet; it opens TensorBoard by itself.
    expect(tensorboard.get_by_text("mnist-run").first).to_be_visible(timeout=120_000)
    assert tensorboard.url.startswith(f"{front}/w/{board.uid}/")
    expect(tensorboard.get_by_text("loss").first).to_be_visible(timeout=60_000)
    screenshot(tensorboard, "real_tensorboard_run")
    workload_cancel(workload=board, by=lab.owner)
    lab.wait_for(board, State.CANCELLED)
    context.close()
