"""GPU types that are slices of a GPU (issue 40): the share, its words, its limits, pure functions."""

from __future__ import annotations

from fractions import Fraction

import pytest

from jobs import gpu_shares as gs
from jobs.services import validation as v

MIG_1G = gs.GpuShare(kind=gs.MIG, parts=1, of=7, physical="A100", memory_mib=10 * 1024)
MIG_3G = gs.GpuShare(kind=gs.MIG, parts=3, of=7, physical="A100 80GB", memory_mib=40 * 1024)
T4_SHARED = gs.GpuShare(kind=gs.TIME_SLICED, parts=1, of=4, physical="T4", memory_mib=16 * 1024)


def test_share_of_a_gpu():
    assert gs.GpuShare().fraction == 1
    assert MIG_1G.fraction == Fraction(1, 7)
    assert MIG_3G.fraction == Fraction(3, 7)
    assert T4_SHARED.fraction == Fraction(1, 4)
    # An hour on a 1g.10gb slice is a seventh of an A100 hour.
    assert gs.equivalents(7 * 3600, MIG_1G) == pytest.approx(3600)


def test_described_in_words():
    assert gs.describe(MIG_1G) == "1/7 of an A100, 10 GB"
    assert gs.describe(MIG_3G) == "3/7 of an A100 80GB, 40 GB"
    assert gs.describe(T4_SHARED) == "1/4 of a T4, time-sliced: takes turns with up to 3 others and shares its 16 GB"
    assert gs.describe(gs.GpuShare(kind=gs.MIG, parts=1, of=7, physical="H100")) == "1/7 of an H100"
    assert gs.describe(gs.GpuShare(), display_name="Tesla P100") == "A whole Tesla P100"
    assert gs.describe(gs.GpuShare(memory_mib=16384), display_name="Tesla P100") == "A whole Tesla P100, 16 GB"


@pytest.mark.parametrize(
    ("name", "expected"),
    [("A100", "an"), ("H100", "an"), ("L4", "an"), ("T4", "a"), ("V100", "a"), ("Tesla P100", "a"), ("RTX 6000", "an")],
)
def test_article(name, expected):
    assert gs.article(name) == expected


def test_per_container_limit():
    assert gs.GpuShare().per_container_limit is None
    assert MIG_1G.per_container_limit == 1
    assert T4_SHARED.per_container_limit == 1
    assert gs.GpuShare(kind=gs.MIG, parts=1, of=7, physical="A100", most_per_container=2).per_container_limit == 2


def test_admin_settings_that_make_no_sense_are_named():
    assert gs.share_problems(MIG_1G) == {}
    assert gs.share_problems(T4_SHARED) == {}
    assert "share_of" in gs.share_problems(gs.GpuShare(parts=1, of=7))
    assert "share_of" in gs.share_problems(gs.GpuShare(kind=gs.MIG, parts=1, of=1, physical="A100"))
    assert "share_parts" in gs.share_problems(gs.GpuShare(kind=gs.MIG, parts=8, of=7, physical="A100"))
    assert "share_parts" in gs.share_problems(gs.GpuShare(kind=gs.TIME_SLICED, parts=2, of=4, physical="T4"))
    assert "physical_gpu" in gs.share_problems(gs.GpuShare(kind=gs.MIG, parts=1, of=7))


def _slice_facts(**kwargs) -> v.GpuTypeFacts:
    base = {"slug": "a100-1g", "display_name": "A100 1g.10gb", "enabled": True, "quota": 7, "largest_node": 7}
    return v.GpuTypeFacts(**(base | {"max_cuda": None, "per_container": 1, "unit": gs.MIG} | kwargs))


def test_slice_types_take_one_per_container():
    assert v.check_gpu_count(1, _slice_facts()).value == 1
    refused = v.check_gpu_count(2, _slice_facts())
    assert refused.problems == (
        (
            "gpu_count",
            "A100 1g.10gb is a MIG slice: one per container. For more, choose a larger slice or a whole GPU.",
        ),
    )
    shared = v.check_gpu_count(3, _slice_facts(unit=gs.TIME_SLICED, display_name="T4 shared"))
    assert "T4 shared is a time-sliced share: one per container" in shared.problems[0][1]
    # ... unless the type allows more.
    assert v.check_gpu_count(2, _slice_facts(per_container=2)).value == 2
    assert v.check_gpu_count(3, _slice_facts(per_container=2)).problems == (
        ("gpu_count", "A100 1g.10gb allows at most 2 per container."),
    )
    # Whole GPUs: only the quota and the largest node limit the count.
    whole = v.GpuTypeFacts("p100", "Tesla P100", True, quota=4, largest_node=4, max_cuda=None)
    assert v.check_gpu_count(4, whole).value == 4


@pytest.mark.django_db
def test_admin_validation_names_the_field_of_a_slice_that_makes_no_sense():
    from django.core.exceptions import ValidationError

    from jobs.models import GpuType

    gpu_type = GpuType(slug="a100-1g", display_name="A100 1g", node_label_value="a100-mig", kind="mig", share_of=1)
    with pytest.raises(ValidationError) as caught:
        gpu_type.full_clean()
    assert "share_of" in caught.value.message_dict
    gpu_type.share_of, gpu_type.physical_gpu = 7, "A100"
    gpu_type.full_clean()


@pytest.mark.django_db
def test_usage_and_budget_count_a_slice_hour_as_its_share_of_a_gpu_hour():
    from datetime import timedelta

    from django.utils import timezone

    from jobs.models import GpuType, Team, Workload
    from jobs.services.usage.accounting import month_to_date_hours, usage_report
    from tests.engine.factories import UserFactory

    team = Team.objects.create(slug="vision", name="Vision", monthly_gpu_hour_budget=10)
    owner = UserFactory()
    mig = GpuType.objects.create(
        slug="a100-1g", display_name="A100 1g.10gb", node_label_value="a100-mig", kind="mig", share_of=7,
        physical_gpu="A100", billing_weight=2,
    )  # fmt: skip
    now = timezone.now()
    start = max(now - timedelta(hours=7), now.replace(day=1, hour=0, minute=0, second=0, microsecond=0))
    Workload.objects.create(
        team=team, owner=owner, name="seven-slices", kind="batch", image="python:3", gpu_type=mig, gpu_count=1,
        time_limit_seconds=86400, state="SUCCEEDED", started_at=start, finished_at=now,
    )  # fmt: skip
    hours = (now - start).total_seconds() / 3600
    rows = usage_report(start=start, end=now, now=now)
    assert sum(r.gpu_hours for r in rows) == pytest.approx(hours)
    assert sum(r.gpu_equivalent_hours for r in rows) == pytest.approx(hours / 7)
    assert sum(r.weighted_gpu_hours for r in rows) == pytest.approx(hours / 7 * 2)  # then the billing weight
    assert month_to_date_hours(team, now=now) == pytest.approx(hours / 7 * 2)


@pytest.mark.django_db
def test_the_seed_document_sets_a_types_slice_and_names_a_bad_one():
    from jobs.models import GpuType
    from jobs.services.seeding import SeedError, apply_seed
    from localcluster.sliced_nodes import sliced_seed

    apply_seed(sliced_seed(quota_team="vision"))
    mig = GpuType.objects.get(slug="real-a100-1g")
    assert (mig.kind, mig.share.fraction, mig.resource_name) == ("mig", Fraction(1, 7), "nvidia.com/mig-1g.10gb")
    assert GpuType.objects.get(slug="real-t4-shared").described.startswith("1/4 of a T4, time-sliced")
    with pytest.raises(SeedError, match=r"gpu_types\[0\]: 'share_parts'"):
        apply_seed(
            {"gpu_types": [{"slug": "bad", "kind": "mig", "share_parts": 9, "share_of": 7, "physical_gpu": "A100"}]}
        )
    with pytest.raises(SeedError, match=r"gpu_types\[0\]: 'kind'"):
        apply_seed({"gpu_types": [{"slug": "bad", "kind": "halves"}]})
    assert not GpuType.objects.filter(slug="bad").exists()
