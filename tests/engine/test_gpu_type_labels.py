"""Each GPU type selects its nodes by a label of its own: the inventory counts a node under one type only,
so a second type with the same label would never have a node. Admin, the seed and the database refuse it."""

from __future__ import annotations

import pytest
from django.db import IntegrityError

from jobs.models import GpuType
from jobs.services.queue.reservation_plan import RESERVE_DEEPER_AFTER_SECONDS
from jobs.services.seeding import SeedError, apply_seed

pytestmark = pytest.mark.django_db


def add_form(**overrides) -> dict:
    return {
        "slug": "p100-big", "display_name": "Tesla P100 (big nodes)", "node_label_key": "gputype",
        "node_label_value": "p100", "resource_name": "nvidia.com/gpu", "cpu_per_gpu_millicores": "4000",
        "memory_per_gpu_mib": "16384", "billing_weight": "1", "ephemeral_storage_request_mib": "1024",
        "ephemeral_storage_limit_mib": "20480", "min_runtime_seconds": "0", "enabled": "on",
        "reserve_deeper_after_seconds": "14400",
        "kind": "whole", "share_parts": "1", "share_of": "1",
    } | overrides  # fmt: skip


def test_admin_refuses_a_second_type_on_the_same_label_naming_the_field(admin_client):
    GpuType.objects.create(slug="p100", display_name="Tesla P100", node_label_value="p100")
    page = admin_client.post("/admin/jobs/gputype/add/", add_form())
    assert page.status_code == 200  # the form again, with the error
    errors = page.context["adminform"].form.errors
    assert list(errors) == ["node_label_value"]
    assert "'p100' already selects nodes labelled gputype=p100" in errors["node_label_value"][0]
    assert not GpuType.objects.filter(slug="p100-big").exists()
    # Another label, or the same value under another key, is fine.
    assert admin_client.post("/admin/jobs/gputype/add/", add_form(node_label_value="p100-big")).status_code == 302
    other_key = add_form(slug="p100-pool", node_label_key="pool")
    assert admin_client.post("/admin/jobs/gputype/add/", other_key).status_code == 302


def test_editing_a_type_keeps_its_own_label_without_complaint(admin_client):
    p100 = GpuType.objects.create(slug="p100", display_name="Tesla P100", node_label_value="p100")
    page = admin_client.post(f"/admin/jobs/gputype/{p100.pk}/change/", add_form(slug="p100", display_name="P100"))
    assert page.status_code == 302
    p100.refresh_from_db()
    assert p100.display_name == "P100"


def test_the_seed_refuses_a_new_type_on_a_taken_label_and_names_the_field():
    apply_seed({"gpu_types": [{"slug": "k2", "node_label_value": "grid"}]})
    with pytest.raises(SeedError, match=r"gpu_types\[1\]: 'node_label_value' gputype=grid .* GPU type 'k2'"):
        apply_seed({"gpu_types": [{"slug": "k2"}, {"slug": "k2-big", "node_label_value": "grid"}]})
    assert list(GpuType.objects.values_list("slug", flat=True)) == ["k2"]
    # Seeding again what exists already is no clash (the hook runs on every upgrade).
    assert apply_seed({"gpu_types": [{"slug": "k2", "node_label_value": "grid"}]})["gpu_types"] == 0


def test_the_database_refuses_it_too():
    GpuType.objects.create(slug="p100", display_name="Tesla P100", node_label_value="p100")
    with pytest.raises(IntegrityError):
        GpuType.objects.create(slug="p100-big", display_name="Big", node_label_value="p100")


def test_the_type_page_says_how_long_workloads_behind_the_head_wait_before_they_are_reserved_for(admin_client):
    # The plan reserves for the head after reserve_after_seconds, for those behind it only after
    # reserve_deeper_after_seconds too (issue 38): an admin setting, 4 h unless changed, beside the first.
    page = admin_client.get("/admin/jobs/gputype/add/").content.decode()
    assert "How long the head of a team's queue" in page
    assert "once they have waited as long as 'reserve deeper after seconds' says" in page
    assert "how long a queued workload behind the head of its team's queue" in page
    assert f'name="reserve_deeper_after_seconds" value="{RESERVE_DEEPER_AFTER_SECONDS:.0f}"' in page


def test_admin_sets_the_wait_beyond_the_head_and_refuses_a_negative_one_naming_the_field(admin_client):
    page = admin_client.post("/admin/jobs/gputype/add/", add_form(reserve_deeper_after_seconds="-60"))
    assert page.status_code == 200  # the form again, with the error
    errors = page.context["adminform"].form.errors
    assert list(errors) == ["reserve_deeper_after_seconds"]
    assert "greater than or equal to 0" in errors["reserve_deeper_after_seconds"][0]
    assert not GpuType.objects.filter(slug="p100-big").exists()
    ok = admin_client.post(
        "/admin/jobs/gputype/add/", add_form(reserve_after_seconds="0", reserve_deeper_after_seconds="0")
    )
    assert ok.status_code == 302
    assert GpuType.objects.get(slug="p100-big").reserve_deeper_after_seconds == 0
    assert "Reserve deeper after seconds" in admin_client.get("/admin/jobs/gputype/").content.decode()


def test_the_seed_sets_the_wait_beyond_the_head_and_names_a_bad_value():
    apply_seed({"gpu_types": [{"slug": "a10", "reserve_after_seconds": 0, "reserve_deeper_after_seconds": 1800}]})
    assert GpuType.objects.get(slug="a10").reserve_deeper_after_seconds == 1800
    with pytest.raises(SeedError, match=r"gpu_types\[0\]: 'reserve_deeper_after_seconds' must be .* 0 or more"):
        apply_seed({"gpu_types": [{"slug": "a100", "reserve_deeper_after_seconds": -1}]})
    assert not GpuType.objects.filter(slug="a100").exists()
    apply_seed({"gpu_types": [{"slug": "h100"}]})
    assert GpuType.objects.get(slug="h100").reserve_deeper_after_seconds == RESERVE_DEEPER_AFTER_SECONDS
