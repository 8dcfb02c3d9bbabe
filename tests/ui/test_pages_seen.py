"""What a new user saw and was misled by (issues 14 and 19): each page now says what is true."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.models import State, Workload
from tests.ui.conftest import make_workload

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("url", ["/profile/tokens/", "/nodes/", "/password/", "/"])
def test_the_top_bar_names_the_team_on_every_page(login, world, url):
    html = login(world.owner).get(url).content.decode()
    assert '<span class="team-name" title="Your team">Lab</span>' in html


def test_nodes_without_an_agent_share_one_card_that_says_what_an_agent_is(login, world):
    html = login(world.owner).get(reverse("nodes")).content.decode()
    assert html.count("without an agent") == 1
    assert "2 nodes without an agent" in html
    assert "agent.enabled=true" in html
    assert "No agent has reported for this node yet" not in html


def test_gpu_card_has_one_heading_and_says_what_is_true_for_the_state(login, world):
    client = login(world.owner)
    queued = make_workload(world, state=State.QUEUED)
    finished = make_workload(world, state=State.SUCCEEDED)
    running = make_workload(world, state=State.RUNNING)
    pages = {
        w: client.get(reverse("workload_detail", args=[w.uid])).content.decode() for w in (queued, finished, running)
    }
    for html in pages.values():
        card = html[html.index('class="card tm-chart"') :]
        card = card[: card.index("</section>")]
        assert len(re.findall(r"<h2", card)) == 1
    assert "has not started yet" in pages[queued]
    assert "No GPU samples were recorded while it ran" in pages[finished]
    assert "yet" not in pages[finished][pages[finished].index('id="gpu-empty"') :][:120]
    assert "appear within a minute" in pages[running]


def test_usage_page_says_which_figure_counts_whom(login, world):
    make_workload(world, owner=world.teammate, state=State.SUCCEEDED)
    html = login(world.owner).get(reverse("usage")).content.decode()
    assert "Lab, everyone" in html
    assert "Yours only" in html
    assert "Team total" not in html


def test_budget_and_what_is_left_on_the_dashboard_and_the_launch_form(login, world):
    world.team.monthly_gpu_hour_budget = Decimal("100")
    world.team.save()
    client = login(world.owner)
    for page in ("dashboard", "launch"):
        html = client.get(reverse(page)).content.decode()
        assert re.search(r"Monthly budget:</strong> [\d.]+ of 100.00 weighted GPU-hours left this month", html), page


def test_no_budget_no_budget_line(login, world):
    assert 'id="budget"' not in login(world.owner).get(reverse("dashboard")).content.decode()


def test_launch_form_leaves_the_time_limit_to_the_one_default(login, world, settings):
    settings.PORTAL_DEFAULT_TIME_LIMIT_BATCH = 24 * 3600
    settings.PORTAL_DEFAULT_TIME_LIMIT_SERVICE = 8 * 3600
    html = login(world.owner).get(reverse("launch")).content.decode()
    field = re.search(r'<input[^>]*name="time_limit"[^>]*>', html).group(0)
    assert "value=" not in field  # empty: the submission gets the API's and the CLI's default
    assert "24 hours for a batch job, 8 hours for a service" in html


def test_launching_with_the_time_limit_left_empty_gets_the_default(login, world, settings):
    settings.PORTAL_DEFAULT_TIME_LIMIT_BATCH = 24 * 3600
    response = login(world.owner).post(
        reverse("launch"),
        {
            "catalog_image": str(world.trainer.id),
            "kind": "batch",
            "name": "default-limit",
            "gpu_type": "p100",
            "gpu_count": "1",
            "time_limit": "",
            "time_limit_unit": "hours",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Workload.objects.get(name="default-limit").time_limit_seconds == 24 * 3600


def test_dashboard_and_list_refresh_themselves(login, world):
    client = login(world.owner)
    dashboard = client.get(reverse("dashboard")).content.decode()
    assert re.search(r'id="dashboard-live" hx-get="/" hx-trigger="every 5s" hx-select="#dashboard-live"', dashboard)
    listing = client.get(reverse("workload_list")).content.decode()
    assert 'hx-select="#workload-results"' in listing


def test_my_share_after_a_short_job_does_not_read_as_zero(login, world):
    """A 20-second job on the queue page read "You used 0.0 GPU-hours" beside a full bar, while its own page
    said 0.0056; the queue page now writes GPU-hours as the workload page does."""
    now = timezone.now()
    make_workload(
        world, state=State.SUCCEEDED, started_at=now - timedelta(seconds=96), finished_at=now - timedelta(seconds=60)
    )
    html = login(world.owner).get(reverse("queue")).content.decode()
    mine = html[html.index('id="my-share"') :][:200]
    assert "<strong>0.0100 GPU-hours</strong>" in mine  # 36 s on one GPU
    assert ">0.0<" not in html
