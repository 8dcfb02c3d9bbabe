"""Memberships moved from jobs to identity in the code only: a database made by the code from before the
move migrates without renaming or recreating the table, and keeps every membership and its content type."""

from __future__ import annotations

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from identity.models import Membership, Role
from tests.engine.factories import TeamFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_THE_MOVE = [("jobs", "0021_usage_recent_end_index"), ("identity", "0003_membership_change_by")]
THE_MOVE = [("jobs", "0022_membership_moves_to_identity"), ("identity", "0004_membership_from_jobs")]


def _migrate(targets) -> object:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_a_database_made_before_the_move_keeps_its_memberships_in_the_same_table():
    team, user = TeamFactory(slug="movers"), UserFactory(username="mover")
    old_apps = _migrate(BEFORE_THE_MOVE)
    OldMembership = old_apps.get_model("jobs", "Membership")
    assert OldMembership._meta.db_table == "jobs_membership"
    OldMembership.objects.create(user_id=user.id, team_id=team.id, role="manager")
    jobs_type = ContentType.objects.get_or_create(app_label="jobs", model="membership")[0]
    ContentType.objects.filter(app_label="identity", model="membership").delete()
    tables_before = set(connection.introspection.table_names())

    _migrate(THE_MOVE)  # the move alone: later migrations may make tables of their own
    assert set(connection.introspection.table_names()) == tables_before  # nothing renamed, made or dropped
    executor = MigrationExecutor(connection)
    _migrate(executor.loader.graph.leaf_nodes())

    tables_after = set(connection.introspection.table_names())
    # Nothing renamed or dropped, and no second memberships table (later migrations may add other tables).
    assert tables_before <= tables_after
    assert "identity_membership" not in tables_after
    assert Membership._meta.db_table == "jobs_membership"
    moved = Membership.objects.get(user=user, team=team)
    assert moved.role == Role.MANAGER
    assert ContentType.objects.get_for_model(Membership).id == jobs_type.id  # admin history still points here
