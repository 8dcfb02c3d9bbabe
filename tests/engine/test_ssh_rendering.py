"""What a service's pod gets for SSH, and the client's ssh_config: pure functions, compared literally."""

from __future__ import annotations

import pytest

from cli import ssh
from jobs.kube import objects, ssh_objects
from tests.engine.test_objects import spec


def test_authorized_keys_restrict_each_key_and_say_whose_it_is():
    text = ssh_objects.authorized_keys([("olivia", "my laptop", "ssh-ed25519 AAAA1"), ("tom", "a\nb", "ssh-rsa BBBB")])
    assert text.splitlines()[1:] == [
        "restrict,port-forwarding,pty ssh-ed25519 AAAA1 olivia_my_laptop",
        "restrict,port-forwarding,pty ssh-rsa BBBB tom_a_b",
    ]


def test_a_service_pod_mounts_its_keys_and_is_told_where_they_are():
    home = objects.VolumeSpec(name="ws-home", mount_path="/home/olivia", claim_name="home-olivia")
    pod = objects.make_pod_template(spec(kind="service", port=8888, volumes=(home,)))["spec"]
    assert {"name": "ssh-keys", "secret": {"secretName": f"ssh-{spec().uid}", "optional": True,
                                           "defaultMode": 0o444}} in pod["volumes"]  # fmt: skip
    container = pod["containers"][0]
    assert {"name": "ssh-keys", "mountPath": "/etc/gpuportal/ssh", "readOnly": True} in container["volumeMounts"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert env["GPUPORTAL_SSH_PORT"] == "2222"
    assert env["GPUPORTAL_SSH_AUTHORIZED_KEYS"] == "/etc/gpuportal/ssh/authorized_keys"
    assert env["GPUPORTAL_HOME_WORKSPACE"] == "/home/olivia"


def test_a_batch_pod_has_no_ssh_parts():
    pod = objects.make_pod_template(spec(kind="batch"))["spec"]
    assert all(v["name"] != "ssh-keys" for v in pod["volumes"])
    assert all(not e["name"].startswith("GPUPORTAL_SSH") for e in pod["containers"][0]["env"])


def test_the_host_block_is_what_ssh_and_vs_code_read():
    assert ssh.host_block("0123456789abcdef", name="notebook") == (
        "# notebook (0123456789abcdef)\n"
        "Host gpuportal-0123456789abcdef\n"
        "    HostName 0123456789abcdef\n"
        "    User user\n"
        "    ProxyCommand gpuportal ssh-proxy %h\n"
        "    HostKeyAlias gpuportal-0123456789abcdef\n"
        "    StrictHostKeyChecking accept-new\n"
        "    ServerAliveInterval 30\n"
    )


@pytest.mark.parametrize(("portal", "url"), [
    ("https://gpus.example.org", "wss://gpus.example.org/w/_ssh/abc"),
    ("http://127.0.0.1:8000/", "ws://127.0.0.1:8000/w/_ssh/abc"),
    ("https://example.org/portal", "wss://example.org/portal/w/_ssh/abc"),
])  # fmt: skip
def test_the_tunnel_address_follows_the_portal_s(portal, url):
    assert ssh.tunnel_url(portal, "abc") == url


@pytest.mark.parametrize("host", ["0123abcd", "gpuportal-0123abcd", "GPUPORTAL-0123ABCD", "0123abcd.gpuportal"])
def test_ssh_s_host_name_gives_the_uid(host):
    assert ssh.uid_from_host(host) == "0123abcd"


@pytest.mark.parametrize("host", ["", "laptop", "gpuportal-", "../etc", "0123abcd0123abcd0"])
def test_anything_else_is_not_a_service(host):
    with pytest.raises(ssh.TunnelError):
        ssh.uid_from_host(host)


def test_gpuportal_ssh_runs_openssh_through_the_proxy_command():
    argv = ssh.ssh_command("0123abcd", ["nvidia-smi"], proxy_command="gpuportal", forwards=["8080:localhost:8080"])
    assert argv[0] == "ssh"
    assert argv[-2:] == ["0123abcd", "nvidia-smi"]
    assert "ProxyCommand=gpuportal ssh-proxy %h" in argv
    assert argv[argv.index("-L") + 1] == "8080:localhost:8080"
    assert argv[argv.index("-l") + 1] == "user"


def test_the_terminal_key_is_one_per_service_and_its_public_half_matches(settings):
    import asyncssh

    from jobs.services.ssh_access import terminal_private_key_pem, terminal_public_key

    private = asyncssh.import_private_key(terminal_private_key_pem("0123abcd"))
    assert private.export_public_key("openssh").decode().split()[:2] == terminal_public_key("0123abcd").split()
    assert terminal_public_key("0123abcd") != terminal_public_key("0123abce")
    settings.SECRET_KEY = "another portal's key"
    assert terminal_public_key("0123abcd").split() != private.export_public_key("openssh").decode().split()[:2]


def test_the_terminal_key_gets_a_pty_and_no_forwarding():
    text = ssh_objects.authorized_keys([], terminal_key="ssh-ed25519 TTTT")
    assert text.splitlines()[-1] == "restrict,pty ssh-ed25519 TTTT gpuportal-terminal"


def test_the_proxy_command_names_the_services_own_origin_only_when_there_is_one():
    assert ssh.proxy_command_line("gpuportal") == "gpuportal ssh-proxy %h"
    assert ssh.proxy_command_line("gpuportal", origin="https://abc.apps.example.org/") == (
        "gpuportal ssh-proxy --origin https://abc.apps.example.org %h"
    )
    block = ssh.host_block("abc", command="gpuportal", origin="https://abc.apps.example.org")
    assert "    ProxyCommand gpuportal ssh-proxy --origin https://abc.apps.example.org %h\n" in block


def test_ssh_config_lists_running_services_with_an_ssh_server():
    services = [
        {"uid": "a", "state": "RUNNING", "ssh": True},
        {"uid": "b", "state": "RUNNING", "ssh": False},  # no sshd in its image, or not yours to open
        {"uid": "c", "state": "QUEUED", "ssh": True},
        {"uid": "d", "state": "RUNNING"},  # a portal too old to say
    ]
    assert [s["uid"] for s in ssh.reachable(services)] == ["a", "d"]
