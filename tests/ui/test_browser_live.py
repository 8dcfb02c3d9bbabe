"""Pages that follow what happens without a reload: the dashboard, the workload list, the logs panel."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from jobs.models import State, Workload
from tests.ui.conftest import make_workload, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_dashboard_and_list_show_a_finished_job_without_a_reload(page, world):
    workload = make_workload(world, state=State.RUNNING, name="finishes-soon")
    sign_in(page, "olivia")
    page.evaluate("window.__notReloaded = true")
    active = page.locator("#active-h").locator("xpath=..")
    expect(active).to_contain_text("finishes-soon")
    Workload.objects.filter(pk=workload.pk).update(state=State.SUCCEEDED, finished_at=timezone.now())
    expect(page.locator("#recent-h").locator("xpath=..")).to_contain_text("finishes-soon", timeout=12_000)
    expect(active).to_contain_text("Nothing running.")
    assert page.evaluate("window.__notReloaded") is True

    page.goto("/workloads/")
    page.evaluate("window.__notReloaded = true")
    make_workload(world, state=State.QUEUED, name="arrives-later")
    expect(page.locator("#workload-results")).to_contain_text("arrives-later", timeout=12_000)
    assert page.evaluate("window.__notReloaded") is True


def test_logs_panel_is_read_again_when_the_state_changes(page, world):
    workload = make_workload(world, state=State.RUNNING, name="log-reader")
    sign_in(page, "olivia")
    log_reads: list[str] = []
    page.on("request", lambda request: request.url.endswith("/logs/") and log_reads.append(request.url))
    page.goto(f"/workloads/{workload.uid}/")
    expect(page.locator("#logs")).not_to_contain_text("Loading logs", timeout=20_000)
    page.wait_for_timeout(2500)  # a poll of the live part that changes nothing reads nothing
    assert len(log_reads) == 1
    with page.expect_request(lambda request: request.url.endswith("/logs/"), timeout=15_000):
        Workload.objects.filter(pk=workload.pk).update(state=State.SUCCEEDED, finished_at=timezone.now())
    expect(page.locator("#live")).to_have_attribute("data-state", "SUCCEEDED")
    assert len(log_reads) == 2


STREAM = "event: line\ndata: {first}\n\nevent: line\ndata: {second}\n\n"


def test_a_running_workloads_log_is_followed_without_pressing_follow(page, world):
    """Issue 32: live lines came only after pressing Follow. A running workload's page follows its log from
    the start (the stream repeating the lines the page shows, then new ones); a finished one's does not."""
    running = make_workload(world, state=State.RUNNING, name="follows-itself")
    done = make_workload(world, state=State.SUCCEEDED, name="long-done")
    streams: list[str] = []

    def stream(route):
        streams.append(route.request.url)
        route.fulfill(
            status=200,
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
            body=STREAM.format(first="epoch 1 loss 0.9", second="epoch 2 loss 0.5"),
        )

    page.route("**/logs/stream/", stream)
    sign_in(page, "olivia")
    page.goto(f"/workloads/{running.uid}/")
    logs = page.locator("pre.logs")
    expect(logs).to_contain_text("epoch 1 loss 0.9\nepoch 2 loss 0.5")
    assert streams == [f"{page.url}logs/stream/"]
    page.goto(f"/workloads/{done.uid}/")
    expect(page.locator("#logs")).not_to_contain_text("Loading logs", timeout=20_000)
    page.wait_for_timeout(1000)
    assert len(streams) == 1  # nothing to follow
    expect(page.get_by_role("button", name="Follow")).to_have_attribute("aria-pressed", "false")


def test_a_workload_that_starts_running_is_followed_from_then_on(page, world):
    workload = make_workload(world, state=State.PENDING, name="starts-soon", started_at=None, node_name="")
    page.route(
        "**/logs/stream/",
        lambda route: route.fulfill(
            status=200, headers={"Content-Type": "text/event-stream"}, body=STREAM.format(first="hello", second="GPU")
        ),
    )
    sign_in(page, "olivia")
    page.goto(f"/workloads/{workload.uid}/")
    expect(page.locator("#logs")).not_to_contain_text("Loading logs", timeout=20_000)
    Workload.objects.filter(pk=workload.pk).update(state=State.RUNNING, started_at=timezone.now())
    expect(page.locator("pre.logs")).to_contain_text("hello\nGPU", timeout=15_000)


def test_the_gpu_card_is_read_again_when_the_state_changes(page, world):
    """Opened while it waited, the card said "It has not started yet" and kept saying so beside Succeeded."""
    # Three P100s against the team's quota of two: the session's engine (a real worker and tracker on this
    # database) keeps it queued. One GPU fitted, and the engine sometimes started it before the page asked.
    workload = make_workload(world, state=State.QUEUED, name="gpu-card", gpu_count=3)
    sign_in(page, "olivia")
    page.goto(f"/workloads/{workload.uid}/")
    expect(page.locator("#gpu-empty")).to_contain_text("It has not started yet")
    now = timezone.now()
    Workload.objects.filter(pk=workload.pk).update(
        state=State.SUCCEEDED, started_at=now - timedelta(seconds=20), finished_at=now, node_name="gpu-p100-1"
    )
    expect(page.locator("#live")).to_have_attribute("data-state", "SUCCEEDED", timeout=12_000)
    expect(page.locator("#gpu-empty")).to_contain_text("No GPU samples were recorded while it ran")
