"""One world for the UI, API and sharing tests, built with tests/engine/factories.py.

A team with an **owner** and a **teammate** (plain members) and a **manager**; an **outsider**, member of
another team only, who must see nothing of the first team's work; a **superuser** in no team. GPU types
with ready nodes, quotas per team and type, allowed registries, catalog images, and optionally a cohort
(both teams in it, each quota with its borrowing limit and lending cap). Each suite says what it needs
(`world_build`'s arguments); the suites' `world` fixtures are a call each.

Function-scoped and in the test's own transaction, so it is rolled back with the test. Nodes go through
`update_or_create`: where rows are committed (browser and transactional tests), the suite's running
engine's inventory sync may already have stored the local cluster's node of the same name, or deleted
one it does not know (`node_present` puts it back before a submission that needs it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone
from rest_framework.test import APIClient

from api.tokens import token_create
from identity.models import Role
from jobs.models import AllowedRegistry, CatalogImage, Cohort, GpuNode, GpuType, Team
from tests.engine.factories import GpuTypeFactory, MembershipFactory, QuotaFactory, TeamFactory, UserFactory

PASSWORD = "correct-horse-battery-staple"  # everyone's, so browser tests can sign anyone in
PEOPLE = {"owner": "olivia", "teammate": "tom", "manager": "maria", "outsider": "xavier", "admin": "ada"}
# Where each role sits: (which team, role there); the superuser ("admin") is in none.
PLACES = {
    "owner": ("team", Role.MEMBER),
    "teammate": ("team", Role.MEMBER),
    "manager": ("team", Role.MANAGER),
    "outsider": ("other_team", Role.MEMBER),
    "other_manager": ("other_team", Role.MANAGER),
}


@dataclass(frozen=True)
class Node:
    name: str
    gpu_type: str  # slug
    gpus: int
    in_use: int = 0


@dataclass
class World:
    team: Team
    other_team: Team | None
    cohort: Cohort | None
    people: dict[str, Any]  # role -> user, for the roles asked for
    gpu_types: dict[str, GpuType]  # slug -> type
    images: dict[str, CatalogImage]  # a name the test knows it by -> image
    tokens: dict[str, str] = field(default_factory=dict)  # role -> API token (with `tokens=True`)

    def __getattr__(self, name: str) -> Any:
        # world.owner, world.p100, world.notebook: the people, GPU types and images by what they are.
        for found in ("people", "gpu_types", "images"):
            values = self.__dict__.get(found, {})
            if name in values:
                return values[name]
        if name in PEOPLE or name in PLACES:
            return None  # a role this world was built without
        raise AttributeError(name)

    def client(self, who: str | None) -> APIClient:
        """An API client with `who`'s token (None: no credentials)."""
        client = APIClient()
        if who is not None:
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.tokens[who]}")
        return client


def node_present(node: Node, gpu_type: GpuType | None = None) -> GpuNode:
    """A ready node of the type, written over whatever the engine's inventory sync left under its name."""
    gpu_type = gpu_type or GpuType.objects.get(slug=node.gpu_type)
    stored, _ = GpuNode.objects.update_or_create(
        name=node.name,
        defaults={
            "gpu_type": gpu_type, "gpus_capacity": node.gpus, "gpus_allocatable": node.gpus,
            "gpus_in_use": node.in_use, "ready": True, "last_seen_at": timezone.now(),
        },
    )  # fmt: skip
    return stored


def _gpu_type(slug: str, spec: Mapping[str, Any]) -> GpuType:
    # CPU and memory per GPU as a type an admin adds gets them (the model's defaults), not the factory's.
    defaults = {
        name: GpuType._meta.get_field(name).get_default() for name in ("cpu_per_gpu_millicores", "memory_per_gpu_mib")
    }
    return GpuTypeFactory(slug=slug, node_label_value=slug, **{**defaults, **spec})


def _team(name: str, cohort: Cohort | None) -> Team:
    return TeamFactory(name=name, slug=name.lower(), cohort=cohort)


def world_build(
    *,
    teams: Sequence[str] = ("Lab", "Other"),
    people: Mapping[str, str] = PEOPLE,
    gpu_types: Mapping[str, Mapping[str, Any]] = {"p100": {"display_name": "Tesla P100"}},
    nodes: Sequence[Node] = (),
    quotas: Mapping[str, Mapping[str, int | Mapping[str, int]]] = {},
    images: Mapping[str, Mapping[str, Any]] = {},
    registries: Sequence[str] = ("docker.io",),
    cohort: str | None = None,
    tokens: bool = False,
) -> World:
    """Build a world. `teams`: the team's name, then the other team's (slugs are the names in lowercase).
    `people`: role -> username, for the roles wanted (owner, teammate, manager, outsider, other_manager,
    admin). `quotas`: "team" or "other_team" -> {GPU type slug: max GPUs, or Quota fields}. `cohort`: a
    cohort of that name holding both teams. `tokens`: an API token for each person."""
    group = Cohort.objects.create(name=cohort) if cohort else None
    team = _team(teams[0], group)
    other = _team(teams[1], group) if len(teams) > 1 else None
    by_place = {"team": team, "other_team": other}
    types = {slug: _gpu_type(slug, spec) for slug, spec in gpu_types.items()}
    for node in nodes:
        node_present(node, types[node.gpu_type])
    for place, limits in quotas.items():
        for slug, limit in limits.items():
            fields = {"max_gpus": limit} if isinstance(limit, int) else dict(limit)
            QuotaFactory(team=by_place[place], gpu_type=types[slug], **fields)
    for host in registries:
        AllowedRegistry.objects.create(host=host)
    made_images = {name: CatalogImage.objects.create(**spec) for name, spec in images.items()}
    users = {}
    for role, username in people.items():
        if role == "admin":
            users[role] = UserFactory(username=username, password=PASSWORD, is_superuser=True, is_staff=True)
            continue
        place, team_role = PLACES[role]
        users[role] = MembershipFactory(
            team=by_place[place], user=UserFactory(username=username, password=PASSWORD), role=team_role
        ).user
    world = World(team=team, other_team=other, cohort=group, people=users, gpu_types=types, images=made_images)
    if tokens:
        world.tokens = {role: token_create(user=user, name=f"{role} laptop").raw for role, user in users.items()}
    return world


def make_user(username: str, **fields: Any):
    """Someone not in the world yet (to invite, to sign in as a newcomer)."""
    return UserFactory(username=username, password=PASSWORD, **fields)
