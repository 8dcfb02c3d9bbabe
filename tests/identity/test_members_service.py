"""identity.members against real PostgreSQL: two managers demoting each other at the same moment leave the
team with one manager, never none, and nobody sees a 500."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from identity.members import LAST_MANAGER, MembersInvalid, member_role_set
from identity.models import Membership, Role
from tests.engine.factories import MembershipFactory, TeamFactory, UserFactory


@pytest.mark.django_db(transaction=True)
def test_two_managers_demoting_each_other_leave_one_manager():
    if connection.vendor != "postgresql":
        pytest.skip("row locks are proven on PostgreSQL")
    team = TeamFactory(slug="pair")
    anna, ben = UserFactory(username="anna-m"), UserFactory(username="ben-m")
    of_anna = MembershipFactory(user=anna, team=team, role=Role.MANAGER)
    of_ben = MembershipFactory(user=ben, team=team, role=Role.MANAGER)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def demote(membership: Membership, by) -> None:
        barrier.wait()
        try:
            member_role_set(membership=membership, role=Role.MEMBER, by=by)
            outcomes.append("demoted")
        except MembersInvalid as exc:
            outcomes.append(exc.message)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=demote, args=(of_ben, anna)),
        threading.Thread(target=demote, args=(of_anna, ben)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == sorted(["demoted", LAST_MANAGER.format(team=team.name)])
    assert Membership.objects.filter(team=team, role=Role.MANAGER).count() == 1
