"""The top bar on a phone: a Menu button opens every section and the account links (issue 32: at 375 px
the sections were a strip cut at "Usa…", and the bar took about 250 px); on a laptop, the bar as it was."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from identity.models import Membership
from tests.ui.conftest import screenshot, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SECTIONS = ["Dashboard", "Launch", "Workloads", "Queue", "Usage", "Secrets", "Members", "Nodes"]


def _header_height(page) -> float:
    return page.locator("header.topbar").bounding_box()["height"]


def _in_view(page, link) -> bool:
    box = link.bounding_box()
    return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size["width"]


def test_on_a_phone_a_menu_button_opens_every_section(page, world):
    page.set_viewport_size({"width": 375, "height": 812})
    # A manager (Members is in the menu too) in two teams (the team picker is in the bar too).
    Membership.objects.create(user=world.manager, team=world.other_team)
    sign_in(page, "maria")
    page.goto("/usage/")
    screenshot(page, "menu_phone_closed")
    assert _header_height(page) < 100
    nav = page.get_by_role("navigation", name="Main")
    button = page.get_by_role("button", name="Menu")
    expect(button).to_be_visible()
    expect(button).to_have_attribute("aria-expanded", "false")
    expect(nav).to_be_hidden()

    # Keyboard: Tab to the button (after the skip link and the brand), Enter opens it.
    button.focus()
    page.keyboard.press("Enter")
    expect(button).to_have_attribute("aria-expanded", "true")
    for name in SECTIONS:
        link = nav.get_by_role("link", name=name, exact=True)
        expect(link).to_be_visible()
        assert _in_view(page, link), f"{name} is off screen"
    expect(nav.get_by_role("link", name="Usage", exact=True)).to_have_attribute("aria-current", "page")
    for name in ("API tokens", "Notifications"):
        expect(page.get_by_role("link", name=name)).to_be_visible()
    expect(page.get_by_label("Team you act for")).to_be_visible()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    screenshot(page, "menu_phone_open")
    # The next Tab goes into the menu; Escape closes it and gives focus back to the button.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('#site-menu') !== null")
    page.keyboard.press("Escape")
    expect(button).to_have_attribute("aria-expanded", "false")
    expect(button).to_be_focused()
    expect(nav).to_be_hidden()

    # A section from the menu: the page changes and the menu is closed again.
    button.click()
    nav.get_by_role("link", name="Nodes", exact=True).click()
    expect(page).to_have_url("/nodes/")
    expect(page.get_by_role("button", name="Menu")).to_have_attribute("aria-expanded", "false")
    assert _header_height(page) < 100


def test_on_a_laptop_the_sections_stay_in_the_bar(page, world):
    sign_in(page, "maria")
    page.goto("/usage/")
    expect(page.get_by_role("button", name="Menu")).to_be_hidden()
    nav = page.get_by_role("navigation", name="Main")
    for name in SECTIONS:
        expect(nav.get_by_role("link", name=name, exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    # One line: the brand, the sections and the account links side by side.
    assert _header_height(page) < 60
    brand = page.get_by_role("link", name="GPU Portal").bounding_box()
    sign_out = page.get_by_role("button", name="Sign out").bounding_box()
    assert abs(brand["y"] - sign_out["y"]) < 10
    screenshot(page, "menu_laptop")


def test_without_javascript_every_section_is_still_there(chromium, live_server, world):
    context = chromium.new_context(base_url=live_server.url, viewport={"width": 375, "height": 812},
                                   java_script_enabled=False)  # fmt: skip
    tab = context.new_page()
    sign_in(tab, "maria")
    tab.goto("/usage/")
    nav = tab.get_by_role("navigation", name="Main")
    for name in SECTIONS:
        link = nav.get_by_role("link", name=name, exact=True)
        expect(link).to_be_visible()
        assert _in_view(tab, link), f"{name} is off screen without JavaScript"
    context.close()
