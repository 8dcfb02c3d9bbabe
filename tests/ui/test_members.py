"""The members page: a team's managers invite by username, change roles and remove members; every change
shows in the page's history with who made it. Plain members read, outsiders get 404, and teams the
identity provider keeps stay read-only with the reason on the page."""

from __future__ import annotations

from html import unescape

import pytest

from identity.members import ALREADY_MEMBER, KEPT_BY_PROVIDER, LAST_MANAGER, NO_SUCH_USER
from identity.models import Membership, MembershipChange, Role, TeamSource
from tests.ui.conftest import make_user

pytestmark = pytest.mark.django_db


def _membership(world, user) -> Membership:
    return Membership.objects.get(team=world.team, user=user)


def _roles(world) -> dict[str, str]:
    return dict(Membership.objects.filter(team=world.team).values_list("user__username", "role"))


def test_a_manager_sees_the_members_and_the_forms(world, login):
    page = login(world.manager).get("/members/")
    assert page.status_code == 200
    html = page.content.decode()
    for name in ("olivia", "tom", "maria"):
        assert f'data-username="{name}"' in html
    assert 'data-username="xavier"' not in html  # another team's member
    assert 'id="invite-form"' in html
    assert "Remove" in html
    assert "/members/" in login(world.manager).get("/").content.decode()  # linked from the dashboard
    assert 'href="/members/"' in page.content.decode().split("</nav>")[0]  # and from the top bar


def test_a_manager_invites_an_existing_user_and_the_change_is_recorded(world, login):
    make_user("nina")
    client = login(world.manager)
    response = client.post("/members/", {"username": "nina", "role": Role.MEMBER})
    assert response.status_code == 302
    assert _roles(world)["nina"] == Role.MEMBER
    change = MembershipChange.objects.get(team=world.team, username="nina")
    assert (change.old_role, change.new_role, change.changed_by_id) == ("", Role.MEMBER, world.manager.id)
    page = client.get("/members/").content.decode()
    history = page.split('id="member-history"')[1]
    assert "nina" in history
    assert "added as member" in history
    assert "maria" in history


@pytest.mark.parametrize(
    ("username", "message"),
    [
        ("nobody-here", NO_SUCH_USER.format(username="nobody-here")),
        ("tom", ALREADY_MEMBER.format(username="tom", team="Lab")),
    ],
)
def test_unknown_and_duplicate_usernames_are_field_errors(world, login, username, message):
    before = _roles(world)
    response = login(world.manager).post("/members/", {"username": username, "role": Role.MEMBER})
    assert response.status_code == 400
    assert message in response.content.decode()
    assert response.context["form"].errors["username"] == [message]
    assert _roles(world) == before


def test_a_bad_role_is_a_field_error(world, login):
    make_user("nina")
    response = login(world.manager).post("/members/", {"username": "nina", "role": "owner"})
    assert response.status_code == 400
    assert "role" in response.context["form"].errors
    assert "nina" not in _roles(world)


def test_a_manager_changes_a_role_and_the_old_and_new_are_shown(world, login):
    client = login(world.manager)
    response = client.post(f"/members/{_membership(world, world.teammate).id}/role/", {"role": Role.MANAGER})
    assert response.status_code == 302
    assert _roles(world)["tom"] == Role.MANAGER
    change = MembershipChange.objects.filter(team=world.team, username="tom").first()
    assert (change.old_role, change.new_role, change.changed_by_name) == (Role.MEMBER, Role.MANAGER, "maria")
    assert "member → manager" in client.get("/members/").content.decode()


def test_the_last_manager_can_neither_step_down_nor_be_removed(world, login):
    client = login(world.manager)
    mine = _membership(world, world.manager)
    response = client.post(f"/members/{mine.id}/role/", {"role": Role.MEMBER}, follow=True)
    assert LAST_MANAGER.format(team="Lab") in response.content.decode()
    response = client.post(f"/members/{mine.id}/remove/", follow=True)
    assert LAST_MANAGER.format(team="Lab") in response.content.decode()
    assert _roles(world)["maria"] == Role.MANAGER


def test_a_manager_may_leave_once_someone_else_manages(world, login):
    client = login(world.manager)
    client.post(f"/members/{_membership(world, world.teammate).id}/role/", {"role": Role.MANAGER})
    response = client.post(f"/members/{_membership(world, world.manager).id}/remove/")
    assert response.status_code == 302
    assert response.url == "/"
    assert "maria" not in _roles(world)
    change = MembershipChange.objects.filter(team=world.team, username="maria").first()
    assert (change.old_role, change.new_role, change.changed_by_name) == (Role.MANAGER, "", "maria")


def test_a_manager_removes_a_member(world, login):
    client = login(world.manager)
    assert client.post(f"/members/{_membership(world, world.teammate).id}/remove/").status_code == 302
    assert "tom" not in _roles(world)
    assert "removed (was member)" in client.get("/members/").content.decode()


def test_a_plain_member_reads_the_list_and_can_change_nothing(world, login):
    client = login(world.teammate)
    page = client.get("/members/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-username="maria"' in html
    assert 'id="invite-form"' not in html
    assert "Remove" not in html
    assert 'href="/members/"' not in html.split("</nav>")[0]  # the top bar links managers only
    make_user("nina")
    assert client.post("/members/", {"username": "nina", "role": Role.MANAGER}).status_code == 404
    owner = _membership(world, world.owner)
    assert client.post(f"/members/{owner.id}/role/", {"role": Role.MANAGER}).status_code == 404
    assert client.post(f"/members/{owner.id}/remove/").status_code == 404
    assert _roles(world) == {"olivia": Role.MEMBER, "tom": Role.MEMBER, "maria": Role.MANAGER}


def test_an_outsider_gets_404_for_another_teams_members(world, login):
    client = login(world.outsider)
    html = client.get("/members/").content.decode()  # their own team's page: nobody from Lab
    assert "olivia" not in html
    assert "maria" not in html
    owner = _membership(world, world.owner)
    assert client.post(f"/members/{owner.id}/role/", {"role": Role.MANAGER}).status_code == 404
    assert client.post(f"/members/{owner.id}/remove/").status_code == 404
    assert _roles(world)["olivia"] == Role.MEMBER


def test_a_manager_of_one_team_cannot_manage_another_they_only_belong_to(world, login):
    Membership.objects.create(user=world.manager, team=world.other_team, role=Role.MEMBER)
    theirs = Membership.objects.get(team=world.other_team, user=world.outsider)
    client = login(world.manager)
    assert client.post(f"/members/{theirs.id}/remove/").status_code == 404
    assert Membership.objects.filter(id=theirs.id).exists()


def test_anonymous_visitors_are_sent_to_sign_in(client, world):
    response = client.get("/members/")
    assert response.status_code == 302
    assert "/login/" in response.url
    assert client.post(f"/members/{_membership(world, world.owner).id}/remove/").status_code == 302
    assert "olivia" in _roles(world)


def test_a_superuser_in_no_team_is_sent_to_admin_for_members(world, login):
    admin = world.admin
    client = login(admin)
    assert client.get("/members/").status_code == 403  # the "you are in no team" page
    assert client.post(f"/members/{_membership(world, world.owner).id}/remove/").status_code == 403
    assert "olivia" in _roles(world)


def test_a_team_the_provider_keeps_is_read_only_and_says_why(world, login):
    TeamSource.objects.create(team=world.team, managed_by=TeamSource.ManagedBy.PROVIDER)
    client = login(world.manager)
    html = client.get("/members/").content.decode()
    assert 'id="kept-by-provider"' in html
    assert "identity provider keeps" in html
    assert 'id="invite-form"' not in html
    assert "Remove" not in html
    make_user("nina")
    response = client.post("/members/", {"username": "nina", "role": Role.MEMBER})
    assert response.status_code == 400
    assert KEPT_BY_PROVIDER in unescape(response.content.decode())
    response = client.post(f"/members/{_membership(world, world.teammate).id}/remove/", follow=True)
    assert KEPT_BY_PROVIDER in unescape(response.content.decode())
    assert _roles(world) == {"olivia": Role.MEMBER, "tom": Role.MEMBER, "maria": Role.MANAGER}


def test_changes_made_in_admin_name_the_admin(world, client):
    admin = world.admin
    client.force_login(admin)
    memberships = list(Membership.objects.filter(team=world.team).order_by("id"))
    form = {
        "name": "Lab", "slug": "lab", "fair_share": "", "fair_share_half_life_hours": world.team.fair_share_half_life_hours,
        "default_retry_limit": "3",
        "memberships-TOTAL_FORMS": str(len(memberships)), "memberships-INITIAL_FORMS": str(len(memberships)),
    }  # fmt: skip
    for i, m in enumerate(memberships):
        role = Role.MANAGER if m.user_id == world.teammate.id else m.role
        form |= {f"memberships-{i}-id": m.id, f"memberships-{i}-team": world.team.id,
                 f"memberships-{i}-user": m.user_id, f"memberships-{i}-role": role}  # fmt: skip
    for prefix in ("quotas", "quota_changes"):
        form |= {f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0"}
    response = client.post(f"/admin/jobs/team/{world.team.id}/change/", form)
    assert response.status_code == 302  # saved (a form error would answer 200)
    change = MembershipChange.objects.filter(team=world.team, username="tom").first()
    assert change is not None
    assert change.changed_by_name == "ada"


ROLE_SHOWN_IN_FULL = """s => {
  const style = getComputedStyle(s);
  const text = document.createElement("canvas").getContext("2d");
  text.font = style.font;
  const room = s.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 16;  // the arrow
  return text.measureText(s.selectedOptions[0].text).width <= room;
}"""


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_on_a_phone_a_manager_reads_each_role_and_reaches_remove_without_scrolling_sideways(page, world):
    from playwright.sync_api import expect

    from tests.ui.conftest import screenshot, sign_in

    page.set_viewport_size({"width": 390, "height": 800})
    sign_in(page, "maria")
    page.goto("/members/")
    width = page.evaluate("document.documentElement.clientWidth")
    table = page.get_by_role("table", name=f"Members of {world.team.name} and their roles")
    assert table.evaluate("t => t.closest('.table-wrap').scrollWidth - t.closest('.table-wrap').clientWidth") <= 0
    for name in ("maria", "olivia", "tom"):
        role = page.get_by_label(f"Role of {name}", exact=True)
        assert role.evaluate(ROLE_SHOWN_IN_FULL), f"{name}'s role is cut short"
        remove = page.get_by_role("button", name=f"Remove {name} from {world.team.name}")
        expect(remove).to_be_in_viewport()
        box = remove.bounding_box()
        assert box is not None
        assert box["x"] + box["width"] <= width, f"Remove {name} is off screen"
    screenshot(page, "members_phone")


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_remove_and_delete_ask_first_and_a_no_keeps_the_member_and_the_secret(page, world):
    """One tap on Remove (a member) or Delete (a secret, whose value is never shown again) did it at once."""
    from playwright.sync_api import expect

    from jobs.models import TeamSecret
    from tests.ui.conftest import sign_in

    TeamSecret.objects.create(team=world.team, owner=world.manager, name="hf-token", k8s_name="s-hf", shared=True)
    sign_in(page, "maria")
    asked: list[str] = []
    yes = {"answer": False}

    def answer(dialog) -> None:
        asked.append(dialog.message)
        dialog.accept() if yes["answer"] else dialog.dismiss()

    page.on("dialog", answer)
    page.goto("/members/")
    page.get_by_role("button", name=f"Remove olivia from {world.team.name}").click()
    assert asked, "Remove asked nothing"
    assert "olivia" in asked[-1]
    page.goto("/members/")  # nothing was sent: olivia is still listed
    expect(page.get_by_label("Role of olivia", exact=True)).to_be_visible()
    assert _roles(world)["olivia"] == Role.MEMBER

    page.goto("/secrets/")
    page.get_by_role("button", name="Delete secret hf-token").click()
    assert "hf-token" in asked[-1]
    assert TeamSecret.objects.filter(name="hf-token").exists()

    yes["answer"] = True  # and a yes does it
    page.goto("/members/")
    page.get_by_role("button", name=f"Remove olivia from {world.team.name}").click()
    expect(page.get_by_text("olivia is no longer a member")).to_be_visible()
    assert "olivia" not in _roles(world)
