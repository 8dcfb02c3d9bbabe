"""What the intake reads before it judges a submission, in one query when nothing has changed.

Most facts a submission is judged against change rarely: the GPU types with their nodes' sizes and
drivers, the image catalog, the allowed registries and datasets (site facts), and a team's quotas, the
datasets it may use and its secrets (team facts). Each process keeps the last copy it read, with a
fingerprint of the rows it came from, and one query per submission asks the database for the current
fingerprints together with what must always be read fresh (the person's role in the team). A copy whose fingerprint changed is read again there and
then, so an admin who disables a GPU type, withdraws a catalog image or lowers a quota is obeyed by the
very next submission, and so is a node the inventory marks not ready.

Site facts are versioned (migration 0034): a statement-level trigger on each of their tables sets one
row's version to a fresh number before any INSERT, UPDATE, DELETE or TRUNCATE, whoever sends it (the ORM,
a bulk update, raw SQL), so the site's fingerprint is that one row, whatever the number of nodes or images.
A team's facts are versioned the same way, one row per team (migration 0035): a row trigger on its
quotas, dataset grants and secrets sets the team's row to a fresh number at any insert, update or delete,
after a statement trigger has queued the writer on the site facts' version row (one lock order for every
writer of facts). It was the rows' count and the sums of their `xmin` and `ctid` over the team's rows,
three subqueries per submission. Other databases (SQLite in development) have neither: there every
submission reads the facts afresh.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, replace

from django.db import connection

from identity.models import Membership
from jobs import sql as jobs_sql
from jobs.models import (
    AllowedRegistry,
    CatalogImage,
    Dataset,
    GpuHealthMark,
    GpuNode,
    GpuType,
    Quota,
    Team,
    TeamSecret,
)
from jobs.selectors import cluster_capacity
from jobs.services.storage.secrets import secrets_available
from jobs.services.validation import CatalogFacts, GpuTypeFacts, cuda_tuple

# The tables site facts come from, and those team facts come from (rows of the one team).
SITE_TABLES = (GpuType, GpuNode, CatalogImage, AllowedRegistry, Dataset)
# Every table whose writes move the site facts' version (migration 0034): the intake's site tables and the
# GPU health marks, which the worker's create caches under the same version (object_creation.site_facts).
FACT_TABLES = (*SITE_TABLES, GpuHealthMark)
# Every table whose writes move a team's version (migration 0035): its quotas, dataset grants and secrets.
TEAM_TABLES = (Quota, Dataset.teams.through, TeamSecret)
TEAM_CACHE_SIZE = 2048  # (team, person) pairs kept per process


@dataclass(frozen=True)
class SiteFacts:
    gpu_types: Mapping[str, GpuTypeFacts]  # by slug; `quota` left None (it is the team's)
    gpu_type_ids: Mapping[str, int]
    catalog: Mapping[int, CatalogFacts]
    allowed_registries: frozenset[str]
    datasets: Mapping[int, str]  # every enabled dataset: id -> name


@dataclass(frozen=True)
class TeamFacts:
    quotas: Mapping[int, int]  # GPU type id -> max GPUs
    datasets: frozenset[int]  # ids of the datasets the team may use (when enabled)
    secrets: Mapping[str, str]  # secret names the person may use -> Kubernetes Secret name


@dataclass(frozen=True)
class Snapshot:
    """What one submission is judged against, as read at its start."""

    role: str | None  # the person's role in the team; None: not a member
    site: SiteFacts
    team: TeamFacts

    def gpu_types(self) -> dict[str, GpuTypeFacts]:
        return {
            slug: replace(facts, quota=self.team.quotas.get(self.site.gpu_type_ids[slug]))
            for slug, facts in self.site.gpu_types.items()
        }

    def datasets_allowed(self) -> dict[str, bool]:
        return {name: dataset_id in self.team.datasets for dataset_id, name in self.site.datasets.items()}


_lock = threading.Lock()
_site: tuple[str, SiteFacts] | None = None
_teams: OrderedDict[tuple[int, int], tuple[str, TeamFacts]] = OrderedDict()


def forget() -> None:
    """Drop every cached copy (tests that change facts behind the database's back)."""
    global _site
    with _lock:
        _site = None
        _teams.clear()


# On PostgreSQL both fingerprints are version rows moved by triggers (migrations 0034 and 0035), read inline;
# the functions of those names return the same values (for psql and the tests).
SITE_PRINT_FUNCTION = jobs_sql.SITE_FACTS_PRINT_FUNCTION
TEAM_PRINT_FUNCTION = jobs_sql.TEAM_FACTS_PRINT_FUNCTION


def _site_print_sql() -> str:
    return jobs_sql.site_facts_version()


def _team_print_sql(team: str) -> str:
    return jobs_sql.team_facts_version(team)


def _snapshot_sql() -> str:
    # Table names come from the models; every value is a parameter.
    membership = Membership._meta.db_table
    columns = [
        f"(SELECT role FROM {membership} WHERE user_id = %(user)s AND team_id = %(team)s)",  # noqa: S608
        _site_print_sql(),
        _team_print_sql("%(team)s"),
    ]
    return "SELECT " + ", ".join(columns)


def snapshot(*, team: Team, user) -> Snapshot:
    """The facts for one submission: one query, plus a re-read of whatever changed since the last one."""
    with connection.cursor() as cursor:
        cursor.execute(_snapshot_sql(), {"user": user.pk, "team": team.id})
        role, site_print, team_print = cursor.fetchone()
    return _snapshot_from(team=team, user=user, role=role, site_print=site_print, team_print=team_print)


_SUBMISSION_TEAMS_SQL = """
SELECT {team_columns},
       (SELECT role FROM {membership} m WHERE m.team_id = t.id AND m.user_id = %(user)s),
       {site_print},
       {team_print}
FROM {team} t
WHERE {named} (%(every)s OR EXISTS (SELECT 1 FROM {membership} m WHERE m.team_id = t.id AND m.user_id = %(user)s))
ORDER BY t.name
LIMIT %(limit)s
"""


@functools.cache
def _submission_teams_sql(named: bool, vendor: str) -> str:
    # Table and column names from the models only; every value is a parameter.
    return _SUBMISSION_TEAMS_SQL.format(
        team_columns=jobs_sql.select_list(Team, "t"),
        membership=connection.ops.quote_name(Membership._meta.db_table),
        site_print=_site_print_sql(),
        team_print=_team_print_sql("t.id"),
        team=connection.ops.quote_name(Team._meta.db_table),
        named="t.slug = %(slug)s AND" if named else "",
    )


def submission_teams(
    *, user, slug: str | None, every_team: bool = False, limit: int = 2
) -> list[tuple[Team, Snapshot]]:
    """The teams a submission could be for, each with its facts, in one statement: the team named `slug`
    among the person's own (or among all, `every_team`: a superuser sees every team, `api.access`), else
    the person's own teams by name, at most `limit` of them. Fixed SQL (`jobs.sql`): this runs on every
    REST submission, and the ORM's query for it cost more CPU to build than to answer."""
    params = {"user": user.pk, "slug": slug, "every": every_team, "limit": limit}
    with connection.cursor() as cursor:
        cursor.execute(_submission_teams_sql(slug is not None, connection.vendor), params)
        rows = cursor.fetchall()
    n = jobs_sql.width(Team)
    found = []
    for row in rows:
        team = jobs_sql.instance(Team, row[:n])
        role, site_print, team_print = row[n:]
        found.append(
            (team, _snapshot_from(team=team, user=user, role=role, site_print=site_print, team_print=team_print))
        )
    return found


def _snapshot_from(*, team: Team, user, role: str | None, site_print: str | None, team_print: str | None) -> Snapshot:
    global _site
    cached_site = _site
    if site_print is not None and cached_site is not None and cached_site[0] == site_print:
        site = cached_site[1]
    else:
        site = read_site_facts()
        if site_print is not None:
            _site = (site_print, site)
    key = (team.id, user.pk)
    with _lock:
        cached_team = _teams.get(key)
    if team_print is not None and cached_team is not None and cached_team[0] == team_print:
        team_facts = cached_team[1]
    else:
        team_facts = read_team_facts(team=team, user=user)
        if team_print is not None:
            with _lock:
                _teams[key] = (team_print, team_facts)
                _teams.move_to_end(key)
                while len(_teams) > TEAM_CACHE_SIZE:
                    _teams.popitem(last=False)
    return Snapshot(role=role, site=site, team=team_facts)


def gpu_type_max_cuda(gpu_type: GpuType, node_cuda: Mapping[int, list[str]]) -> str | None:
    """What an admin set, else the lowest driver CUDA among the type's nodes (a pod may land on any)."""
    if gpu_type.max_cuda_version:
        return gpu_type.max_cuda_version
    versions = node_cuda.get(gpu_type.id) or []
    if not versions:
        return None
    return min(versions, key=cuda_tuple)


@dataclass(frozen=True)
class NodeFacts:
    """What the intake learns from the GPU nodes, per GPU type id (one read of the inventory)."""

    cuda: Mapping[int, list[str]]  # the driver CUDA of each ready node that reported one
    # For each type none of whose nodes pulls images: the images its nodes have between them (a type with
    # a node that pulls, or whose nodes listed no image yet, is left out: nothing is judged there).
    local_images: Mapping[int, frozenset[str]]


def read_node_facts() -> NodeFacts:
    cuda: dict[int, list[str]] = {}
    pulling: set[int] = set()
    found: dict[int, set[str]] = {}
    rows = GpuNode.objects.exclude(gpu_type=None).values_list(
        "gpu_type_id", "ready", "cuda_driver_version", "pulls_images", "images"
    )
    for type_id, ready, version, pulls, images in rows:
        if ready and version:
            cuda.setdefault(type_id, []).append(version)
        if pulls:
            pulling.add(type_id)
        else:
            found.setdefault(type_id, set()).update(images or ())
    local = {type_id: frozenset(images) for type_id, images in found.items() if images and type_id not in pulling}
    return NodeFacts(cuda=cuda, local_images=local)


def read_site_facts() -> SiteFacts:
    types = list(GpuType.objects.all())
    capacity = cluster_capacity(types)
    nodes = read_node_facts()
    gpu_types = {
        t.slug: GpuTypeFacts(
            slug=t.slug,
            display_name=t.display_name,
            enabled=t.enabled,
            quota=None,
            largest_node=capacity[t.id].largest_node,
            max_cuda=gpu_type_max_cuda(t, nodes.cuda),
            cpu_per_gpu=t.cpu_per_gpu_millicores,
            max_cpu_per_gpu=t.max_cpu_per_gpu_millicores,
            memory_per_gpu=t.memory_per_gpu_mib,
            max_memory_per_gpu=t.max_memory_per_gpu_mib,
            per_container=t.share.per_container_limit,
            unit=t.share.kind,
            nodes=capacity[t.id].nodes,
            local_images=nodes.local_images.get(t.id),
        )
        for t in types
    }
    catalog = {
        c.id: CatalogFacts(
            id=c.id,
            reference=c.reference,
            suits=c.suits,
            enabled=c.enabled,
            cuda_version=c.cuda_version or None,
            default_command=tuple(c.default_command or ()),
            default_args=tuple(c.default_args or ()),
            default_port=c.default_port,
            needs_root=c.needs_root,
            root_allowed=c.root_allowed,
            title=c.title,
        )
        for c in CatalogImage.objects.all()
    }
    return SiteFacts(
        gpu_types=gpu_types,
        gpu_type_ids={t.slug: t.id for t in types},
        catalog=catalog,
        allowed_registries=frozenset(AllowedRegistry.objects.values_list("host", flat=True)),
        datasets=dict(Dataset.objects.filter(enabled=True).values_list("id", "name")),
    )


def read_team_facts(*, team: Team, user) -> TeamFacts:
    return TeamFacts(
        quotas=dict(Quota.objects.filter(team=team).values_list("gpu_type_id", "max_gpus")),
        datasets=frozenset(team.datasets.values_list("id", flat=True)),
        secrets=secrets_available(team=team, user=user),
    )
