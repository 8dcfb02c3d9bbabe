"""The queue caps are hard: many submissions racing at a cap on PostgreSQL admit exactly the cap.

Each test fires 30 threads at once (a barrier), each its own database connection, through the intake
service. The team's only GPU is held by a running workload, so everything new stays QUEUED and counts
against the caps. Without the locks in `jobs.services.submission.queue_caps.queue_slot_take`, several threads count the
same number and all pass.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.utils import timezone

from jobs.models import State, Team, Workload
from jobs.services.submission.intake import workload_submit
from jobs.services.validation import SubmissionInvalid
from tests.engine.factories import MembershipFactory
from tests.world import Node, make_user, node_present, world_build

# Committed, but kept from the suite's running engine (`hand_overs_kept`, tests/engine_fixtures.py): these
# tests make up running workloads that no worker may create or its tracker move.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("hand_overs_kept")]
THREADS = 30


# Re-asserted before each submission: the suite's engine's inventory sync deletes made-up nodes.
NODE = Node("caps-n1", "p100", gpus=4)


@pytest.fixture
def crowd():
    """Alpha, with one P100 of quota and three plain members (tests/world.py); m0 holds the GPU."""
    world = world_build(teams=("Alpha",), people={"owner": "m0", "teammate": "m1"}, quotas={"team": {"p100": 1}})
    team, p100 = world.team, world.p100
    members = [world.owner, world.teammate, MembershipFactory(team=team, user=make_user("m2")).user]
    Workload.objects.create(
        team=team, owner=members[0], name="holder", kind="batch", image="docker.io/x:1", gpu_type=p100,
        gpu_count=1, time_limit_seconds=3600, state=State.RUNNING, started_at=timezone.now(),
    )  # fmt: skip
    return {"team": team, "members": members, "p100": p100}


def race(team: Team, submitters: list) -> tuple[list[Workload], list[SubmissionInvalid]]:
    """Submit once per entry of `submitters`, all threads released together."""
    barrier = threading.Barrier(len(submitters))
    stored: list[Workload] = []
    refused: list[SubmissionInvalid] = []
    errors: list[BaseException] = []

    def one(user) -> None:
        try:
            node_present(NODE)
            barrier.wait()
            spec = {"name": "train", "image": "docker.io/library/python:3.12", "gpu_type": "p100", "gpu_count": 1}
            stored.append(workload_submit(team=team, owner=user, spec=spec))
        except SubmissionInvalid as exc:
            refused.append(exc)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(user,)) for user in submitters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return stored, refused


def waiting(**filters) -> int:
    return Workload.objects.filter(state=State.QUEUED, **filters).count()


def test_one_person_at_the_site_cap_gets_exactly_the_cap(crowd, settings):
    settings.PORTAL_MAX_QUEUED_PER_USER = 5
    ann = crowd["members"][1]
    stored, refused = race(crowd["team"], [ann] * THREADS)
    assert len(stored) == 5
    assert waiting(owner=ann) == 5
    assert len(refused) == THREADS - 5
    assert all("at most 5" in exc.errors["queue"][0] for exc in refused)


def test_a_team_at_its_site_cap_gets_exactly_the_cap(crowd, settings):
    settings.PORTAL_MAX_QUEUED_PER_TEAM = 7
    members = crowd["members"]
    stored, refused = race(crowd["team"], [members[i % 3] for i in range(THREADS)])
    assert len(stored) == 7
    assert waiting(team=crowd["team"]) == 7
    assert all("at most 7" in exc.errors["queue"][0] for exc in refused)
    assert len(refused) == THREADS - 7


def test_a_member_at_the_teams_cap_gets_exactly_the_cap(crowd):
    team = crowd["team"]
    Team.objects.filter(id=team.id).update(user_max_queued=4)
    team.refresh_from_db()
    ann, bob = crowd["members"][1], crowd["members"][2]
    stored, refused = race(team, [ann] * 20 + [bob] * 10)
    assert waiting(owner=ann) == 4
    assert waiting(owner=bob) == 4
    assert len(stored) == 8
    assert len(refused) == THREADS - 8
    assert all("4 per member" in exc.errors["team"][0] for exc in refused)


@pytest.mark.parametrize("held_elsewhere", ["person", "team"])
def test_a_submission_locks_the_person_before_the_team(crowd, held_elsewhere):
    """Every submission takes the same two locks in the same order (person, then team), so two of them can
    never each hold the lock the other waits for. Seen from PostgreSQL while one waits on a lock held
    elsewhere: waiting on the team, it holds the person; waiting on the person, it holds nothing yet."""
    from django.db import connections, transaction

    from jobs.services.submission.queue_caps import TEAM_LOCK_SPACE, USER_LOCK_SPACE, queue_locks_take

    team, user = crowd["team"], crowd["members"][1]
    keys = {"person": (USER_LOCK_SPACE, user.pk), "team": (TEAM_LOCK_SPACE, team.pk)}
    holder = connections.create_connection("default")
    waiting = threading.Event()
    backend: list[int] = []

    def submit() -> None:
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    backend.append(cursor.fetchone()[0])
                waiting.set()
                queue_locks_take(user_id=user.pk, team_id=team.pk)
        finally:
            connection.close()

    try:
        with holder.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", keys[held_elsewhere])
        thread = threading.Thread(target=submit)
        thread.start()
        assert waiting.wait(10)
        locks: dict[tuple[int, int], bool] = {}
        for _ in range(100):
            with holder.cursor() as cursor:
                cursor.execute(
                    "SELECT classid::int, objid::int, granted FROM pg_locks WHERE locktype = 'advisory' AND pid = %s",
                    [backend[0]],
                )
                locks = {(space, key): granted for space, key, granted in cursor.fetchall()}
            if keys[held_elsewhere] in locks:  # it is waiting now
                break
            threading.Event().wait(0.05)
        if held_elsewhere == "team":
            assert locks == {keys["person"]: True, keys["team"]: False}
        else:
            assert locks == {keys["person"]: False}
        with holder.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", keys[held_elsewhere])
        thread.join(10)
        assert not thread.is_alive()
    finally:
        holder.close()
