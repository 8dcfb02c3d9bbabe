"""The submission's fields are described once (jobs.services.spec_fields): the launch form and the API's
serializer take their limits from there and cannot disagree; and a launch POST gathers the facts a
submission is judged against once."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from api.serializers import EnvVarSerializer, WorkloadCreateSerializer
from jobs.forms import LaunchForm
from jobs.models import Kind, Workload
from jobs.services.spec_fields import KIND_CHOICES, SPEC_LIMITS, time_limit_limits
from jobs.services.submission.intake import gather_facts

LIMITS = ("max_length", "min_value", "max_value")


def _form_fields() -> dict:
    return LaunchForm(catalog=[], gpu_types=[], may_set_priority=True, datasets=["d"], secrets=["s"]).fields


def _serializer_fields() -> dict:
    return WorkloadCreateSerializer().fields


def _choices(field) -> list[str]:
    return [str(key) for key in (field.choices.keys() if isinstance(field.choices, dict) else dict(field.choices))]


def test_the_form_and_the_serializer_take_every_limit_from_the_one_description():
    form, api = _form_fields(), _serializer_fields()
    # The form types command and args as one line, and offers datasets and secrets as checkboxes of the
    # allowed ones, and types retryable exit codes as one line too: those have no like-for-like limit; the
    # serializer's are checked below.
    typed_as_text = {"command", "args", "datasets", "secrets", "retryable_exit_codes"}
    shared = sorted(set(form) & set(api) & set(SPEC_LIMITS) - typed_as_text)
    assert shared == [
        "checkpoint_workspace", "cpu_millicores", "gpu_count", "image", "kind", "memory_mib", "name", "nodes",
        "port", "priority", "retry_limit",
    ]  # fmt: skip
    for name in shared:
        described = SPEC_LIMITS[name]
        for limit in LIMITS:
            assert getattr(form[name], limit, None) == getattr(api[name], limit, None) == getattr(described, limit), (
                name,
                limit,
            )
        if described.choices is not None:
            assert _choices(form[name]) == _choices(api[name]) == [key for key, _ in described.choices]


def test_the_limits_that_disagreed_before_now_agree():
    form, api = _form_fields(), _serializer_fields()
    assert form["name"].max_length == api["name"].max_length == 40  # the form said 80
    assert form["image"].max_length == api["image"].max_length == 255  # the form said 300
    assert list(KIND_CHOICES) == list(Kind.choices)


def test_the_serializer_documents_the_list_and_time_limits(settings):
    api = _serializer_fields()
    for name in ("command", "args"):
        assert api[name].max_length == SPEC_LIMITS[name].max_length == 256
        assert api[name].child.max_length == SPEC_LIMITS[name].item_max_length == 4096
    assert api["env"].max_length == SPEC_LIMITS["env"].max_length == 100
    assert EnvVarSerializer().fields["name"].max_length == SPEC_LIMITS["env.name"].max_length
    assert EnvVarSerializer().fields["value"].max_length == SPEC_LIMITS["env.value"].max_length
    assert api["secrets"].max_length == SPEC_LIMITS["secrets"].max_length
    assert api["datasets"].max_length == SPEC_LIMITS["datasets"].max_length
    bounds = time_limit_limits(settings.PORTAL_MIN_TIME_LIMIT, settings.PORTAL_MAX_TIME_LIMIT)
    assert (api["time_limit_seconds"].min_value, api["time_limit_seconds"].max_value) == (
        bounds.min_value,
        bounds.max_value,
    )


@pytest.mark.django_db
def test_a_launch_post_gathers_the_facts_once(login, world):
    with CaptureQueriesContext(connection) as alone:
        gather_facts(team=world.team, user=world.owner)
    facts_queries = [q["sql"] for q in alone.captured_queries]
    assert facts_queries

    client = login(world.owner)
    with CaptureQueriesContext(connection) as launch:
        response = client.post(
            reverse("launch"),
            {
                "catalog_image": str(world.trainer.id),
                "kind": "batch",
                "name": "facts-once",
                "gpu_type": "p100",
                "gpu_count": "1",
                "time_limit_unit": "hours",
            },
        )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Workload.objects.filter(name="facts-once").exists()
    launched = [q["sql"] for q in launch.captured_queries]
    # Each query of gather_facts runs at most once per gathering (the first, which asks whether anything
    # changed, always; the rest only when something did). Gathered twice, the first would show up twice.
    assert launched.count(facts_queries[0]) == 1
    assert max(launched.count(sql) for sql in facts_queries) == 1
