"""Names that collide (issue 33.2): a personal secret's Kubernetes Secret and a home workspace claim were
named from 8 hex digits of sha256(username), and a store updated whichever row had that name. Now new
names come from the owner's id, every store finds the person's own row, and the engine refuses to mount a
secret or a home recorded for someone else. The collisions are forced: by a name function that gives
everyone the same name, and by rows written straight into the database as the old naming left them."""

from __future__ import annotations

import pytest

from jobs.kube import names
from jobs.kube.objects import SecretRef
from jobs.models import SecretState, State, TeamSecret, Workspace
from jobs.services.cluster.object_creation import NotTheOwners, secrets_written
from jobs.services.storage import secrets, workspaces
from jobs.services.storage.secrets import SecretInvalid, secret_save
from tests.engine.factories import MembershipFactory, TeamFactory, UserFactory
from tests.engine.test_lifecycle_unit import workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def pair():
    team = TeamFactory(slug="vision")
    alice = MembershipFactory(team=team, user=UserFactory(username="alice")).user
    bob = MembershipFactory(team=team, user=UserFactory(username="bob")).user
    return team, alice, bob


@pytest.fixture
def handed(monkeypatch) -> list[tuple[int, int]]:
    """What the web hands to the engine to write: (secret row, version)."""
    seen: list[tuple[int, int]] = []
    monkeypatch.setattr(
        secrets, "_hand_to_engine", lambda secret_id, version, sealed, k8s_name: seen.append((secret_id, version))
    )
    return seen


def test_a_forced_name_collision_never_replaces_another_members_secret(
    pair, handed, monkeypatch, django_capture_on_commit_callbacks
):
    team, alice, bob = pair
    monkeypatch.setattr(names, "secret_object_name", lambda name, **_: f"secret-everyone-{name}")
    with django_capture_on_commit_callbacks(execute=True):
        mine = secret_save(team=team, user=alice, name="token", value="alices")
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(SecretInvalid) as refused:
        secret_save(team=team, user=bob, name="token", value="bobs")
    assert list(refused.value.errors) == ["name"]
    mine.refresh_from_db()
    assert (mine.owner, mine.version, mine.k8s_name) == (alice, 1, "secret-everyone-token")
    assert handed == [(mine.id, 1)]  # bob's value was never sent to be written into alice's Secret
    assert TeamSecret.objects.count() == 1


def test_secrets_stored_under_the_old_naming_keep_their_name_and_newcomers_get_their_own(pair, handed):
    team, alice, bob = pair
    legacy = TeamSecret.objects.create(team=team, owner=alice, name="token", k8s_name="secret-u1234abcd-token",
                                       state=SecretState.READY)  # fmt: skip
    again = secret_save(team=team, user=alice, name="token", value="new")
    assert (again.id, again.k8s_name, again.version) == (legacy.id, "secret-u1234abcd-token", 2)
    theirs = secret_save(team=team, user=bob, name="token", value="bobs")
    assert theirs.id != legacy.id
    assert theirs.k8s_name == f"secret-p{bob.pk}-token"
    assert TeamSecret.objects.get(id=legacy.id).owner == alice


def test_the_engine_refuses_a_personal_secret_recorded_for_someone_else(pair):
    team, alice, bob = pair
    TeamSecret.objects.create(team=team, owner=alice, name="token", k8s_name="secret-u1234abcd-token",
                              state=SecretState.READY)  # fmt: skip
    bobs = workload(team, owner=bob, state=State.SUBMITTING)
    with pytest.raises(NotTheOwners, match="belongs to someone else"):
        secrets_written(bobs, (SecretRef("token", "secret-u1234abcd-token"),))
    secrets_written(
        workload(team, owner=alice, state=State.SUBMITTING), (SecretRef("token", "secret-u1234abcd-token"),)
    )


def test_a_home_recorded_for_someone_else_is_never_mounted_and_old_homes_keep_their_claim(pair, settings):
    team, alice, bob = pair
    settings.WORKSPACE_STORAGE_CLASS = "fast"
    # As the old naming left them: alice's home claim, named from a hash of her username.
    Workspace.objects.create(team=team, owner=alice, namespace=team.namespace, claim_name="home-alice-0badc0de",
                             mount_path="/home/alice", size_gib=10, storage_class="fast")  # fmt: skip
    assert workspaces.workspace_mounts(team=team, owner=alice)[0]["claim"] == "home-alice-0badc0de"
    assert workspaces.workspace_mounts(team=team, owner=bob)[0]["claim"] == f"home-bob-u{bob.pk}"
    # A workload of bob's stored with alice's claim (a colliding hash): the engine will not mount it.
    home = {"kind": "home", "mount_path": "/home/bob", "claim": "home-alice-0badc0de", "read_only": False,
            "size_gib": 10, "storage_class": "fast"}  # fmt: skip
    bobs = workload(team, owner=bob, state=State.SUBMITTING, mounts=[home])
    alices = workload(team, owner=alice, state=State.SUBMITTING, mounts=[{**home, "mount_path": "/home/alice"}])
    assert workspaces.homes_not_owned([bobs, alices]) == {bobs.id: "home-alice-0badc0de"}
