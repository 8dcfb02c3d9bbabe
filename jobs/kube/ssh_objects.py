"""What a service's pod gets for SSH (issue 39), rendered as pure functions like objects.py.

Every service pod mounts its own `authorized_keys` from a Secret (`ssh-<uid>`, optional: a pod starts before
it exists, and the kubelet fills the file in once it does; later changes reach the running pod within the
kubelet's sync period, about a minute) and is told where it is and which port the portal's tunnel reaches
(GPUPORTAL_SSH_*). An image that runs sshd (the dev-environment image, localcluster/images.py) reads them;
any other image ignores them. The keys are public: a Secret is used because it is what the kubelet
projects into a running pod and updates there, and it keeps them out of the pod spec.

Each key line carries `restrict,port-forwarding,pty`: a terminal and `-L` forwards work (VS Code needs
both), agent and X11 forwarding do not, whatever the image's sshd allows.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubernetes import client as k8s

from jobs.kube import names

SSH_PORT = 2222  # sshd in the pod runs as the pod's non-root uid: a port above 1024
KEYS_VOLUME = "ssh-keys"
KEYS_DIR = "/etc/gpuportal/ssh"
KEYS_FILE = "authorized_keys"
KEY_OPTIONS = "restrict,port-forwarding,pty"
TERMINAL_KEY_OPTIONS = "restrict,pty"


def keys_secret_name(uid: str) -> str:
    return f"ssh-{uid}"


def authorized_keys(entries: Iterable[tuple[str, str, str]], *, terminal_key: str = "") -> str:
    """authorized_keys text from (username, key name, "type base64") triples, one line each, in order.
    The comment says whose key it is (names reduced to safe characters: a comment ends at the line).
    `terminal_key`: the portal proxy's own key for the browser's Terminal tab (a pty, no forwarding)."""
    lines = ["# Written by GPU Portal: the keys of the people who may open this service."]
    for username, key_name, key in entries:
        comment = "".join(c if c.isalnum() or c in "-_.@" else "_" for c in f"{username}:{key_name}")[:120]
        lines.append(f"{KEY_OPTIONS} {key} {comment}")
    if terminal_key:
        lines.append(f"{TERMINAL_KEY_OPTIONS} {terminal_key} gpuportal-terminal")
    return "\n".join(lines) + "\n"


def make_keys_secret(*, namespace: str, uid: str, text: str, team_slug: str, instance: str) -> k8s.V1Secret:
    return k8s.V1Secret(
        api_version="v1",
        kind="Secret",
        type="Opaque",
        metadata=k8s.V1ObjectMeta(
            name=keys_secret_name(uid),
            namespace=namespace,
            labels={
                names.LABEL_MANAGED_BY: names.MANAGED_BY,
                names.LABEL_INSTANCE: names.label_value(instance),
                names.LABEL_TEAM: names.label_value(team_slug),
                names.LABEL_WORKLOAD: uid,
            },
        ),
        string_data={KEYS_FILE: text},
    )


def keys_volume(uid: str) -> dict:
    # 0444: sshd (StrictModes) wants the file not writable by group or others; it is the kubelet's anyway.
    return {
        "name": KEYS_VOLUME,
        "secret": {"secretName": keys_secret_name(uid), "optional": True, "defaultMode": 0o444},
    }


def keys_mount() -> dict:
    return {"name": KEYS_VOLUME, "mountPath": KEYS_DIR, "readOnly": True}


def ssh_env(home_workspace: str = "") -> list[dict]:
    """Where an sshd in the pod finds its keys and port, and the home workspace it makes $HOME."""
    env = [
        {"name": "GPUPORTAL_SSH_PORT", "value": str(SSH_PORT)},
        {"name": "GPUPORTAL_SSH_AUTHORIZED_KEYS", "value": f"{KEYS_DIR}/{KEYS_FILE}"},
    ]
    if home_workspace:
        env.append({"name": "GPUPORTAL_HOME_WORKSPACE", "value": home_workspace})
    return env
