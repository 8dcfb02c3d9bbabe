"""End-to-end in the browser: the portal, the workload engine (real Celery worker and tracker) and the
local GPU cluster. A simulated batch pod runs SIM_RUN_SECONDS and exits with SIM_EXIT_CODE."""

from __future__ import annotations

import contextlib
import re

import pytest
from playwright.sync_api import expect

from jobs.models import Quota, State
from jobs.services.cancel import workload_cancel
from tests.ui.conftest import PASSWORD, screenshot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]

IMAGE = "nvidia/cuda:12.2.0-base-ubuntu22.04"

# Records every state the detail page's live part shows, and proves the page was never reloaded.
WATCH_STATES = """() => {
  window.__notReloaded = true;
  const live = () => document.getElementById("live");
  window.__states = [live().dataset.state];
  new MutationObserver(() => {
    const state = live() && live().dataset.state;
    if (state && window.__states[window.__states.length - 1] !== state) window.__states.push(state);
  }).observe(document.querySelector("main"), {subtree: true, childList: true, attributes: true});
}"""


@pytest.fixture(autouse=True, scope="session")
def _engine_before_live_server(request):
    """Start the engine's session fixtures before any test-scoped settings change.

    pytest-django's live_server wraps settings for each test (it appends to ALLOWED_HOSTS); session
    fixtures that set settings while that wrapper is on lose their values when the first test ends.
    """
    with contextlib.suppress(pytest.FixtureLookupError):
        request.getfixturevalue("engine_processes")


@pytest.fixture
def lab(engine_or_skip):
    engine = engine_or_skip
    for user in (engine.owner, engine.manager, engine.outsider):
        user.set_password(PASSWORD)
        user.save()
    return engine


def fill_launch(page, *, name: str, kind: str = "batch", gpu_type: str = "p100", count: int = 1, env=None, port=None):
    page.goto("/launch/")
    page.get_by_label("Image", exact=True).select_option(label="Custom image…")
    page.get_by_label("Custom image").fill(IMAGE)
    page.get_by_label("Service" if kind == "service" else "Batch job").check()
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("GPU type").select_option(gpu_type)
    page.get_by_label("GPUs", exact=True).fill(str(count))
    for i, (key, value) in enumerate((env or {}).items()):
        if i:
            page.get_by_role("button", name="Add variable").click()
        page.get_by_label("Variable name").nth(i).fill(key)
        page.get_by_label("Value").nth(i).fill(value)
    if port is not None:
        page.get_by_label("Port").fill(str(port))
    page.get_by_label("Time limit", exact=True).fill("10")
    page.get_by_label("Time limit unit").select_option("minutes")


def test_batch_job_runs_to_success_live_with_its_logs(page, lab):
    sign_in(page, lab.owner.username)
    fill_launch(page, name="e2e-batch", env={"SIM_RUN_SECONDS": "8"})
    expect(page.locator("#outlook")).to_contain_text("Fits your team's quota")
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page.get_by_role("heading", name=re.compile("e2e-batch"))).to_be_visible()
    page.evaluate(WATCH_STATES)
    screenshot(page, "e2e_batch_submitted")

    # The log is followed as soon as it runs, nothing to press: lines arrive over server-sent events.
    expect(page.locator("#live")).to_have_attribute("data-state", "RUNNING", timeout=60_000)
    expect(page.locator("#live .facts")).to_contain_text("gpu-p100-")
    expect(page.get_by_role("button", name="Stop following")).to_have_attribute("aria-pressed", "true")
    expect(page.locator("pre.logs")).to_contain_text("[simulated] running:", timeout=15_000)
    screenshot(page, "e2e_batch_running")

    expect(page.locator("#live")).to_have_attribute("data-state", "SUCCEEDED", timeout=60_000)
    states = page.evaluate("window.__states")
    assert states[0] in (State.QUEUED, State.SUBMITTING, State.PENDING), states
    assert State.RUNNING in states
    assert states[-1] == State.SUCCEEDED
    assert page.evaluate("window.__notReloaded") is True
    timeline = page.locator(".timeline")
    expect(timeline.locator('[data-state="RUNNING"]')).to_have_count(1)
    expect(timeline.locator('[data-state="SUCCEEDED"]')).to_have_count(1)
    expect(page.locator("#gpu-hours")).not_to_have_text("0.00")

    expect(page.locator("#logs-status")).to_contain_text("ended", timeout=15_000)
    page.get_by_role("button", name="Refresh").click()
    expect(page.locator("pre.logs")).to_contain_text("container exited with code 0")
    screenshot(page, "e2e_batch_succeeded")


def test_service_runs_shows_its_address_and_is_cancelled(page, lab):
    sign_in(page, lab.owner.username)
    fill_launch(page, name="e2e-notebook", kind="service", port=8888)
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page.locator("#live")).to_have_attribute("data-state", "RUNNING", timeout=60_000)
    expect(page.locator("#service-address")).to_have_text(re.compile(r"^[a-z0-9-]+\.[a-z0-9-]+\.svc:8888$"))
    screenshot(page, "e2e_service_running")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("link", name="Cancel…").click()
    expect(page.get_by_role("status")).to_contain_text("was cancelled")
    expect(page.locator("#live")).to_have_attribute("data-state", "CANCELLED")
    workload = lab.team.workloads.get(name="e2e-notebook")
    assert workload.state == State.CANCELLED
    screenshot(page, "e2e_service_cancelled")


def test_exhausted_quota_shows_the_queue_position_then_starts(page, lab):
    Quota.objects.filter(team=lab.team, gpu_type__slug="p100").update(max_gpus=1)
    holder = lab.submit(name="holds-the-gpu", kind="service", port=8888)
    lab.wait_for(holder, State.RUNNING)

    sign_in(page, lab.owner.username)
    fill_launch(page, name="e2e-waits", env={"SIM_RUN_SECONDS": "3"})
    expect(page.locator("#outlook")).to_contain_text("This will wait for quota.")
    expect(page.locator("#outlook")).to_contain_text("about #1 in the queue")
    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("#1 in the queue")
    expect(page.locator("#state-badge")).to_contain_text("Queued #1")
    expect(page.locator(".why")).to_contain_text("The team uses 1 of 1 GPU")
    page.evaluate(WATCH_STATES)
    screenshot(page, "e2e_quota_queued")

    # The GPU comes back: the queued job is admitted and runs, and the page follows without a reload.
    workload_cancel(workload=holder, by=lab.manager)
    expect(page.locator("#live")).to_have_attribute("data-state", "SUCCEEDED", timeout=60_000)
    assert page.evaluate("window.__notReloaded") is True
    screenshot(page, "e2e_quota_admitted")


def test_usage_chart_shows_the_finished_jobs_gpu_hours(page, lab):
    workload = lab.submit(name="counted", env={"SIM_RUN_SECONDS": "3"}, gpu_count=2)
    workload = lab.wait_for(workload, State.SUCCEEDED)
    expected = workload.gpu_seconds() / 3600
    assert expected > 0

    sign_in(page, lab.owner.username)
    page.goto("/usage/")
    expect(page.locator("#usage-chart")).to_be_visible()
    page.locator("#usage-chart").scroll_into_view_if_needed()  # Chart.js comes when the chart is near the screen
    page.wait_for_function("() => !!document.getElementById('usage-chart').chart")
    charted = page.evaluate(
        "() => document.getElementById('usage-chart').chart.data.datasets"
        ".reduce((sum, d) => sum + d.data.reduce((a, b) => a + b, 0), 0)"
    )
    assert charted == pytest.approx(expected, abs=1e-4)
    labels = page.evaluate("() => document.getElementById('usage-chart').chart.data.datasets.map(d => d.label)")
    assert labels == [workload.gpu_type.display_name]
    expect(page.locator("#by-type")).to_contain_text(workload.gpu_type.display_name)
    expect(page.locator("#team-total")).to_have_text(f"{expected:.4f}")
    screenshot(page, "e2e_usage_chart")

    # An outsider cannot open the job.
    page.get_by_role("button", name="Sign out").click()
    sign_in(page, lab.outsider.username)
    assert page.goto(f"/workloads/{workload.uid}/").status == 404
