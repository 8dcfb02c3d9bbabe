"""A shared service's authorized_keys follow its team (issue 39), on the real API server with the engine's
real worker: someone who joins the team with a key on their profile gets it into the service's Secret
(`ssh-<uid>`), someone who leaves loses it, and sharing / un-sharing adds / removes the teammates' keys. The
paths are the ones people use: the members page's invite and remove (identity.members), the owner's Share
switch (jobs.services.opening.workload_share).
"""

from __future__ import annotations

import base64
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from identity.members import member_invite, member_remove
from identity.models import Membership
from identity.sshkeys import key_add
from jobs.kube import ssh_objects
from jobs.models import State
from jobs.services.opening import workload_share
from tests.engine.factories import UserFactory

pytestmark = [pytest.mark.cluster, pytest.mark.celery]


def _new_key(user, name: str) -> str:
    """A fresh ed25519 public key kept on `user`'s profile; returns its base64 body (what the file shows)."""
    public = (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    key_add(user=user, name=name, public_key=public)
    return public.split()[1]


def _authorized_keys(kube_api, workload) -> str:
    try:
        secret = k8s.CoreV1Api(kube_api).read_namespaced_secret(
            ssh_objects.keys_secret_name(workload.uid), workload.namespace
        )
    except ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return base64.b64decode((secret.data or {}).get(ssh_objects.KEYS_FILE, "")).decode()


def _until(kube_api, workload, what: str, holds, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = _authorized_keys(kube_api, workload)
        if holds(text):
            return text
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:.0f} s; the Secret holds:\n{text}")
        time.sleep(0.25)


def test_a_shared_service_s_keys_follow_who_is_in_the_team(engine, kube_api):
    owner_key = _new_key(engine.owner, "laptop")
    mate_key = _new_key(engine.teammate, "desktop")
    workload = engine.submit(kind="service", port=8888, gpu_type="k2", gpu_count=1)
    engine.wait_for(workload, State.RUNNING)
    workload.refresh_from_db()
    text = _until(kube_api, workload, "the owner's key in the Secret", lambda t: owner_key in t)
    assert mate_key not in text  # not shared: the owner's keys only

    workload_share(workload=workload, by=engine.owner, shared=True)
    _until(kube_api, workload, "the teammate's key after sharing", lambda t: mate_key in t)

    # Someone new joins the team (the members page's invite): their key comes in.
    newcomer = UserFactory(username=f"new-{engine.team.slug}")
    new_key = _new_key(newcomer, "workstation")
    member_invite(team=engine.team, username=newcomer.username, by=engine.manager)
    _until(kube_api, workload, "the newcomer's key after joining", lambda t: new_key in t)

    # They leave: their key goes; everyone else's stays.
    member_remove(membership=Membership.objects.get(team=engine.team, user=newcomer), by=engine.manager)
    text = _until(kube_api, workload, "the newcomer's key gone after leaving", lambda t: new_key not in t)
    assert owner_key in text
    assert mate_key in text

    # Un-shared: the teammates' keys go, the owner's stays.
    workload_share(workload=workload, by=engine.owner, shared=False)
    text = _until(kube_api, workload, "the teammate's key gone after un-sharing", lambda t: mate_key not in t)
    assert owner_key in text


def test_joining_a_team_whose_services_are_not_shared_touches_no_secret(engine, kube_api):
    owner_key = _new_key(engine.owner, "laptop")
    workload = engine.submit(kind="service", port=8888, gpu_type="k2", gpu_count=1)
    engine.wait_for(workload, State.RUNNING)
    workload.refresh_from_db()
    _until(kube_api, workload, "the owner's key in the Secret", lambda t: owner_key in t)
    before = k8s.CoreV1Api(kube_api).read_namespaced_secret(
        ssh_objects.keys_secret_name(workload.uid), workload.namespace
    )

    newcomer = UserFactory(username=f"new-{engine.team.slug}")
    new_key = _new_key(newcomer, "workstation")
    member_invite(team=engine.team, username=newcomer.username, by=engine.manager)
    time.sleep(3)  # the worker would have written it by now (the test above waits for less)
    after = k8s.CoreV1Api(kube_api).read_namespaced_secret(
        ssh_objects.keys_secret_name(workload.uid), workload.namespace
    )
    assert after.metadata.resource_version == before.metadata.resource_version
    assert new_key not in _authorized_keys(kube_api, workload)
