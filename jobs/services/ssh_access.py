"""Whose SSH keys reach a service's pod, and keeping its authorized_keys Secret up to date (issue 39).

The rule is Open's (jobs.policy.may_open): the owner's keys, and while the owner shares the service, the keys
of every member of its team. The Secret (jobs/kube/ssh_objects.py) is written when the service's objects are
created, and again whenever a key is added or removed (identity.sshkeys.ssh_keys_changed), the owner shares
or stops sharing (jobs.services.opening.workload_share), or someone joins or leaves the team of a shared
service (a Membership saved or deleted, from any path: the members page, the API, the provider's claims at
sign-in, the admin; on_membership_changed): by the engine's worker (jobs.tasks.ssh_keys_publish), since the web may write nothing in
the cluster. The kubelet then updates the file in the running pod (about a minute); the proxy's own check
(proxy/ssh_door.py) already refuses a tunnel to anyone the rule leaves out, so a key that lingers a minute in
the file opens nothing.
"""

from __future__ import annotations

import base64
import logging

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db.models import Q
from kubernetes.client.exceptions import ApiException

from identity.models import Membership, SshKey
from jobs.kube import client as kube
from jobs.kube import ssh_objects
from jobs.models import Kind, State, Workload
from jobs.services import dispatch

log = logging.getLogger(__name__)


def _terminal_key(uid: str) -> Ed25519PrivateKey:
    """The proxy's own key into one service, for the browser's Terminal tab (proxy/terminal.py says why)."""
    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"gpuportal-terminal-v1", info=uid.encode())
    return Ed25519PrivateKey.from_private_bytes(seed.derive(settings.SECRET_KEY.encode()))


def terminal_private_key_pem(uid: str) -> bytes:
    return _terminal_key(uid).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )


def terminal_public_key(uid: str) -> str:
    raw = _terminal_key(uid).public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    blob = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + raw
    return f"ssh-ed25519 {base64.b64encode(blob).decode()}"


def keys_text(workload: Workload) -> str:
    """The authorized_keys file for this service: the owner's keys first, then (shared) the teammates'."""
    people = [workload.owner_id]
    if workload.shared_with_team:
        members = Membership.objects.filter(team_id=workload.team_id).exclude(user_id=workload.owner_id)
        people += list(members.order_by("user_id").values_list("user_id", flat=True))
    rank = {user_id: i for i, user_id in enumerate(people)}
    keys = sorted(
        SshKey.objects.filter(user_id__in=people).select_related("user"),
        key=lambda k: (rank[k.user_id], k.created_at, k.id),
    )
    return ssh_objects.authorized_keys(
        ((k.user.get_username(), k.name, k.public_key) for k in keys), terminal_key=terminal_public_key(workload.uid)
    )


def keys_texts(workloads: list[Workload]) -> dict[int, str]:
    """keys_text for each service among `workloads` (batch jobs have no SSH)."""
    return {w.id: keys_text(w) for w in workloads if w.kind == Kind.SERVICE}


def publish(workload: Workload, text: str | None = None) -> None:
    """Write (create or replace) the service's authorized_keys Secret; API errors propagate (tasks retry)."""
    namespace = workload.namespace or workload.team.namespace
    body = ssh_objects.make_keys_secret(
        namespace=namespace, uid=workload.uid, text=keys_text(workload) if text is None else text,
        team_slug=workload.team.slug, instance=settings.PORTAL_INSTANCE,
    )  # fmt: skip
    core = kube.core()
    try:
        core.create_namespaced_secret(namespace, body, _request_timeout=kube.timeout())
    except ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_secret(body.metadata.name, namespace, body, _request_timeout=kube.timeout())


def live_services() -> Q:
    return Q(kind=Kind.SERVICE) & ~Q(state__in=State.final()) & ~Q(state=State.QUEUED)


def services_of(user_id: int) -> list[int]:
    """Live services whose keys include this person's: their own, and shared ones of their teams."""
    teams = Membership.objects.filter(user_id=user_id).values("team_id")
    reach = Q(owner_id=user_id) | Q(shared_with_team=True, team_id__in=teams)
    return list(Workload.objects.filter(live_services() & reach).values_list("id", flat=True))


def publish_all(workload_ids: list[int]) -> int:
    """The engine's side of a change: write the Secret of each of these services still live. Returns how many."""
    written = 0
    for workload in Workload.objects.filter(live_services(), id__in=workload_ids).select_related("team"):
        publish(workload)
        written += 1
    return written


def on_keys_changed(sender, *, user, **kwargs) -> None:
    """identity.sshkeys.ssh_keys_changed: hand the affected services to the engine (after the commit)."""
    ids = services_of(user.pk)
    if ids:
        dispatch.publish_ssh_keys(ids)


def shared_services_of_team(team_id: int) -> list[int]:
    """Live services of this team whose owner shares them: their authorized_keys list every member's keys."""
    return list(
        Workload.objects.filter(live_services(), team_id=team_id, shared_with_team=True).values_list("id", flat=True)
    )


def on_membership_changed(sender, *, instance: Membership, created: bool = True, **kwargs) -> None:
    """post_save / post_delete of a Membership: someone joined or left a team. Its shared services' keys
    follow (after the commit); a role change (a save of an existing row) changes nobody's keys, and nor does
    anyone without keys coming or going."""
    if not created or not SshKey.objects.filter(user_id=instance.user_id).exists():
        return
    ids = shared_services_of_team(instance.team_id)
    if ids:
        dispatch.publish_ssh_keys(ids)
