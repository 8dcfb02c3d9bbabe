"""jobs.policy: every role against every action, in one table, plus the "get it or 404" lookup.

Each row of ROLES by ACTIONS is one expectation a person would notice (a button, a page, a 404); the
table is the specification the module docstring argues for.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.http import Http404

from jobs import policy
from jobs.models import Kind, State, TeamSecret, Workload
from tests.engine.factories import MembershipFactory
from tests.world import PEOPLE, make_user, world_build

ROLES = ["owner", "teammate", "manager", "outsider", "superuser", "anonymous"]

# action -> the roles allowed. "open" is a service the owner has not shared; "open_shared" one they have.
EXPECTED: dict[str, set[str]] = {
    "see": {"owner", "teammate", "manager", "superuser"},
    "cancel": {"owner", "manager", "superuser"},
    "set_priority": {"manager", "superuser"},
    "see_teammate_usage": {"manager", "superuser"},
    "see_own_usage": {"owner", "teammate", "manager", "superuser"},
    "open": {"owner"},
    "open_shared": {"owner", "teammate", "manager"},
    "share": {"owner"},
    "delete_secret": {"owner", "manager", "superuser"},  # the owner's stored secret (page and API)
    "see_members": {"owner", "teammate", "manager", "superuser"},  # the members page, read-only for members
    "manage_members": {"manager", "superuser"},  # invite, change a role, remove
}


@pytest.fixture
def people(db) -> dict:
    world = world_build(teams=("Vision", "Language"), people={**PEOPLE, "outsider": "oscar"})  # tests/world.py
    team, owner, gpu_type = world.team, world.owner, world.p100
    # Whose figures "another member's usage" asks for.
    colleague = MembershipFactory(user=make_user("carl"), team=team).user

    def service(shared: bool) -> Workload:
        return Workload.objects.create(
            team=team, owner=owner, name="nb", kind=Kind.SERVICE, image="docker.io/x:1", gpu_type=gpu_type,
            gpu_count=1, port=8888, time_limit_seconds=3600, state=State.RUNNING, shared_with_team=shared,
        )  # fmt: skip

    return {
        "team": team,
        "colleague": colleague,
        "private": service(False),
        "shared": service(True),
        "users": {
            **{role: world.people[role] for role in ("owner", "teammate", "manager", "outsider")},
            "superuser": world.admin,
            "anonymous": AnonymousUser(),
        },
    }


def _answer(action: str, user, people: dict) -> bool:
    workload, team = people["private"], people["team"]
    if action == "see":
        seen = policy.may_see(user, workload)
        listed = policy.visible_workloads(user).filter(id=workload.id).exists()
        correlated = policy.visible_workloads_correlated(user).filter(id=workload.id).exists()
        assert seen == listed == correlated, "the three forms of visibility disagree"
        return seen
    if action == "cancel":
        return policy.may_cancel(user, workload)
    if action == "set_priority":
        return policy.may_set_priority(user, team)
    if action == "see_teammate_usage":
        return policy.may_see_usage_of(user, team, people["colleague"].id)
    if action == "see_own_usage":
        return user.is_authenticated and policy.may_see_usage_of(user, team, user.id)
    if action == "open":
        return policy.may_open(user, workload)
    if action == "open_shared":
        return policy.may_open(user, people["shared"])
    if action == "share":
        return policy.may_share(user, workload)
    if action == "delete_secret":
        secret = TeamSecret(team=team, owner=workload.owner, name="hf", k8s_name="s-hf")
        return policy.may_delete_secret(user, secret)
    if action == "see_members":
        seen = policy.may_see_members(user, team)
        try:
            policy.membership_or_404(user, people["colleague"].memberships.get().id)
        except Http404:
            assert not seen, "membership_or_404 refused someone who may see the members"
        else:
            assert seen, "membership_or_404 gave a membership to someone who may not see the members"
        return seen
    if action == "manage_members":
        return policy.may_manage_members(user, team)
    raise AssertionError(action)


@pytest.mark.parametrize("action", sorted(EXPECTED))
@pytest.mark.parametrize("role", ROLES)
def test_role_action_table(people, role, action):
    assert _answer(action, people["users"][role], people) is (role in EXPECTED[action])


@pytest.mark.parametrize("role", ROLES)
def test_workload_or_404(people, role):
    user, uid = people["users"][role], people["private"].uid
    if role in EXPECTED["see"]:
        assert policy.workload_or_404(user, uid).id == people["private"].id
    else:
        with pytest.raises(Http404):
            policy.workload_or_404(user, uid)
    with pytest.raises(Http404):  # one that does not exist reads the same as one you may not see
        policy.workload_or_404(user, "0000000000")


def test_a_missing_membership_reads_like_one_you_may_not_see(people):
    with pytest.raises(Http404):
        policy.membership_or_404(people["users"]["manager"], 10**9)


def test_batch_jobs_have_no_door(people):
    batch = people["private"]
    batch.kind = Kind.BATCH
    batch.save()
    assert not policy.may_open(people["users"]["owner"], batch)


def test_owner_who_left_the_team_loses_the_door_and_the_cancel_button(people):
    owner = people["users"]["owner"]
    owner.memberships.all().delete()
    assert not policy.may_open(owner, people["private"])
    assert not policy.may_cancel(owner, people["private"])
    assert policy.usage_user_ids(people["users"]["manager"], people["team"]) is None
    with pytest.raises(Http404):
        policy.usage_user_ids(owner, people["team"])
