"""Every page for the owner, a teammate and an outsider; sign-in, team choice and password change."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from identity.models import Membership, Role
from jobs.models import State
from tests.ui.conftest import PASSWORD, make_user, make_workload

pytestmark = pytest.mark.django_db

PAGES = ["dashboard", "launch", "workload_list", "usage", "password_change"]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_needs_sign_in(client, world, page):
    response = client.get(reverse(page))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("who", ["owner", "teammate", "manager", "outsider"])
def test_every_page_renders_for_everyone_in_a_team(login, world, page, who):
    response = login(getattr(world, who)).get(reverse(page))
    assert response.status_code == 200
    assert b"<main" in response.content


def test_sign_in_with_password_lands_on_the_dashboard(client, world):
    response = client.post(reverse("login"), {"username": "olivia", "password": PASSWORD}, follow=True)
    assert response.redirect_chain[-1][0] == reverse("dashboard")
    assert "Lab's GPU quota" in response.content.decode()


def test_wrong_password_says_so(client, world):
    response = client.post(reverse("login"), {"username": "olivia", "password": "nope"})
    assert response.status_code == 200
    assert "didn't match" in response.content.decode()


def test_password_change(login, world):
    client = login(world.owner)
    response = client.post(
        reverse("password_change"),
        {"old_password": PASSWORD, "new_password1": "a-new-long-passphrase", "new_password2": "a-new-long-passphrase"},
    )
    assert response.status_code == 302
    world.owner.refresh_from_db()
    assert world.owner.check_password("a-new-long-passphrase")


def test_password_change_errors_name_the_field(login, world):
    response = login(world.owner).post(
        reverse("password_change"), {"old_password": "wrong", "new_password1": "x", "new_password2": "y"}
    )
    assert response.status_code == 200
    assert 'id="id_old_password_error"' in response.content.decode()


def test_someone_in_no_team_is_told_how_to_get_one(login, world):
    response = login(make_user("newcomer")).get(reverse("dashboard"))
    assert response.status_code == 403
    assert "not in a team yet" in response.content.decode()


def test_a_user_in_several_teams_picks_the_team(login, world):
    Membership.objects.create(user=world.owner, team=world.other_team, role=Role.MANAGER)
    client = login(world.owner)
    page = client.get(reverse("dashboard")).content.decode()
    assert 'id="team-picker"' in page
    assert "Lab's GPU quota" in page  # first team by name is the default

    response = client.post(reverse("team_switch"), {"team": world.other_team.id, "next": reverse("usage")})
    assert response.status_code == 302
    assert response["Location"] == reverse("usage")
    assert "Other's GPU quota" in client.get(reverse("dashboard")).content.decode()


def test_switching_to_a_team_one_is_not_in_is_refused(login, world):
    client = login(world.owner)
    response = client.post(reverse("team_switch"), {"team": world.other_team.id, "next": "https://evil.example/"})
    assert response["Location"] == reverse("dashboard")
    assert "Lab's GPU quota" in client.get(reverse("dashboard")).content.decode()


def test_dashboard_shows_my_workloads_quota_bars_and_free_gpus(login, world):
    running = make_workload(world, state=State.RUNNING, gpu_count=1)
    queued = make_workload(world, state=State.QUEUED, gpu_count=2)
    done = make_workload(world, state=State.SUCCEEDED)
    teammates = make_workload(world, owner=world.teammate, state=State.RUNNING)
    page = login(world.owner).get(reverse("dashboard")).content.decode()
    assert running.name in page
    assert queued.name in page
    assert done.name in page
    assert teammates.name not in page
    assert "2 of 2 GPUs in use, 2 waiting" in page  # mine and the teammate's; queued; limit
    assert 'data-state="QUEUED"' in page
    assert "Queued #1" in page
    # Cluster: the p100 node has 4 allocatable, 1 in use.
    assert "<td>Tesla P100</td><td><strong>3</strong></td><td>4</td>" in page


def test_two_workloads_of_one_name_are_told_apart_by_their_short_uid(login, world):
    """Issue 32: two workloads may share a name (a re-run, a second notebook) and looked alike on the
    dashboard. Names may repeat; each row, Open button, heading and tab title carries the uid's start."""
    first, second = (
        make_workload(world, state=State.RUNNING, name="notebook", kind="service", port=8888) for _ in range(2)
    )
    client = login(world.owner)
    page = client.get(reverse("dashboard")).content.decode()
    for workload in (first, second):
        short = workload.uid[:8]
        assert f'aria-label="Open notebook {short}"' in page
        assert f'<span class="muted mono uid" title="{workload.uid}">{short}</span>' in page
    detail = client.get(reverse("workload_detail", args=[first.uid])).content.decode()
    assert f"<title>notebook {first.uid[:8]} · GPU Portal</title>" in detail
    assert re.search(rf"<h1>notebook <span[^>]*>{first.uid[:8]}</span>", detail)


def test_dashboard_empty_states(login, world):
    page = login(world.owner).get(reverse("dashboard")).content.decode()
    assert "Nothing running" in page
    assert "Finished workloads will show up here" in page
