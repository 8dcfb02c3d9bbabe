"""Rows read and written with fixed SQL on the submission path (`jobs.sql`) are what the ORM would read and
store, and the team a submission names is found by the same rules `api.access.resolve_team` applies."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from api.access import resolve_team, resolve_team_to_submit
from api.errors import Invalid
from api.models import ApiToken
from api.tokens import token_authenticate, token_create, token_revoke
from jobs import sql as jobs_sql
from jobs.models import Team, Workload
from jobs.services.submission import intake_facts
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def _fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def test_a_team_read_by_fixed_sql_equals_the_orms():
    team = TeamFactory(slug="lab", name="Lab", monthly_gpu_hour_budget=Decimal("120.50"), user_max_queued=7)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {jobs_sql.select_list(Team, 't')} FROM jobs_team t WHERE t.id = %s", [team.id])  # noqa: S608
        row = cursor.fetchone()
    assert len(row) == jobs_sql.width(Team)
    read = jobs_sql.instance(Team, row)
    assert _fields(read) == _fields(Team.objects.get(id=team.id))
    assert read.monthly_gpu_hour_budget == Decimal("120.50")
    assert not read._state.adding  # saved as an update, like any instance the ORM reads


def test_a_token_and_its_user_read_by_fixed_sql_equal_the_orms():
    user = UserFactory(username="olivia")
    issued = token_create(user=user, name="laptop")
    token = token_authenticate(issued.raw)
    orm = ApiToken.objects.select_related("user").get(id=issued.token.id)
    assert _fields(token) == {**_fields(orm), "last_used_at": token.last_used_at}
    assert _fields(token.user) == _fields(orm.user)
    assert token.user.get_username() == "olivia"


def test_a_revoked_an_expired_or_an_unknown_token_authenticates_nobody():
    user = UserFactory()
    revoked = token_create(user=user, name="old")
    token_revoke(token=revoked.token, by=user)
    expired = token_create(user=user, name="expired", expires_at=timezone.now() - timedelta(seconds=1))
    assert token_authenticate(revoked.raw) is None
    assert token_authenticate(expired.raw) is None
    assert token_authenticate("gpp_" + "x" * 43) is None
    inactive = token_create(user=UserFactory(is_active=False), name="gone")
    assert token_authenticate(inactive.raw) is None


@pytest.fixture
def teams():
    lab, other = TeamFactory(slug="lab", name="Lab"), TeamFactory(slug="other", name="Other")
    member = MembershipFactory(team=lab, user=UserFactory(username="member")).user
    outsider = MembershipFactory(team=other, user=UserFactory(username="outsider")).user
    both = UserFactory(username="both")
    MembershipFactory(team=lab, user=both, role="manager")
    MembershipFactory(team=other, user=both)
    admin = get_user_model().objects.create_superuser("admin", "admin@example.org", "pw")
    nobody = UserFactory(username="nobody")
    return {"lab": lab, "member": member, "outsider": outsider, "both": both, "admin": admin, "nobody": nobody}


@pytest.mark.parametrize("who", ["member", "outsider", "both", "admin", "nobody"])
@pytest.mark.parametrize("slug", ["lab", "other", "missing", None])
def test_the_team_a_submission_names_follows_resolve_teams_rules(teams, who, slug):
    user = teams[who]
    try:
        expected = resolve_team(user, slug)
    except Invalid as exc:
        refusal = exc.detail
    else:
        refusal = None
    if refusal is not None:
        with pytest.raises(Invalid) as found:
            resolve_team_to_submit(user, slug)
        assert found.value.detail == refusal
        return
    team, snapshot = resolve_team_to_submit(user, slug)
    assert team == expected
    role = team.memberships.filter(user=user).values_list("role", flat=True).first()
    assert snapshot.role == role  # None for a superuser outside the team: judged as not a member


def test_a_person_in_several_teams_gets_them_by_name_with_their_role_in_each(teams):
    found = intake_facts.submission_teams(user=teams["both"], slug=None)
    assert [(team.slug, snapshot.role) for team, snapshot in found] == [("lab", "manager"), ("other", "member")]


def test_a_workload_stored_by_fixed_sql_reads_back_as_the_orms_twin():
    team = TeamFactory(slug="lab", name="Lab")
    owner = MembershipFactory(team=team).user
    gpu = GpuTypeFactory(slug="p100")
    values = {
        "team": team, "owner": owner, "name": "train", "kind": "batch", "image": "docker.io/x:1", "gpu_type": gpu,
        "gpu_count": 2, "time_limit_seconds": 600, "command": ["python", "train.py"],
        "env": [{"name": "SEED", "value": "7"}], "mounts": [{"kind": "home", "claim": "home-olivia"}],
        "created_at": timezone.now() - timedelta(minutes=3),
    }  # fmt: skip
    stored = Workload(uid="00000000000000aa", **values)
    assert jobs_sql.insert(stored, unless_taken=("uid",))
    twin = Workload.objects.create(uid="00000000000000bb", **values)
    read, orm = Workload.objects.get(id=stored.id), Workload.objects.get(id=twin.id)
    differ = {"id", "uid", "updated_at", "state_changed_at"}  # each instance's own moment
    assert {k: v for k, v in _fields(read).items() if k not in differ} == {
        k: v for k, v in _fields(orm).items() if k not in differ
    }
    assert read.updated_at is not None
    assert not stored._state.adding


def test_a_taken_unique_value_stores_nothing_and_leaves_the_transaction_usable():
    team = TeamFactory(slug="lab", name="Lab")
    owner = MembershipFactory(team=team).user
    gpu = GpuTypeFactory(slug="p100")
    values = {"team": team, "owner": owner, "name": "a", "kind": "batch", "image": "x", "gpu_type": gpu,
              "gpu_count": 1, "time_limit_seconds": 60}  # fmt: skip
    Workload.objects.create(uid="00000000000000cc", **values)
    assert not jobs_sql.insert(Workload(uid="00000000000000cc", **values), unless_taken=("uid",))
    assert Workload.objects.filter(uid="00000000000000cc").count() == 1  # the transaction goes on


def test_a_workload_read_by_fixed_sql_behaves_as_the_orms_in_every_field_and_when_saved():
    """`instance` skips `Model.__init__` for plain models: what it makes must be what `from_db` makes, down to
    the instance state a save and a related object's cache rely on."""
    team = TeamFactory(slug="lab", name="Lab")
    owner = MembershipFactory(team=team).user
    gpu = GpuTypeFactory(slug="p100")
    workload = Workload.objects.create(
        uid="00000000000000dd", team=team, owner=owner, name="train", kind="batch", image="docker.io/x:1",
        gpu_type=gpu, gpu_count=2, time_limit_seconds=600, env=[{"name": "SEED", "value": "7"}],
    )  # fmt: skip
    select = f"SELECT {jobs_sql.select_list(Workload, 'w')} FROM jobs_workload w WHERE w.id = %s"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(select, [workload.id])
        row = cursor.fetchone()
    read = jobs_sql.instance(Workload, row)
    orm = Workload.objects.get(id=workload.id)
    assert _fields(read) == _fields(orm)
    assert vars(read).keys() - {"_state"} == vars(orm).keys() - {"_state"}
    assert (read._state.adding, read._state.db) == (orm._state.adding, orm._state.db) == (False, "default")
    assert read.get_deferred_fields() == set()
    assert read.team == team  # related objects load by their ids
    assert read.gpu_type == gpu
    read.team_id = TeamFactory(slug="other").id  # a changed id drops the cached team, as on any instance
    assert read.team.slug == "other"
    read.name = "renamed"
    read.save(update_fields=["name", "team"])
    assert Workload.objects.get(id=workload.id).name == "renamed"
