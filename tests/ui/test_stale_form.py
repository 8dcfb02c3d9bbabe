"""A form sent after its page went stale: signed in again in another tab (a new CSRF secret), or with
no CSRF cookie at all. The user sees the portal's own page with a way back, never Django's raw
"CSRF verification failed", and a form whose page predates the new sign-in still goes through."""

from __future__ import annotations

import pytest
from django.test import Client
from playwright.sync_api import expect

from jobs.models import Workload
from tests.ui.conftest import PASSWORD, make_workload, screenshot, sign_in

pytestmark = [pytest.mark.django_db]


def test_a_form_without_its_csrf_cookie_gets_the_portals_page_with_a_way_back(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.owner)
    response = client.post("/launch/", {"name": "lost"}, HTTP_REFERER="http://testserver/launch/")
    assert response.status_code == 403
    body = response.content.decode()
    assert "CSRF verification failed" not in body
    assert "<h1>This form has expired</h1>" in body
    assert 'href="/launch/"' in body  # back to the form it came from
    assert "Sign out" in body  # the portal's own page, signed in as they are
    assert not Workload.objects.exists()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_launch_typed_before_signing_in_again_in_another_tab_still_goes_through(chromium, live_server, world):
    context = chromium.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    sign_in(page, "olivia")
    page.goto("/launch/")
    page.get_by_label("Name", exact=True).fill("typed-before")
    page.get_by_label("Image", exact=True).select_option(label="Python 3.12")

    other = context.new_page()  # the second tab: signs out and in again, which gives a new CSRF secret
    other.goto("/")
    other.get_by_role("button", name="Sign out").click()
    other.goto("/login/")
    other.get_by_label("Username").fill("olivia")
    other.get_by_label("Password").fill(PASSWORD)
    other.get_by_role("button", name="Sign in").click()
    expect(other.get_by_role("heading", name="Dashboard")).to_be_visible()

    page.get_by_role("button", name="Launch", exact=True).click()
    expect(page.get_by_role("heading", name="typed-before")).to_be_visible()
    assert list(Workload.objects.values_list("name", flat=True)) == ["typed-before"]
    context.close()


def _launch_fields(name: str) -> dict:
    return {
        "name": name,
        "kind": "batch",
        "catalog_image": "",
        "image": "docker.io/library/python:3.12",
        "gpu_type": "p100",
        "gpu_count": "2",
        "time_limit": "3",
        "time_limit_unit": "hours",
        "command": "python train.py",
        "args": "--epochs 5",
        "env_name": ["LEARNING_RATE", "BATCH"],
        "env_value": ["0.01", "64"],
    }


def test_launch_sent_after_the_session_ended_is_back_in_the_form_after_signing_in(client, world):
    response = client.post("/launch/", _launch_fields("typed-while-out"))
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/launch/"
    assert not Workload.objects.exists()

    response = client.post(
        "/login/?next=/launch/", {"username": "olivia", "password": PASSWORD}, REMOTE_ADDR="198.51.100.7", follow=True
    )
    assert response.redirect_chain[-1][0] == "/launch/"
    page = response.content.decode()
    assert "You were signed out before Launch" in page
    assert 'value="typed-while-out"' in page
    assert 'value="python train.py"' in page
    assert 'value="LEARNING_RATE"' in page
    assert 'value="64"' in page
    assert not Workload.objects.exists()  # nothing is sent behind the user's back: they press Launch again
    # Once shown, the draft is gone: the next Launch form is a fresh one.
    assert "typed-while-out" not in client.get("/launch/").content.decode()


@pytest.mark.parametrize("part", ["/launch/outlook/?gpu_type=p100&gpu_count=2", "live/", "logs/", "events/"])
def test_a_box_refreshed_after_the_session_ended_says_so_instead_of_holding_the_sign_in_page(client, world, part):
    workload = make_workload(world, name="running-one")
    page = "/launch/" if part.startswith("/") else f"/workloads/{workload.uid}/"
    url = part if part.startswith("/") else page + part
    response = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL=f"http://testserver{page}")
    assert response.status_code == 200  # htmx swaps it in where the box was
    body = response.content.decode()
    assert "<form" not in body  # not the whole sign-in page inside the box
    assert "You are signed out" in body
    assert f'href="/login/?next={page}"' in body  # back to this page, with what was typed on it still there


def _poll(page, path_part: str):
    """Wait for the page's next htmx poll of `path_part` to come back (no clock in the assertion)."""
    with page.expect_response(lambda response: path_part in response.url):
        pass


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_workload_page_left_open_after_the_session_ended_keeps_its_header_beside_the_notice(
    chromium, live_server, world
):
    workload = make_workload(world, name="still-running")
    context = chromium.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    sign_in(page, "olivia")
    page.goto(f"/workloads/{workload.uid}/")
    heading = page.get_by_role("heading", name="still-running")
    expect(heading).to_be_visible()

    context.clear_cookies()  # the session ended (expired, or signed out elsewhere)
    notice = page.get_by_role("alert").filter(has_text="You are signed out")
    expect(notice).to_be_visible()
    # What the workload was doing when the page last knew it is still there, beside the notice.
    expect(heading).to_be_visible()
    expect(page.locator("#state-badge")).to_contain_text("Running")
    expect(page.locator("#live")).to_contain_text("Node")
    _poll(page, "/live/")
    _poll(page, "/events/")  # the page's other box that refreshes itself
    _poll(page, "/live/")
    expect(notice).to_have_count(1)  # one notice for the page, not one per box or one more every poll
    assert page.locator("[data-signed-out-notice] + #live").count() == 1  # just above what went stale
    screenshot(page, "signed-out-workload-header")

    other = context.new_page()  # signing in again in another tab, as the notice's link does
    sign_in(other, "olivia")
    expect(notice).to_have_count(0)  # the next poll is up to date again
    expect(heading).to_be_visible()
    context.close()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_dashboard_left_open_after_the_session_ended_keeps_what_it_showed(chromium, live_server, world):
    make_workload(world, name="on-the-dashboard")
    context = chromium.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    sign_in(page, "olivia")
    expect(page.locator("#dashboard-live")).to_contain_text("on-the-dashboard")

    context.clear_cookies()
    with page.expect_response(lambda response: response.request.headers.get("hx-request") == "true"):
        pass  # the dashboard's next refresh (every 5 s)
    expect(page.get_by_role("alert").filter(has_text="You are signed out")).to_be_visible()
    expect(page.locator("#dashboard-live")).to_contain_text("on-the-dashboard")
    context.close()


def test_the_signed_out_answer_is_marked_so_the_page_keeps_the_box_beside_it(client, world):
    workload = make_workload(world, name="marked")
    page = f"/workloads/{workload.uid}/"
    response = client.get(page + "live/", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL=f"http://testserver{page}")
    assert response["GPUPortal-Signed-Out"] == "1"  # portal.js puts the line beside the box, not in its place
