"""Each submission and sharing rule is judged once and refused alike through every front end that can break
it: the launch page, the REST API, the team's sharing page and Django admin (the CLI's side of the same
rules is tests/unit/test_spec_rules.py). Every refusal names its field and stores nothing."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

import spec_rules
from api.serializers import _TYPE_CHECKS, WorkloadCreateSerializer
from jobs.forms import LaunchForm
from jobs.models import GpuType, Quota, Team, Workload
from jobs.services.queue.settings_changes import team_sharing_update
from jobs.services.spec_fields import FIELDS as SPEC_FIELDS
from tests.api.conftest import batch_spec
from tests.api.test_admin import _team_form

BAD_NAME = spec_rules.env_name_problem("1BAD")


def _launch(client, **fields):
    data = {
        "name": "", "kind": "batch", "catalog_image": "", "image": "docker.io/library/python:3.12",
        "gpu_type": "p100", "gpu_count": "1", "command": "python train.py", "args": "", "env_name": [],
        "env_value": [], "port": "", "time_limit": "1", "time_limit_unit": "hours",
    }  # fmt: skip
    data.update(fields)
    return client.post(reverse("launch"), data)


def _api_fields(response) -> dict[str, list[str]]:
    assert 400 <= response.status_code < 500, response.content
    return response.json()["error"]["fields"]


# --- a variable name -------------------------------------------------------------------------------
def test_a_bad_variable_name_is_refused_with_one_message_by_page_and_api(client, world):
    client.force_login(world.owner)
    page = _launch(client, env_name=["1BAD"], env_value=["x"])
    assert page.status_code == 400
    assert page.context["form"].env_errors == [BAD_NAME]

    api = world.client("owner").post(
        "/api/v1/workloads/", batch_spec(env=[{"name": "1BAD", "value": "x"}]), format="json"
    )
    assert _api_fields(api) == {"env": [BAD_NAME]}
    batch = world.client("owner").post(
        "/api/v1/workloads/batch/", {"workloads": [batch_spec(env=[{"name": "1BAD", "value": "x"}])]}, format="json"
    )
    assert _api_fields(batch) == {"workloads[0].env": [BAD_NAME]}
    assert not Workload.objects.exists()


def test_a_secrets_variable_name_is_refused_with_the_same_words_on_the_page(client, world):
    # The launch form checks a secret's variable as it is typed beside the secret; the rule is the same.
    form = LaunchForm(
        {"kind": "batch", "gpu_type": "p100", "gpu_count": "1", "time_limit_unit": "hours", "secrets": ["key"],
         "secret_env_key": "1BAD"},
        catalog=[], gpu_types=list(GpuType.objects.all()), secrets=["key"],
    )  # fmt: skip
    assert not form.is_valid()
    assert form.secret_env_errors == {"key": BAD_NAME}


# --- a sweep's name and size ------------------------------------------------------------------------
def test_a_sweep_name_without_room_for_its_suffixes_is_refused_on_the_page_and_by_the_api(client, world):
    name = "n" * spec_rules.MAX_NAME
    client.force_login(world.owner)
    page = _launch(client, name=name, copies="10")
    assert page.status_code == 400
    assert page.context["form"].errors["name"] == [spec_rules.sweep_name_problem(name, 10)]
    # The API's batch takes its items as named (the CLI names them BASE-i): each over-long name is refused.
    items = [batch_spec(name=f"{name}-{i}") for i in range(2)]
    fields = _api_fields(world.client("owner").post("/api/v1/workloads/batch/", {"workloads": items}, format="json"))
    assert set(fields) == {"workloads[0].name", "workloads[1].name"}
    assert not Workload.objects.exists()


def test_the_one_sweep_cap_on_the_page_and_the_api(client, world):
    over = spec_rules.SWEEP_AT_MOST + 1
    client.force_login(world.owner)
    page = _launch(client, copies=str(over))
    assert page.status_code == 400
    assert "copies" in page.context["form"].errors
    items = [batch_spec(name=f"s-{i}") for i in range(over)]
    fields = _api_fields(world.client("owner").post("/api/v1/workloads/batch/", {"workloads": items}, format="json"))
    assert fields == {
        "workloads": [f"At most {spec_rules.SWEEP_AT_MOST} workloads in one request; send the rest in another."]
    }
    assert not Workload.objects.exists()


# --- a workload's priority ----------------------------------------------------------------------------
def test_priority_out_of_range_is_refused_by_the_api_and_by_admin(client, world, submit):
    fields = _api_fields(world.client("manager").post("/api/v1/workloads/", batch_spec(priority=101), format="json"))
    assert list(fields) == ["priority"]
    workload = Workload.objects.get(uid=submit()["uid"])
    client.force_login(world.admin)
    events = {"events-TOTAL_FORMS": "0", "events-INITIAL_FORMS": "0"}
    refused = client.post(f"/admin/jobs/workload/{workload.id}/change/", {"priority": "101", **events})
    assert refused.status_code == 200  # the form again, with its error
    assert "priority" in refused.context["adminform"].form.errors
    workload.refresh_from_db()
    assert workload.priority == 0
    saved = client.post(f"/admin/jobs/workload/{workload.id}/change/", {"priority": "100", **events})
    assert saved.status_code == 302
    workload.refresh_from_db()
    assert workload.priority == 100


# --- a team's sharing rules ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("page_field", "admin_field", "value"),
    [
        ("half_life_hours", "fair_share_half_life_hours", "2161"),
        ("half_life_hours", "fair_share_half_life_hours", "0"),
        ("user_max_queued", "user_max_queued", "0"),
        ("user_max_queued", "user_max_queued", "10001"),
        ("user_max_gpus_p100", "quotas-0-user_max_gpus", "0"),
        ("user_max_gpus_p100", "quotas-0-user_max_gpus", "10001"),
    ],
)
def test_sharing_bounds_are_the_same_on_the_managers_page_and_in_admin(client, world, page_field, admin_field, value):
    before = (Team.objects.values().get(id=world.team.id), list(Quota.objects.values("user_max_gpus")))
    client.force_login(world.manager)
    page = {"half_life_hours": "24", "user_max_queued": "", "user_max_gpus_p100": "", "user_max_gpus_k80": ""}
    response = client.post(reverse("queue"), {**page, page_field: value})
    assert response.status_code == 400
    assert page_field in response.context["form"].errors

    client.force_login(world.admin)
    quotas = list(Quota.objects.filter(team=world.team).select_related("gpu_type").order_by("gpu_type__slug"))
    quotas.sort(key=lambda q: q.gpu_type.slug != "p100")  # the p100 quota is quotas-0
    response = client.post(
        f"/admin/jobs/team/{world.team.id}/change/", {**_team_form(world, quotas, {}), admin_field: value}
    )
    assert response.status_code == 200, "admin saved what the manager's page refuses"
    assert (Team.objects.values().get(id=world.team.id), list(Quota.objects.values("user_max_gpus"))) == before


def test_sharing_bounds_at_their_limits_are_saved_by_admin(client, world):
    client.force_login(world.admin)
    quotas = list(Quota.objects.filter(team=world.team).select_related("gpu_type").order_by("gpu_type__slug"))
    form = {**_team_form(world, quotas, {}), "fair_share_half_life_hours": "2160", "user_max_queued": "10000"}
    assert client.post(f"/admin/jobs/team/{world.team.id}/change/", form).status_code == 302
    world.team.refresh_from_db()
    assert (world.team.fair_share_half_life_hours, world.team.user_max_queued) == (2160, 10000)


@pytest.mark.parametrize("settings", [{"half_life_hours": 0}, {"user_max_queued": 10_001}, {"user_max_gpus": {1: 0}}])
def test_the_sharing_service_itself_refuses_what_the_model_bounds(world, settings):
    asked = {"fair_share": True, "half_life_hours": 24, "user_max_queued": None, "user_max_gpus": {}, **settings}
    with pytest.raises(ValidationError):
        team_sharing_update(team=world.team, by=world.manager, **asked)
    world.team.refresh_from_db()
    assert not world.team.fair_share


def test_the_api_reads_its_request_shape_off_one_serializer():
    # parse_submission knows exactly the fields the schema documents: the spec's, the team and sharing.
    assert set(_TYPE_CHECKS) == {*SPEC_FIELDS, "team", "shared_with_team"}
    assert set(WorkloadCreateSerializer().fields) == set(_TYPE_CHECKS)


# --- the queue caps -----------------------------------------------------------------------------------
@pytest.mark.parametrize("idempotency_key", [None, "sweep-1"])
def test_the_queue_cap_counts_a_whole_sweep_through_the_api(world, settings, idempotency_key):
    settings.PORTAL_MAX_QUEUED_PER_USER = 2
    headers = {"HTTP_IDEMPOTENCY_KEY": idempotency_key} if idempotency_key else {}
    items = [batch_spec(name=f"s-{i}", gpu_count=4) for i in range(3)]
    response = world.client("owner").post("/api/v1/workloads/batch/", {"workloads": items}, format="json", **headers)
    assert list(_api_fields(response)) == ["queue"]
    assert not Workload.objects.exists()


def test_the_queue_cap_counts_a_whole_sweep_on_the_launch_page(client, world, settings):
    settings.PORTAL_MAX_QUEUED_PER_USER = 2
    client.force_login(world.owner)
    page = _launch(client, name="sweep", copies="3", gpu_count="4")
    assert page.status_code == 400
    assert "copies" in page.context["form"].errors  # the sweep's count is what the cap refuses
    assert not Workload.objects.exists()


@pytest.mark.parametrize("idempotency_key", [None, "one-1"])
def test_the_queue_cap_refuses_one_more_through_the_api(world, settings, submit, idempotency_key):
    settings.PORTAL_MAX_QUEUED_PER_USER = 1
    submit(gpu_count=4)
    headers = {"HTTP_IDEMPOTENCY_KEY": idempotency_key} if idempotency_key else {}
    response = world.client("owner").post("/api/v1/workloads/", batch_spec(gpu_count=4), format="json", **headers)
    assert list(_api_fields(response)) == ["queue"]
    assert Workload.objects.count() == 1
