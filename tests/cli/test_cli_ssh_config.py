"""`gpuportal ssh-config` against a running portal (issue 39): without a uid it lists the services the person
can SSH into now (running, theirs or shared with them, from a catalog image that runs an SSH server) and
nothing else; with the services on an origin of their own, each block dials that origin."""

from __future__ import annotations

import pytest

from jobs.models import CatalogImage, State, Workload
from tests.cli import test_cli_e2e

pytestmark = pytest.mark.slow
run_cli = test_cli_e2e.run_cli  # the fixture: the entry point with a token, against the live portal


def _service(world, name: str, *, owner=None, image: CatalogImage | None = None, **fields) -> Workload:
    image = image or world.devenv
    fields.setdefault("state", State.RUNNING)
    return Workload.objects.create(
        team=world.team, owner=owner or world.owner, name=name, kind="service", image=image.reference,
        catalog_image=image, gpu_type=world.p100, gpu_count=1, port=8888, time_limit_seconds=3600,
        **fields,
    )  # fmt: skip


@pytest.fixture
def devenvs(world):
    world.images["devenv"] = CatalogImage.objects.create(
        reference="registry.local/gpuportal-devenv:1", title="Dev environment", suits="service",
        default_port=8888, runs_sshd=True,
    )  # fmt: skip
    return {
        "mine": _service(world, "devbox"),
        "notebook": _service(world, "notebook", image=world.catalog),
        "queued": _service(world, "later", state=State.QUEUED),
        "ended": _service(world, "done", state=State.SUCCEEDED),
        "mates unshared": _service(world, "mates-box", owner=world.teammate),
        "mates shared": _service(world, "shared-box", owner=world.teammate, shared_with_team=True),
    }


def _hosts(text: str) -> list[str]:
    return [line.split()[1] for line in text.splitlines() if line.startswith("Host ")]


def test_ssh_config_lists_only_the_services_you_can_ssh_into(run_cli, devenvs):
    listed = run_cli("ssh-config")
    assert listed.returncode == 0, listed.stderr
    assert set(_hosts(listed.stdout)) == {
        f"gpuportal-{devenvs['mine'].uid}",
        f"gpuportal-{devenvs['mates shared'].uid}",
    }
    # The teammate sees their own two; the outsider nothing.
    theirs = run_cli("ssh-config", token="teammate")
    assert set(_hosts(theirs.stdout)) == {
        f"gpuportal-{devenvs['mates unshared'].uid}",
        f"gpuportal-{devenvs['mates shared'].uid}",
    }
    nothing = run_cli("ssh-config", token="outsider")
    assert nothing.returncode == 0
    assert _hosts(nothing.stdout) == []
    assert "No running services of yours with an SSH server" in nothing.stdout

    # Asked for by uid, a block is printed whatever the image says (the person knows what they run).
    named = run_cli("ssh-config", devenvs["notebook"].uid)
    assert _hosts(named.stdout) == [f"gpuportal-{devenvs['notebook'].uid}"]


def test_with_a_separate_apps_origin_the_proxy_command_dials_it(run_cli, devenvs, settings):
    # The portal's own host then has no /w/ at all (helm/templates/ingress.yaml): the tunnel must go there.
    settings.PROXY_ORIGIN = "https://{uid}.apps.example.org"
    uid = devenvs["mine"].uid
    listed = run_cli("ssh-config")
    assert listed.returncode == 0, listed.stderr
    assert f"ssh-proxy --origin https://{uid}.apps.example.org %h\n" in listed.stdout


def test_on_one_origin_the_proxy_command_needs_no_origin(run_cli, devenvs):
    listed = run_cli("ssh-config", devenvs["mine"].uid)
    assert listed.returncode == 0, listed.stderr
    assert "ssh-proxy %h\n" in listed.stdout
    assert "--origin" not in listed.stdout
