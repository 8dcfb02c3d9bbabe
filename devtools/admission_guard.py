"""Registering the provisioner's admission guard (admission/) with a local cluster that runs it.

The local cluster runs the guard as one of its components and says where in <state dir>/admission-guard.json
(localcluster/admission.py). Each portal installation (each test session, `make run`) registers its own
ValidatingWebhookConfiguration naming its provisioner, prefix and roles; the cluster's own namespaces are
labelled lenient first, so their writes never wait on the guard. A cluster without that file (another
cluster) gets no registration: the chart's own webhook (helm/templates/admission-webhook.yaml) is for those.
"""

from __future__ import annotations

import base64
import contextlib
import json
from pathlib import Path

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from admission.rules import GUARD_LABEL, LENIENT, Guard, webhook_configuration
from localcluster.admission import INFO_FILE, REGISTRATION_LABEL

# The cluster's own namespaces: what the API server and controllers write there never waits on the guard.
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


def guard_name(fullname: str) -> str:
    return f"{fullname}-provisioner-guard"


def register_provisioner_guard(
    admin: k8s.ApiClient, *, state_dir: Path, fullname: str, provisioner: str, prefix: str, roles: list[str]
) -> str | None:
    """Register the guard for `provisioner` ("namespace/account"); the registration's name, or None when the
    cluster runs no guard."""
    info_file = Path(state_dir) / INFO_FILE
    if not info_file.is_file():
        return None
    info = json.loads(info_file.read_text())
    core = k8s.CoreV1Api(admin)
    for namespace in SYSTEM_NAMESPACES:
        with contextlib.suppress(ApiException):
            core.patch_namespace(namespace, {"metadata": {"labels": {GUARD_LABEL: LENIENT}}})
    namespace, _, account = provisioner.partition("/")
    guard = Guard(user=f"system:serviceaccount:{namespace}:{account}", prefix=prefix, roles=frozenset(roles))
    name = guard_name(fullname)
    body = webhook_configuration(
        name=name,
        guard=guard,
        ca_bundle=base64.b64encode(Path(info["ca_file"]).read_bytes()).decode(),
        url=info["url"],
        labels={REGISTRATION_LABEL: "true"},
    )
    api = k8s.AdmissionregistrationV1Api(admin)
    try:
        api.create_validating_webhook_configuration(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        current = api.read_validating_webhook_configuration(name)
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        api.replace_validating_webhook_configuration(name, body)
    return name
