"""Workspaces: a home per user and a shared space per team, claims in the team namespace.

Every workload mounts its owner's home at /home/<username> and the team's shared space at /team. The
claims are created the first time a workload needs them (before its Job or Deployment), from the
StorageClass in settings.WORKSPACE_STORAGE_CLASS, sized per team (Team.home_size_gib/shared_size_gib,
else the site defaults). Nothing owns them, so they outlive cancel, failure, time limits and the idle
policy; the portal never deletes one by itself (see jobs.admin.workspaces for the admin's action).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from jobs.kube import client as kube
from jobs.kube import names, objects
from jobs.models import Dataset, Team, Workload, Workspace

log = logging.getLogger(__name__)
HOME_ROOT = "/home"
TEAM_PATH = "/team"
DATASETS_ROOT = "/datasets"


def home_size_gib(team: Team) -> int:
    return team.home_size_gib or settings.WORKSPACE_HOME_GIB


def shared_size_gib(team: Team) -> int:
    return team.shared_size_gib or settings.WORKSPACE_TEAM_GIB


def home_claim(*, team: Team, owner) -> str:
    """The claim of this user's home in this team: the one recorded for them (homes made under an older
    naming keep their name, so nobody's home becomes empty), else a new name from their id."""
    recorded = (
        Workspace.objects.filter(namespace=team.namespace, owner=owner)
        .order_by("id")
        .values_list("claim_name", flat=True)
        .first()
    )
    return recorded or names.home_claim_name(owner.get_username(), owner.pk)


def _home_claims(w) -> list[tuple[tuple[str, str], str]]:
    """A workload's home mounts: ((namespace, claim), claim)."""
    namespace = w.namespace or w.team.namespace
    return [((namespace, m["claim"]), m["claim"]) for m in w.mounts or [] if m.get("kind") == "home"]


def _claim_owners(wanted: set[tuple[str, str]]) -> dict[tuple[str, str], int | None]:
    """The owner recorded for each (namespace, claim) of `wanted` that has a workspace row."""
    found: dict[tuple[str, str], int | None] = {}
    for namespace in {ns for ns, _ in wanted}:
        claims = [c for ns, c in wanted if ns == namespace]
        rows = Workspace.objects.filter(namespace=namespace, claim_name__in=claims).values_list(
            "claim_name", "owner_id"
        )
        found.update({(namespace, claim): owner_id for claim, owner_id in rows})
    return found


def homes_not_owned(workloads) -> dict[int, str]:
    """Of these workloads, those whose home claim is recorded for another person: workload id -> claim.
    One query for the lot."""
    wanted = {key for w in workloads for key, _ in _home_claims(w)}
    if not wanted:
        return {}
    found = _claim_owners(wanted)
    refused: dict[int, str] = {}
    for w in workloads:
        for key, claim in _home_claims(w):
            if key in found and found[key] != w.owner_id:
                refused[w.id] = claim
    return refused


def workspace_mounts(*, team: Team, owner) -> list[dict[str, Any]]:
    """What a workload of this user in this team mounts (stored on the workload at submit); empty
    when workspaces are off (no StorageClass configured)."""
    if not settings.WORKSPACE_STORAGE_CLASS:
        return []
    username = owner.get_username()
    return [
        {
            "kind": "home",
            "mount_path": f"{HOME_ROOT}/{username}",
            "claim": home_claim(team=team, owner=owner),
            "read_only": False,
            "size_gib": home_size_gib(team),
            "storage_class": settings.WORKSPACE_STORAGE_CLASS,
        },
        {
            "kind": "team",
            "mount_path": TEAM_PATH,
            "claim": names.TEAM_CLAIM_NAME,
            "read_only": False,
            "size_gib": shared_size_gib(team),
            "storage_class": settings.WORKSPACE_STORAGE_CLASS,
        },
    ]


def datasets_allowed(team: Team) -> dict[str, bool]:
    """Every enabled dataset's name -> whether this team may use it (validation names the difference)."""
    allowed = set(team.datasets.filter(enabled=True).values_list("name", flat=True))
    return {name: name in allowed for name in Dataset.objects.filter(enabled=True).values_list("name", flat=True)}


def dataset_mounts(names_: tuple[str, ...]) -> list[dict[str, Any]]:
    """Read-only mounts for the chosen datasets, as stored on the workload (source copied at submit)."""
    if not names_:  # most submissions mount none: no query to build
        return []
    by_name = {d.name: d for d in Dataset.objects.filter(name__in=names_)}
    return [
        {
            "kind": "dataset",
            "name": name,
            "mount_path": f"{DATASETS_ROOT}/{name}",
            "claim": by_name[name].claim_name,
            "nfs_server": by_name[name].nfs_server,
            "nfs_path": by_name[name].nfs_path,
            "read_only": True,
            "size_gib": None,
        }
        for name in names_
    ]


def volume_specs(mounts: list[dict[str, Any]]) -> tuple[objects.VolumeSpec, ...]:
    """The pod volumes for a workload's stored mounts."""
    return tuple(
        objects.VolumeSpec(
            name=f"ws-{m['kind']}" if m["kind"] in ("home", "team") else f"ds-{i}",
            mount_path=m["mount_path"],
            read_only=bool(m.get("read_only")) or m["kind"] == "dataset",
            claim_name=m.get("claim", ""),
            nfs_server=m.get("nfs_server", ""),
            nfs_path=m.get("nfs_path", ""),
        )
        for i, m in enumerate(mounts)
    )


def workspaces_ensure(workload: Workload) -> None:
    """The workload's workspace claims exist (created on first use). Transient API errors propagate.
    A home recorded for someone else is left alone (the workload is refused: `homes_not_owned`)."""
    team, owner = workload.team, workload.owner
    namespace = workload.namespace or team.namespace
    for mount in workload.mounts or []:
        if mount.get("kind") not in ("home", "team"):
            continue
        is_home = mount["kind"] == "home"
        if is_home and homes_not_owned([workload]):
            continue
        claim = objects.make_workspace_claim(
            namespace=namespace,
            name=mount["claim"],
            size_gib=int(mount["size_gib"]),
            storage_class=mount["storage_class"],
            team_slug=team.slug,
            username=owner.get_username() if is_home else "",
            instance=settings.PORTAL_INSTANCE,
        )
        try:
            kube.core().create_namespaced_persistent_volume_claim(namespace, claim, _request_timeout=kube.timeout())
            log.info("workspace %s/%s created (%s GiB)", namespace, mount["claim"], mount["size_gib"])
        except ApiException as exc:
            if exc.status != 409:  # already there: a workspace is created once and kept
                raise
        # get_or_create: a concurrent submission of the same user may have recorded it already.
        Workspace.objects.get_or_create(
            namespace=namespace,
            claim_name=mount["claim"],
            defaults={
                "team": team,
                "owner": owner if is_home else None,
                "mount_path": mount["mount_path"],
                "size_gib": int(mount["size_gib"]),
                "storage_class": mount["storage_class"],
            },
        )


def workspace_volumes_learn() -> int:
    """Record the volume each not-yet-mapped workspace claim is bound to (its spec.volumeName), so node
    agents' per-volume use maps back to it. One list call per namespace that has such a claim, none at
    all once every claim is bound and known. Returns how many workspaces were mapped."""
    waiting = Workspace.objects.filter(volume_name="").values_list("id", "namespace", "claim_name")
    by_namespace: dict[str, dict[str, int]] = {}
    for workspace_id, namespace, claim_name in waiting:
        by_namespace.setdefault(namespace, {})[claim_name] = workspace_id
    learned = 0
    for namespace, claims in sorted(by_namespace.items()):
        try:
            listed = kube.core().list_namespaced_persistent_volume_claim(namespace, _request_timeout=kube.timeout())
        except (ApiException, OSError, HTTPError) as exc:
            # The next pass (a minute, or the next agent report naming an unknown volume) tries again.
            log.warning("cannot list the workspace claims in %s: %s", namespace, exc)
            continue
        for claim in listed.items:
            workspace_id = claims.get(claim.metadata.name)
            bound = claim.status is not None and claim.status.phase == "Bound"
            if workspace_id is not None and bound and claim.spec.volume_name:
                learned += Workspace.objects.filter(id=workspace_id, volume_name="").update(
                    volume_name=claim.spec.volume_name
                )
    if learned:
        log.info("learned the volumes of %d workspace claims", learned)
    return learned


def workspace_delete_data(workspace: Workspace, *, by) -> None:
    """An admin deletes a workspace's data: its claim goes (and with a Delete-policy class, its volume),
    the row goes, and a WorkspaceDeletion records who did it. 404 from Kubernetes is fine."""
    from jobs.models import WorkspaceDeletion

    try:
        kube.core().delete_namespaced_persistent_volume_claim(
            workspace.claim_name, workspace.namespace, _request_timeout=kube.timeout()
        )
    except ApiException as exc:
        if exc.status != 404:
            raise
    WorkspaceDeletion.objects.create(
        team_name=workspace.team.name,
        namespace=workspace.namespace,
        claim_name=workspace.claim_name,
        owner_username=workspace.owner.get_username() if workspace.owner_id else "",
        size_gib=workspace.size_gib,
        deleted_by=by,
    )
    workspace.delete()
