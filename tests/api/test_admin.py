"""Admin: quota changes take effect at once and are recorded; workload actions; the usage report."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from api.models import ApiToken
from jobs.models import Quota, QuotaChange, State, Workload


@pytest.fixture
def admin_client(client, world):
    client.force_login(world.admin)
    return client


def _queued(world, submit, gpus: int) -> Workload:
    return Workload.objects.get(uid=submit(gpu_count=gpus)["uid"])


def _team_form(world, quotas: list[Quota], new_values: dict[int, int], delete: set[int] = frozenset()) -> dict:
    team = world.team
    members = list(team.memberships.order_by("id"))
    data = {
        "name": team.name,
        "slug": team.slug,
        "monthly_gpu_hour_budget": "",
        "fair_share_half_life_hours": "24",
        "default_retry_limit": "3",
        "memberships-TOTAL_FORMS": str(len(members)),
        "memberships-INITIAL_FORMS": str(len(members)),
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
        "quotas-TOTAL_FORMS": str(len(quotas)),
        "quotas-INITIAL_FORMS": str(len(quotas)),
        "quotas-MIN_NUM_FORMS": "0",
        "quotas-MAX_NUM_FORMS": "1000",
        "quota_changes-TOTAL_FORMS": "0",
        "quota_changes-INITIAL_FORMS": "0",
        "quota_changes-MIN_NUM_FORMS": "0",
        "quota_changes-MAX_NUM_FORMS": "1000",
    }
    for i, m in enumerate(members):
        data |= {f"memberships-{i}-id": m.id, f"memberships-{i}-team": team.id, f"memberships-{i}-user": m.user_id,
                 f"memberships-{i}-role": m.role}  # fmt: skip
    for i, q in enumerate(quotas):
        data |= {f"quotas-{i}-id": q.id, f"quotas-{i}-team": team.id, f"quotas-{i}-gpu_type": q.gpu_type_id,
                 f"quotas-{i}-max_gpus": new_values.get(q.id, q.max_gpus), f"quotas-{i}-borrowing_limit": "0"}  # fmt: skip
        if q.id in delete:
            data[f"quotas-{i}-DELETE"] = "on"
    return data


def test_team_page_shows_quota_use(admin_client, world, submit):
    running = _queued(world, submit, 2)
    Workload.objects.filter(id=running.id).update(state=State.RUNNING)
    _queued(world, submit, 3)
    page = admin_client.get(f"/admin/jobs/team/{world.team.id}/change/")
    assert page.status_code == 200
    assert "2 in use, 3 queued, of 4" in page.content.decode()


def test_quota_raise_in_team_page_is_recorded_and_admits_at_once(admin_client, world, submit):
    quota = Quota.objects.get(team=world.team, gpu_type=world.p100)
    Quota.objects.filter(id=quota.id).update(max_gpus=2)
    holding = _queued(world, submit, 2)
    Workload.objects.filter(id=holding.id).update(state=State.RUNNING)
    waiting = _queued(world, submit, 2)
    quotas = list(Quota.objects.filter(team=world.team).order_by("gpu_type__slug"))
    response = admin_client.post(
        f"/admin/jobs/team/{world.team.id}/change/", _team_form(world, quotas, {quota.id: 4}), follow=True
    )
    assert response.status_code == 200
    assert "admitted 1 queued workload" in response.content.decode()
    change = QuotaChange.objects.get()
    assert (change.team, change.gpu_type, change.old_max_gpus, change.new_max_gpus) == (world.team, world.p100, 2, 4)
    assert change.changed_by == world.admin
    assert abs((timezone.now() - change.changed_at).total_seconds()) < 60
    assert change.admitted == 1
    waiting.refresh_from_db()
    assert waiting.state == State.SUBMITTING
    # The change is visible in admin, on the team page and in its own list.
    log_page = admin_client.get("/admin/jobs/quotachange/")
    assert log_page.status_code == 200
    assert "Tesla P100" in log_page.content.decode()
    team_page = admin_client.get(f"/admin/jobs/team/{world.team.id}/change/").content.decode()
    assert "Quota changes" in team_page


def test_quota_removed_in_team_page_is_recorded(admin_client, world):
    k80 = Quota.objects.get(team=world.team, gpu_type=world.k80)
    quotas = list(Quota.objects.filter(team=world.team).order_by("gpu_type__slug"))
    response = admin_client.post(
        f"/admin/jobs/team/{world.team.id}/change/", _team_form(world, quotas, {}, delete={k80.id}), follow=True
    )
    assert response.status_code == 200
    change = QuotaChange.objects.get()
    assert (change.gpu_type, change.old_max_gpus, change.new_max_gpus) == (world.k80, 2, None)
    assert not Quota.objects.filter(id=k80.id).exists()


def test_quota_edited_on_its_own_page(admin_client, world):
    quota = Quota.objects.get(team=world.team, gpu_type=world.k80)
    response = admin_client.post(
        f"/admin/jobs/quota/{quota.id}/change/",
        {"team": world.team.id, "gpu_type": world.k80.id, "max_gpus": 6, "borrowing_limit": 0},
        follow=True,
    )
    assert response.status_code == 200
    change = QuotaChange.objects.get()
    assert (change.old_max_gpus, change.new_max_gpus, change.changed_by) == (2, 6, world.admin)
    listing = admin_client.get("/admin/jobs/quota/").content.decode()
    assert "Tesla K80" in listing


def test_unchanged_save_records_nothing(admin_client, world):
    quotas = list(Quota.objects.filter(team=world.team).order_by("gpu_type__slug"))
    admin_client.post(f"/admin/jobs/team/{world.team.id}/change/", _team_form(world, quotas, {}))
    assert QuotaChange.objects.count() == 0


def test_quota_change_log_is_read_only(admin_client, world):
    QuotaChange.objects.create(team=world.team, gpu_type=world.p100, old_max_gpus=1, new_max_gpus=2)
    change = QuotaChange.objects.get()
    assert admin_client.get("/admin/jobs/quotachange/add/").status_code == 403
    assert admin_client.post(f"/admin/jobs/quotachange/{change.id}/delete/", {"post": "yes"}).status_code == 403


def test_workload_actions_cancel_and_rerun_admission(admin_client, world, submit):
    first = _queued(world, submit, 1)
    second = _queued(world, submit, 1)
    response = admin_client.post(
        "/admin/jobs/workload/",
        {"action": "cancel_workloads", "_selected_action": [first.id]},
        follow=True,
    )
    assert response.status_code == 200
    first.refresh_from_db()
    assert first.state == State.CANCELLED
    response = admin_client.post(
        "/admin/jobs/workload/",
        {"action": "rerun_admission", "_selected_action": [second.id]},
        follow=True,
    )
    assert "1 queued workload(s) admitted" in response.content.decode()
    second.refresh_from_db()
    assert second.state == State.SUBMITTING
    # Cancelling a finished workload is refused with a message, not an error page.
    response = admin_client.post(
        "/admin/jobs/workload/", {"action": "cancel_workloads", "_selected_action": [first.id]}, follow=True
    )
    assert "already finished" in response.content.decode()


def test_workload_page_is_read_only_for_kubernetes_fields(admin_client, world, submit):
    workload = _queued(world, submit, 1)
    page = admin_client.get(f"/admin/jobs/workload/{workload.id}/change/").content.decode()
    assert 'name="node_name"' not in page
    assert 'name="priority"' in page
    assert "Timeline" in page
    assert "Submitted" in page
    listing = admin_client.get("/admin/jobs/workload/?state__exact=QUEUED&q=olivia")
    assert workload.uid in listing.content.decode()


def test_usage_report_page_and_csv(admin_client, world):
    start = timezone.now().replace(hour=8, minute=0, second=0, microsecond=0) - timedelta(days=1)
    Workload.objects.create(
        team=world.team, owner=world.owner, name="ran", kind="batch", image="docker.io/x:1", gpu_type=world.k80,
        gpu_count=2, time_limit_seconds=86400, state=State.SUCCEEDED, created_at=start, started_at=start,
        finished_at=start + timedelta(hours=5), lost_gpu_seconds=2 * 45 * 60,  # preempted 45 min after a checkpoint
    )  # fmt: skip
    first = (timezone.localdate() - timedelta(days=3)).isoformat()
    last = timezone.localdate().isoformat()
    page = admin_client.get(f"/admin/jobs/workload/usage-report/?start={first}&end={last}")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Vision" in html
    assert "10.0" in html  # GPU-hours
    assert "5.0" in html  # weighted at 0.5
    assert "Of them lost to stops" in html
    assert "<td>1.5</td>" in html
    export = admin_client.get(f"/admin/jobs/workload/usage-report/?start={first}&end={last}&export=csv")
    assert export["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(export.content.decode())))
    assert rows == [
        [
            "team",
            "gpu_type",
            "billing_weight",
            "gpu_hours",
            "weighted_gpu_hours",
            "borrowed_gpu_hours",
            "gpu_equivalent_hours",
            "lost_gpu_hours",
        ],
        ["Vision", "Tesla K80", "0.500", "10.0", "5.0", "0.0", "10.0", "1.5"],
    ]
    bad = admin_client.get(f"/admin/jobs/workload/usage-report/?start={last}&end={first}")
    assert "The end comes before the start." in bad.content.decode()
    assert "GPU usage report" in admin_client.get("/admin/jobs/workload/").content.decode()


def test_usage_report_needs_staff(client, world):
    client.force_login(world.owner)
    response = client.get("/admin/jobs/workload/usage-report/")
    assert response.status_code == 302


def test_admin_revokes_tokens(admin_client, world):
    token = ApiToken.objects.get(user=world.owner)
    admin_client.post("/admin/api/apitoken/", {"action": "revoke_tokens", "_selected_action": [token.id]})
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert token.revoked_by == world.admin
    assert world.client("owner").get("/api/v1/workloads/").status_code == 401


@pytest.mark.parametrize("team", ["not-a-number", "99999999999999999999999"])
def test_an_idle_policy_for_a_team_that_is_not_a_team_is_a_form_error(admin_client, world, team):
    """The team box is an autocomplete: a value that is no team's id (a crafted or stale POST) shows the
    form again with the error, never a 500 while the widget looks the value up."""
    from telemetry.models import IdlePolicy

    data = {"team": team, "enabled": "on", "threshold_percent": "5", "warn_after_hours": "2", "stop_after_hours": "4"}
    page = admin_client.post("/admin/telemetry/idlepolicy/add/", data)
    assert page.status_code == 200
    assert "Select a valid choice" in page.content.decode()
    assert not IdlePolicy.objects.exists()


def test_a_team_member_row_naming_no_user_is_a_form_error(admin_client, world):
    quotas = list(Quota.objects.filter(team=world.team).order_by("id"))
    data = _team_form(world, quotas, {}) | {"memberships-0-user": "olivia"}  # a username where an id goes
    page = admin_client.post(f"/admin/jobs/team/{world.team.id}/change/", data)
    assert page.status_code == 200
    assert "Select a valid choice" in page.content.decode()


def _admins_with_actions(admin_client, world):
    from django.contrib import admin
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = world.admin
    for model, model_admin in admin.site._registry.items():
        actions = list(model_admin.get_actions(request))
        if actions:
            yield model, actions[0]


@pytest.mark.parametrize("selected", ["abc", "99999999999999999999999", "\x00", "-1", "12abc"])
def test_every_admin_action_refuses_a_selection_that_is_no_key(admin_client, world, selected):
    """A crafted or stale `_selected_action` ("abc" for a numeric id) on any changelist runs no action and
    says why; stock Django answers 500 while filtering by it."""
    from django.contrib import admin

    tried = 0
    for model, action in _admins_with_actions(admin_client, world):
        meta = model._meta
        url = f"/admin/{meta.app_label}/{meta.model_name}/"
        response = admin_client.post(url, {"action": action, "_selected_action": [selected]}, follow=True)
        assert response.status_code == 200, url
        assert "No items have been changed" in response.content.decode(), url
        tried += 1
    assert tried >= len(admin.site._registry) // 2


def test_an_admin_action_on_ids_not_on_its_list_changes_nothing(admin_client, world, submit):
    """Ids of another model (a workload's id on the tokens' list) or of rows deleted meanwhile: the action runs
    on none of the selection, not on the part that happens to exist."""
    token = ApiToken.objects.get(user=world.owner)
    workload = _queued(world, submit, 1)
    missing = max(ApiToken.objects.order_by("-id").values_list("id", flat=True)[0], workload.id) + 1000
    response = admin_client.post(
        "/admin/api/apitoken/", {"action": "revoke_tokens", "_selected_action": [token.id, missing]}, follow=True
    )
    assert "not on this list" in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is None
    # A UUID-keyed or text-keyed model is no different: the workload list given a token's selection.
    response = admin_client.post(
        "/admin/jobs/workload/", {"action": "cancel_workloads", "_selected_action": ["abc", workload.id]}, follow=True
    )
    assert "No items have been changed" in response.content.decode()
    workload.refresh_from_db()
    assert workload.state != State.CANCELLED


BEYOND_64_BITS = "99999999999999999999999"


def test_a_dataset_for_a_team_id_beyond_64_bits_is_a_form_error(admin_client, world):
    """The Dataset form's teams box took the number to the database: OverflowError on SQLite, a 500."""
    from jobs.models import Dataset

    data = {"name": "imagenet", "claim_name": "imagenet", "teams": [str(world.team.id), BEYOND_64_BITS]}
    page = admin_client.post("/admin/jobs/dataset/add/", data)
    assert page.status_code == 200
    assert "Select a valid choice" in page.content.decode()
    assert not Dataset.objects.exists()


def _relation_fields(admin_client):
    """(add page, field name, many) for every choice of other rows on every admin add form."""
    from django import forms
    from django.contrib import admin

    for model in admin.site._registry:
        url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/add/"
        page = admin_client.get(url)
        if page.status_code != 200:
            continue  # no add form (read-only records)
        for name, field in page.context["adminform"].form.fields.items():
            if isinstance(field, forms.ModelChoiceField):
                yield url, name, isinstance(field, forms.ModelMultipleChoiceField)


@pytest.mark.parametrize("value", [BEYOND_64_BITS, "-" + BEYOND_64_BITS, "1e400", "\x00"])
def test_no_admin_form_fails_on_a_choice_that_cannot_be_a_row(admin_client, world, value):
    """Any select or multi-select of other rows, given a value no key can be, shows the form again."""
    tried = 0
    for url, name, many in _relation_fields(admin_client):
        page = admin_client.post(url, {name: [value] if many else value})
        assert page.status_code == 200, (url, name)
        assert "Select a valid choice" in page.content.decode() or "valid" in page.content.decode(), (url, name)
        tried += 1
    assert tried >= 10


def test_the_admins_many_to_many_boxes_refuse_a_number_past_the_key_before_asking_the_database(world):
    """PostgreSQL compares such a number and finds no row; SQLite's driver raises OverflowError. The box
    refuses it before any query, so both say the same."""
    from django import forms
    from django.contrib import admin
    from django.db import connection
    from django.test import RequestFactory
    from django.test.utils import CaptureQueriesContext

    from jobs.models import Dataset

    request = RequestFactory().get("/admin/")
    request.user = world.admin
    field = admin.site._registry[Dataset].get_form(request)().fields["teams"]
    with CaptureQueriesContext(connection) as queries, pytest.raises(forms.ValidationError) as refused:
        field.clean([BEYOND_64_BITS])
    assert refused.value.code == "invalid_choice"
    assert len(queries) == 0


@pytest.mark.parametrize("how", ["page", "list action"])
def test_deleting_a_cohort_re_runs_sharing_for_its_teams_from_its_page_or_the_list(
    admin_client, world, how, monkeypatch
):
    from jobs.admin import sharing as cohort_admin
    from jobs.models import Cohort

    cohort = Cohort.objects.create(name="Deleted lab")
    world.team.cohort = cohort
    world.team.save(update_fields=["cohort"])
    told: list[list[int]] = []
    monkeypatch.setattr(cohort_admin, "sharing_changed", told.append)
    if how == "page":
        response = admin_client.post(f"/admin/jobs/cohort/{cohort.id}/delete/", {"post": "yes"})
    else:
        response = admin_client.post(
            "/admin/jobs/cohort/", {"action": "delete_selected", "_selected_action": [cohort.id], "post": "yes"}
        )
    assert response.status_code == 302
    assert not Cohort.objects.filter(id=cohort.id).exists()
    assert told == [[world.team.id]]


def test_a_team_admins_usage_report_shows_only_the_teams_they_may_see(client, world):
    # Staff who are not superusers see their own teams' workloads in admin (jobs.policy); the usage report
    # beside that list showed every team's GPU-hours, and offered every team to pick.
    from django.contrib.auth.models import Permission

    start = timezone.now().replace(hour=8, minute=0, second=0, microsecond=0) - timedelta(days=1)
    for team, owner in [(world.team, world.owner), (world.other_team, world.outsider)]:
        Workload.objects.create(
            team=team, owner=owner, name="ran", kind="batch", image="docker.io/x:1", gpu_type=world.p100,
            gpu_count=1, time_limit_seconds=86400, state=State.SUCCEEDED, created_at=start, started_at=start,
            finished_at=start + timedelta(hours=3),
        )  # fmt: skip
    staff = world.manager
    staff.is_staff = True
    staff.save()
    staff.user_permissions.add(Permission.objects.get(codename="view_workload"))
    client.force_login(staff)
    first = (timezone.localdate() - timedelta(days=3)).isoformat()
    last = timezone.localdate().isoformat()
    page = client.get(f"/admin/jobs/workload/usage-report/?start={first}&end={last}")
    assert page.status_code == 200
    assert [line["team"] for line in page.context["report"]["lines"]] == ["Vision"]
    assert page.context["report"]["total_gpu_hours"] == 3.0
    assert list(page.context["form"].fields["teams"].queryset) == [world.team]
    asked = client.get(f"/admin/jobs/workload/usage-report/?start={first}&end={last}&teams={world.other_team.id}")
    assert "teams" in asked.context["form"].errors
    export = client.get(f"/admin/jobs/workload/usage-report/?start={first}&end={last}&export=csv")
    assert "Language" not in export.content.decode()


def test_provider_accounts_are_not_added_by_hand(admin_client, world):
    # Every field of a provider account is read-only (the first sign-in makes it): its add page saved an
    # empty row and answered 500 (no user). There is no add page and no Add button.
    assert admin_client.post("/admin/identity/provideraccount/add/", {}).status_code == 403
    listing = admin_client.get("/admin/identity/provideraccount/").content.decode()
    assert "/admin/identity/provideraccount/add/" not in listing


def test_a_quota_lowered_below_what_runs_says_running_work_keeps_running(admin_client, world, submit):
    running = _queued(world, submit, 3)
    Workload.objects.filter(id=running.id).update(state=State.RUNNING)
    quota = Quota.objects.get(team=world.team, gpu_type=world.p100)
    response = admin_client.post(
        f"/admin/jobs/quota/{quota.id}/change/",
        {"team": world.team.id, "gpu_type": world.p100.id, "max_gpus": 1, "borrowing_limit": 0},
        follow=True,
    )
    page = response.content.decode()
    assert "4 GPUs → 1 GPUs" in page
    assert "3 GPUs are in use, more than the new quota: running work keeps running (nothing is stopped" in page
    assert "new work of this team and type starts once fewer than 1 are in use" in page
    running.refresh_from_db()
    assert running.state == State.RUNNING


def test_a_quota_removed_while_work_runs_says_what_happens_to_it(admin_client, world, submit):
    running = _queued(world, submit, 2)
    Workload.objects.filter(id=running.id).update(state=State.RUNNING)
    quotas = list(Quota.objects.filter(team=world.team).order_by("gpu_type__slug"))
    p100 = Quota.objects.get(team=world.team, gpu_type=world.p100)
    response = admin_client.post(
        f"/admin/jobs/team/{world.team.id}/change/", _team_form(world, quotas, {}, delete={p100.id}), follow=True
    )
    page = response.content.decode()
    assert "2 GPUs are in use, more than the new quota: running work keeps running (nothing is stopped" in page
    assert "queued work of this team and type waits until it has a quota again" in page


def test_an_admin_takes_a_node_out_and_puts_it_back(admin_client, world, submit):
    from jobs.models import GpuHealthMark, GpuNode
    from jobs.services.cluster.node_health import nodes_to_avoid

    node = GpuNode.objects.get(name="gpu-p100-1")
    running = _queued(world, submit, 1)
    Workload.objects.filter(id=running.id).update(state=State.RUNNING, node_name=node.name)
    response = admin_client.post(
        "/admin/jobs/gpunode/", {"action": "take_out", "_selected_action": [node.id]}, follow=True
    )
    page = response.content.decode()
    assert "Took 1 node(s) out: new work avoids gpu-p100-1" in page
    assert "1 workload(s) running there keep running" in page
    assert nodes_to_avoid() == ("gpu-p100-1",)
    mark = GpuHealthMark.objects.get()
    assert mark.cause == GpuHealthMark.Cause.ADMIN
    assert "ada" in mark.detail
    running.refresh_from_db()
    assert running.state == State.RUNNING
    # Taking it out twice keeps one mark; the list says which nodes are out.
    admin_client.post("/admin/jobs/gpunode/", {"action": "take_out", "_selected_action": [node.id]})
    assert GpuHealthMark.objects.count() == 1
    listing = admin_client.get("/admin/jobs/gpunode/?q=p100-1").content.decode()
    assert "gpu-p100-1" in listing
    assert "gpu-p100-2" not in listing
    response = admin_client.post(
        "/admin/jobs/gpunode/", {"action": "put_back", "_selected_action": [node.id]}, follow=True
    )
    assert "Put 1 node(s) back" in response.content.decode()
    assert nodes_to_avoid() == ()


def test_the_workload_list_says_who_waits_and_why_and_finds_a_teams_work(admin_client, world, submit):
    from django.utils.html import escape

    holding = _queued(world, submit, 4)
    Workload.objects.filter(id=holding.id).update(state=State.RUNNING)
    waiting = _queued(world, submit, 2)
    waiting.refresh_from_db()
    assert waiting.state == State.QUEUED
    assert waiting.message
    listing = admin_client.get("/admin/jobs/workload/?state__exact=QUEUED").content.decode()
    assert "Why (reason and message)" in listing
    assert escape(waiting.message[:40]) in listing
    found = admin_client.get("/admin/jobs/workload/?q=Vision").content.decode()
    assert str(waiting.uid) in found
    assert str(waiting.uid) not in admin_client.get("/admin/jobs/workload/?q=Language").content.decode()


def test_usage_report_per_person_on_the_page_and_in_the_csv(admin_client, world):
    start = timezone.now().replace(hour=8, minute=0, second=0, microsecond=0) - timedelta(days=1)
    for owner, hours in [(world.owner, 3), (world.teammate, 1)]:
        Workload.objects.create(
            team=world.team, owner=owner, name="ran", kind="batch", image="docker.io/x:1", gpu_type=world.p100,
            gpu_count=1, time_limit_seconds=86400, state=State.SUCCEEDED, created_at=start, started_at=start,
            finished_at=start + timedelta(hours=hours),
        )  # fmt: skip
    first = (timezone.localdate() - timedelta(days=3)).isoformat()
    last = timezone.localdate().isoformat()
    page = admin_client.get(f"/admin/jobs/workload/usage-report/?start={first}&end={last}&per=user")
    assert page.status_code == 200
    lines = [(line["team"], line["user"], line["gpu_hours"]) for line in page.context["report"]["lines"]]
    assert lines == [("Vision", "olivia", 3.0), ("Vision", "tom", 1.0)]
    assert '<th scope="col">Person</th>' in page.content.decode()
    export = admin_client.get(f"/admin/jobs/workload/usage-report/?start={first}&end={last}&per=user&export=csv")
    rows = list(csv.reader(io.StringIO(export.content.decode())))
    assert rows[0][:3] == ["team", "user", "gpu_type"]
    assert [row[:4] for row in rows[1:]] == [
        ["Vision", "olivia", "Tesla P100", "1.000"],
        ["Vision", "tom", "Tesla P100", "1.000"],
    ]
    # Per team (the default) keeps its columns; a "per" that is neither is a form error naming the field.
    assert (
        admin_client.get(f"/admin/jobs/workload/usage-report/?start={first}&end={last}").context["report"]["lines"][0][
            "gpu_hours"
        ]
        == 4.0
    )
    bad = admin_client.get(f"/admin/jobs/workload/usage-report/?start={first}&end={last}&per=planet")
    assert bad.status_code == 200
    assert "per" in bad.context["form"].errors


def _user_form(admin_client, user, **changes) -> dict:
    """The person's change form as the admin page fills it, with `changes` on top."""
    form = admin_client.get(f"/admin/auth/user/{user.pk}/change/").context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None and name != "password"}
    data["groups"] = [group.pk for group in data.get("groups", [])]
    data["user_permissions"] = [perm.pk for perm in data.get("user_permissions", [])]
    for stamp in ("last_login", "date_joined"):
        if data.get(stamp):
            data[f"{stamp}_0"], data[f"{stamp}_1"] = data[stamp].strftime("%Y-%m-%d"), data[stamp].strftime("%H:%M:%S")
            del data[stamp]
    data.update({key: value for key, value in changes.items() if value is not False})
    for key, value in changes.items():
        if value is False:
            data.pop(key, None)  # an unticked box is not sent
    return data


def test_disabling_a_person_cancels_what_they_queued_and_says_what_still_runs(admin_client, world, submit):
    """newcomer15: a disabled person's queued work still started (for nobody who could sign in to use it)."""
    queued = _queued(world, submit, 1)
    running = _queued(world, submit, 1)
    Workload.objects.filter(id=running.id).update(state=State.RUNNING, started_at=timezone.now())
    teammates = _queued(world, lambda **kw: submit("teammate", **kw), 1)
    response = admin_client.post(
        f"/admin/auth/user/{world.owner.pk}/change/",
        _user_form(admin_client, world.owner, is_active=False),
        follow=True,
    )
    page = response.content.decode()
    world.owner.refresh_from_db()
    assert not world.owner.is_active
    assert "Olivia can no longer sign in or use an API token. Their 1 queued workload(s) were cancelled" in page
    assert "1 workload(s) of theirs still hold GPUs and keep running" in page
    queued.refresh_from_db(), running.refresh_from_db(), teammates.refresh_from_db()
    assert (queued.state, running.state, teammates.state) == (State.CANCELLED, State.RUNNING, State.QUEUED)
    assert queued.events.last().message == "Cancelled before it started: olivia's account was disabled by ada."
    link = re.search(r'href="(/admin/jobs/workload/\?[^"]+)">stop them', page).group(1).replace("&amp;", "&")
    listed = admin_client.get(link)
    assert listed.status_code == 200
    assert list(listed.context["cl"].result_list) == [running]


def test_saving_a_disabled_person_again_or_an_active_one_cancels_nothing(admin_client, world, submit):
    queued = _queued(world, submit, 1)
    response = admin_client.post(
        f"/admin/auth/user/{world.owner.pk}/change/",
        _user_form(admin_client, world.owner, first_name="Olivia"),
        follow=True,
    )
    assert "can no longer sign in" not in response.content.decode()
    queued.refresh_from_db()
    assert queued.state == State.QUEUED


def _lower_p100(admin_client, world, *, to: int, borrowing: int):
    quota = Quota.objects.get(team=world.team, gpu_type=world.p100)
    form = {"team": world.team.id, "gpu_type": world.p100.id, "max_gpus": to, "borrowing_limit": borrowing}
    response = admin_client.post(f"/admin/jobs/quota/{quota.id}/change/", form, follow=True)
    return response.content.decode()


def _cohort_running(world, submit, gpus: int, *, with_lender: bool) -> Workload:
    from jobs.models import Cohort

    cohort = Cohort.objects.create(name="Shared lab")
    for team in (world.team, world.other_team) if with_lender else (world.team,):
        team.cohort = cohort
        team.save()
    running = _queued(world, submit, gpus)
    Workload.objects.filter(id=running.id).update(state=State.RUNNING, started_at=timezone.now())
    return running


def test_a_quota_lowered_in_a_cohort_says_borrowing_may_start_work_sooner(admin_client, world, submit):
    """The other team's idle P100s are lent: the 3-GPU run goes on as 1 own + 2 borrowed."""
    running = _cohort_running(world, submit, 3, with_lender=True)
    page = _lower_p100(admin_client, world, to=1, borrowing=2)
    assert "3 GPUs are in use, more than the new quota: running work keeps running (nothing is stopped" in page
    assert "starts once fewer than 1 are in use, or sooner on GPUs its cohort leaves idle (up to 2 borrowed)." in page
    running.refresh_from_db()
    assert running.state == State.RUNNING


def test_a_quota_lowered_in_a_cohort_that_cannot_lend_says_what_was_stopped(admin_client, world, submit):
    """newcomer15's message said "nothing is stopped" for every team; in a cohort, borrowed work beyond what it
    lends is stopped at once (admission.settle_running), and the admin heard nothing of it."""
    running = _cohort_running(world, submit, 3, with_lender=False)
    page = _lower_p100(admin_client, world, to=1, borrowing=2)
    running.refresh_from_db()
    assert running.state == State.FAILED  # not restartable: a stopped batch job ends
    assert "1 workload(s) running on borrowed GPUs were stopped, as the team may no longer borrow that much" in page
    assert "nothing is stopped" not in page
