"""The chart's seed hook runs on every upgrade: it creates what is missing and never overwrites what an
admin changed since (quotas, budgets, billing weights, a disabled type); what it creates is audited."""

from __future__ import annotations

from decimal import Decimal

import pytest

from jobs.models import GpuType, Quota, QuotaChange, Team
from jobs.services.seeding import SEED_NOTE, apply_seed

pytestmark = pytest.mark.django_db

SEED = {
    "gpu_types": [{"slug": "v100", "display_name": "Tesla V100", "billing_weight": "2.0"}],
    "teams": [{"name": "Vision", "slug": "vision", "monthly_gpu_hour_budget": 100}],
    "default_quotas": [{"team": "vision", "gpu_type": "v100", "max_gpus": 4}],
}


def test_an_upgrade_keeps_what_an_admin_changed():
    apply_seed(SEED)
    Quota.objects.filter(team__slug="vision").update(max_gpus=16)
    Team.objects.filter(slug="vision").update(monthly_gpu_hour_budget=Decimal(500))
    v100 = GpuType.objects.get(slug="v100")
    v100.billing_weight, v100.enabled = Decimal("3.5"), False
    v100.save()

    counts = apply_seed(SEED)  # the next chart upgrade

    assert counts == {"gpu_types": 0, "teams": 0, "quotas": 0, "images": 0, "allowed_registries": 0}
    assert Quota.objects.get(team__slug="vision").max_gpus == 16
    assert Team.objects.get(slug="vision").monthly_gpu_hour_budget == Decimal(500)
    v100.refresh_from_db()
    assert (v100.billing_weight, v100.enabled) == (Decimal("3.5"), False)


def test_what_the_seed_adds_is_created_and_audited():
    apply_seed(SEED)
    apply_seed(
        {**SEED, "default_quotas": [*SEED["default_quotas"], {"team": "nlp", "gpu_type": "v100", "max_gpus": 2}]}
    )
    changes = list(QuotaChange.objects.order_by("id").values_list("team__slug", "old_max_gpus", "new_max_gpus", "note"))
    assert changes == [("vision", None, 4, SEED_NOTE), ("nlp", None, 2, SEED_NOTE)]
    assert Quota.objects.get(team__slug="nlp").max_gpus == 2


def test_the_seed_turns_bounded_waits_on_for_a_gpu_type_and_names_a_bad_value():
    from jobs.services.seeding import DEMO, SeedError

    apply_seed(DEMO)
    assert GpuType.objects.get(slug="p100").reserve_after_seconds == 0  # the demo shows "starts no later than"
    assert GpuType.objects.get(slug="k2").reserve_after_seconds is None
    with pytest.raises(SeedError, match=r"gpu_types\[0\]: 'reserve_after_seconds'"):
        apply_seed({"gpu_types": [{"slug": "a10", "reserve_after_seconds": -5}]})
    assert not GpuType.objects.filter(slug="a10").exists()


def test_the_seed_turns_aging_on_for_a_gpu_type_and_names_a_bad_value():
    from jobs.services.seeding import SeedError

    apply_seed({"gpu_types": [{"slug": "a30", "queue_aging": True}, {"slug": "a40"}]})
    assert GpuType.objects.get(slug="a30").queue_aging
    assert not GpuType.objects.get(slug="a40").queue_aging  # off unless asked for
    with pytest.raises(SeedError, match=r"gpu_types\[0\]: 'queue_aging' must be true or false"):
        apply_seed({"gpu_types": [{"slug": "a10", "queue_aging": "yes"}]})
    assert not GpuType.objects.filter(slug="a10").exists()
