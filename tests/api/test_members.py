"""/api/v1/teams/<slug>/members/: the members page's rules over REST. Members read the list, the team's
managers (and superusers) add by username, change roles and remove; outsiders get 404; a team always
keeps a manager; provider-kept teams are read-only; every change is recorded with who made it."""

from __future__ import annotations

import pytest

from identity.members import ALREADY_MEMBER, KEPT_BY_PROVIDER, LAST_MANAGER, NO_SUCH_USER
from identity.models import Membership, MembershipChange, Role, TeamSource
from tests.engine.factories import UserFactory

MEMBERS = "/api/v1/teams/vision/members/"
PEOPLE = ["owner", "teammate", "manager", "outsider", "admin", None]  # None: no credentials


def roles(world) -> dict[str, str]:
    return dict(Membership.objects.filter(team=world.team).values_list("user__username", "role"))


@pytest.fixture
def changes(world):
    """The team's membership changes recorded since the world was built (building it records its own)."""
    built = MembershipChange.objects.order_by("-id").values_list("id", flat=True).first() or 0
    return lambda: list(MembershipChange.objects.filter(team=world.team, id__gt=built).order_by("id"))


BEFORE = {"olivia": Role.MEMBER, "tom": Role.MEMBER, "maria": Role.MANAGER}


@pytest.mark.parametrize(
    ("who", "status"),
    [("owner", 200), ("teammate", 200), ("manager", 200), ("admin", 200), ("outsider", 404), (None, 401)],
)
def test_members_see_the_list_outsiders_do_not(world, who, status):
    response = world.client(who).get(MEMBERS)
    assert response.status_code == status, response.content
    if status != 200:
        assert set(response.json()) == {"error"}
        return
    listed = response.json()
    assert [(m["username"], m["role"]) for m in listed] == [
        ("maria", "manager"), ("olivia", "member"), ("tom", "member"),
    ]  # fmt: skip
    assert all(m["joined_at"] for m in listed)
    one = world.client(who).get(f"{MEMBERS}maria/")
    assert one.status_code == 200
    assert one.json()["role"] == "manager"


# Who may do what: a plain member may not (403: they see the team), an outsider learns nothing (404).
ACTIONS = {
    "add": ("post", MEMBERS, {"username": "nina", "role": "manager"}, 201, {**BEFORE, "nina": Role.MANAGER}),
    "role": ("patch", f"{MEMBERS}tom/", {"role": "manager"}, 200, {**BEFORE, "tom": Role.MANAGER}),
    "remove": ("delete", f"{MEMBERS}tom/", None, 204, {"olivia": Role.MEMBER, "maria": Role.MANAGER}),
}
REFUSED = {"owner": 403, "teammate": 403, "outsider": 404, None: 401}


@pytest.mark.parametrize("action", list(ACTIONS))
@pytest.mark.parametrize("who", PEOPLE)
def test_every_role_times_every_change(world, changes, who, action):
    UserFactory(username="nina")
    method, url, body, allowed, after = ACTIONS[action]
    response = getattr(world.client(who), method)(url, body, format="json")
    if who in REFUSED:
        assert response.status_code == REFUSED[who], response.content
        assert response.json()["error"]["status"] == REFUSED[who]
        assert roles(world) == BEFORE
        assert changes() == []
        return
    assert response.status_code == allowed, response.content
    assert roles(world) == after
    [change] = changes()
    assert change.changed_by == getattr(world, who)
    username = "nina" if action == "add" else "tom"
    assert (change.username, change.old_role, change.new_role) == (
        username, BEFORE.get(username, ""), after.get(username, ""),
    )  # fmt: skip
    if action != "remove":
        assert response.json()["username"] == username
        assert response.json()["role"] == after[username]


def test_a_team_keeps_its_last_manager(world):
    manager = world.client("manager")
    demoted = manager.patch(f"{MEMBERS}maria/", {"role": "member"}, format="json")
    assert demoted.status_code == 409
    error = demoted.json()["error"]
    assert error["code"] == "last_manager"
    assert error["fields"] == {"role": [LAST_MANAGER.format(team="Vision")]}
    gone = manager.delete(f"{MEMBERS}maria/")
    assert (gone.status_code, gone.json()["error"]["code"]) == (409, "last_manager")
    assert roles(world) == BEFORE
    assert manager.patch(f"{MEMBERS}tom/", {"role": "manager"}, format="json").status_code == 200
    assert manager.delete(f"{MEMBERS}maria/").status_code == 204  # someone else manages now
    assert roles(world) == {"olivia": Role.MEMBER, "tom": Role.MANAGER}
    assert world.client("manager").get(MEMBERS).status_code == 404  # no longer in the team
    assert world.client("admin").patch(f"{MEMBERS}tom/", {"role": "member"}, format="json").status_code == 409


@pytest.mark.parametrize(
    ("method", "url", "body", "status", "code", "field"),
    [
        ("post", MEMBERS, [], 400, "invalid", None),
        ("post", MEMBERS, {"role": "member"}, 400, "invalid", "username"),
        ("post", MEMBERS, {"username": "  "}, 400, "invalid", "username"),
        ("post", MEMBERS, {"username": 7}, 400, "invalid", "username"),
        ("post", MEMBERS, {"username": ["nina"]}, 400, "invalid", "username"),
        ("post", MEMBERS, {"username": "ni\x00na"}, 400, "invalid", "username"),
        ("post", MEMBERS, {"username": "nina", "role": "owner"}, 400, "invalid", "role"),
        ("post", MEMBERS, {"username": "nina", "role": None}, 400, "invalid", "role"),
        ("post", MEMBERS, {"username": "nina", "team": "language"}, 400, "invalid", "team"),
        ("post", MEMBERS, {"username": "nobody-here"}, 400, "invalid", "username"),
        ("post", MEMBERS, {"username": "tom"}, 409, "already_member", "username"),
        ("post", MEMBERS, {"username": "oscar", "role": "manager", "x": 1}, 400, "invalid", "x"),
        ("patch", f"{MEMBERS}tom/", {}, 400, "invalid", "role"),
        ("patch", f"{MEMBERS}tom/", {"role": "admin"}, 400, "invalid", "role"),
        ("patch", f"{MEMBERS}tom/", {"role": True}, 400, "invalid", "role"),
        ("patch", f"{MEMBERS}tom/", "manager", 400, "invalid", None),
        ("patch", f"{MEMBERS}nobody-here/", {"role": "manager"}, 404, "not_found", None),
        ("delete", f"{MEMBERS}oscar/", None, 404, "not_found", None),  # a user, but not in this team
        ("put", f"{MEMBERS}tom/", {"role": "manager"}, 405, "method_not_allowed", None),
    ],
)
def test_bad_input_is_refused_by_field_and_changes_nothing(world, changes, method, url, body, status, code, field):
    UserFactory(username="nina")
    response = getattr(world.client("manager"), method)(url, body, format="json")
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert (error["status"], error["code"]) == (status, code)
    if field is not None:
        assert field in error["fields"], error
    elif status == 400:
        assert error["message"] == "Send a JSON object."
    assert roles(world) == BEFORE
    assert changes() == []


def test_the_refusals_say_what_the_page_says(world):
    manager = world.client("manager")
    nobody = manager.post(MEMBERS, {"username": "nobody-here"}, format="json").json()["error"]
    assert nobody["fields"] == {"username": [NO_SUCH_USER.format(username="nobody-here")]}
    again = manager.post(MEMBERS, {"username": "tom"}, format="json").json()["error"]
    assert again["fields"] == {"username": [ALREADY_MEMBER.format(username="tom", team="Vision")]}


def test_a_team_the_provider_keeps_is_read_only(world, changes):
    TeamSource.objects.create(team=world.team, managed_by=TeamSource.ManagedBy.PROVIDER)
    UserFactory(username="nina")
    for who in ("manager", "admin"):
        client = world.client(who)
        assert client.get(MEMBERS).status_code == 200
        for response in (
            client.post(MEMBERS, {"username": "nina"}, format="json"),
            client.patch(f"{MEMBERS}tom/", {"role": "manager"}, format="json"),
            client.delete(f"{MEMBERS}tom/"),
        ):
            assert response.status_code == 409, response.content
            error = response.json()["error"]
            assert (error["code"], error["message"]) == ("kept_by_provider", KEPT_BY_PROVIDER)
    assert roles(world) == BEFORE
    assert changes() == []


def test_every_change_is_listed_with_who_made_it(world):
    UserFactory(username="nina")
    manager = world.client("manager")
    assert manager.post(MEMBERS, {"username": "nina"}, format="json").status_code == 201
    assert world.client("admin").patch(f"{MEMBERS}nina/", {"role": "manager"}, format="json").status_code == 200
    assert manager.delete(f"{MEMBERS}tom/").status_code == 204
    listed = world.client("owner").get(f"{MEMBERS}changes/")  # members read the history too
    assert listed.status_code == 200
    assert [(c["username"], c["old_role"], c["new_role"], c["changed_by"], c["source"]) for c in listed.json()][:3] == [
        ("tom", "member", "", "maria", "portal"),
        ("nina", "member", "manager", "ada", "portal"),
        ("nina", "", "member", "maria", "portal"),
    ]
    assert world.client("outsider").get(f"{MEMBERS}changes/").status_code == 404


def test_the_schema_documents_the_members_endpoints(client, db):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    members = schema["paths"]["/api/v1/teams/{slug}/members/"]
    member = schema["paths"]["/api/v1/teams/{slug}/members/{username}/"]
    assert set(members) >= {"get", "post"}
    assert set(member) >= {"get", "patch", "delete"}
    assert {"201", "400", "403", "404", "409"} <= set(members["post"]["responses"])
    assert {"200", "400", "403", "404", "409"} <= set(member["patch"]["responses"])
    assert "/api/v1/teams/{slug}/members/changes/" in schema["paths"]
