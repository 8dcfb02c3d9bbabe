"""The service page's SSH card (issue 39): the ProxyCommand line dials the services' own origin when they have
one, and a service whose image does not run an SSH server says so instead of promising what cannot work."""

from __future__ import annotations

import pytest
from django.test import Client

from jobs.models import CatalogImage, Kind, State, Workload
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def page():
    team = TeamFactory(slug="vision")
    owner = UserFactory(username="olivia")
    MembershipFactory(user=owner, team=team)
    gpu = GpuTypeFactory(slug="p100")

    def open_page(*, runs_sshd: bool) -> tuple[Workload, str]:
        image = CatalogImage.objects.create(
            reference=f"registry.local/img-{runs_sshd}:1", title=f"img {runs_sshd}", runs_sshd=runs_sshd
        )
        workload = Workload.objects.create(
            team=team, owner=owner, name="box", kind=Kind.SERVICE, image=image.reference, catalog_image=image,
            gpu_type=gpu, gpu_count=1, port=8888, time_limit_seconds=3600, state=State.RUNNING,
        )  # fmt: skip
        client = Client()
        client.force_login(owner)
        response = client.get(f"/workloads/{workload.uid}/")
        assert response.status_code == 200
        return workload, response.content.decode()

    return open_page


def test_a_dev_environment_s_card_promises_ssh_on_the_portal_s_own_origin(page):
    workload, html = page(runs_sshd=True)
    assert f"ProxyCommand='gpuportal ssh-proxy %h' user@{workload.uid}" in html
    assert "does not say it runs an SSH server" not in html


def test_with_a_separate_apps_origin_the_line_dials_it(page, settings):
    settings.PROXY_ORIGIN = "https://{uid}.apps.example.org"
    workload, html = page(runs_sshd=True)
    assert f"ssh-proxy --origin https://{workload.uid}.apps.example.org %h" in html


def test_an_image_without_sshd_says_so(page):
    _, html = page(runs_sshd=False)
    assert "does not say it runs an SSH server" in html
