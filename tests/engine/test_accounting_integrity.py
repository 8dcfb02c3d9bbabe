"""Accounting integrity: every finished workload that started has an end; weights bill as they were on the
day of use; workload ids are wide enough never to collide in practice, and a collision is retried."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs.models import State, Workload
from jobs.models import workloads as workloads_model
from jobs.services.lifecycle import enforce_limits
from jobs.services.submission.intake import create_with_fresh_uid
from jobs.services.usage.accounting import totals, usage_report_days
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory


@pytest.fixture
def lab(db):
    team = TeamFactory(slug="lab")
    member = MembershipFactory(team=team)
    return team, member.user


def fields(team, user, gpu_type, **extra):
    return {
        "team": team, "owner": user, "name": "w", "kind": "batch", "image": "ubuntu", "gpu_type": gpu_type,
        "gpu_count": 1, "time_limit_seconds": 86400, **extra,
    }  # fmt: skip


def test_a_finished_workload_that_started_cannot_lack_an_end(lab):
    team, user = lab
    gpu = GpuTypeFactory(slug="p100")
    with pytest.raises(IntegrityError), transaction.atomic():
        Workload.objects.create(**fields(team, user, gpu, state=State.FAILED, started_at=timezone.now()))


def test_a_service_that_ran_then_failed_its_image_pull_is_billed_until_then(lab, settings):
    team, user = lab
    gpu = GpuTypeFactory(slug="p100")
    started = timezone.now() - timedelta(hours=2)
    workload = Workload.objects.create(
        **fields(team, user, gpu, kind="service", port=8888, state=State.PENDING, reason="ImagePullBackOff"),
        started_at=started,
        submitted_at=started,
        state_changed_at=timezone.now() - timedelta(seconds=settings.PORTAL_IMAGE_PULL_TIMEOUT + 5),
    )
    assert enforce_limits()["image_pull_failed"] == 1
    workload.refresh_from_db()
    assert workload.state == State.FAILED
    assert workload.finished_at is not None
    assert workload.gpu_seconds() == pytest.approx(7200, abs=30)


def test_editing_a_weight_does_not_rewrite_last_month(lab):
    team, user = lab
    with time_machine.travel(datetime(2026, 5, 1, tzinfo=UTC), tick=False):
        gpu = GpuTypeFactory(slug="v100", billing_weight=Decimal("1.0"))
    Workload.objects.create(
        **fields(team, user, gpu, state=State.SUCCEEDED),
        started_at=datetime(2026, 5, 3, 0, 0, tzinfo=UTC),
        finished_at=datetime(2026, 5, 3, 10, 0, tzinfo=UTC),
    )
    Workload.objects.create(
        **fields(team, user, gpu, state=State.SUCCEEDED),
        started_at=datetime(2026, 6, 3, 0, 0, tzinfo=UTC),
        finished_at=datetime(2026, 6, 3, 1, 0, tzinfo=UTC),
    )
    with time_machine.travel(datetime(2026, 6, 2, 12, tzinfo=UTC), tick=False):
        gpu.billing_weight = Decimal("3.0")  # an admin raises the price in June
        gpu.save()
    with time_machine.travel(datetime(2026, 6, 10, tzinfo=UTC), tick=False):
        may = usage_report_days(first_day=date(2026, 5, 1), last_day=date(2026, 5, 31))
        june = usage_report_days(first_day=date(2026, 6, 1), last_day=date(2026, 6, 30))
    assert totals(may, "gpu_type_id") == {gpu.id: (10.0, 10.0)}
    assert totals(june, "gpu_type_id") == {gpu.id: (1.0, 3.0)}


def test_workload_ids_carry_64_random_bits():
    uids = {workloads_model.new_uid() for _ in range(1000)}
    assert len(uids) == 1000
    assert all(len(uid) * 4 >= 64 and int(uid, 16) >= 0 for uid in uids)


def test_a_uid_collision_draws_again_instead_of_failing(lab, monkeypatch):
    team, user = lab
    gpu = GpuTypeFactory(slug="p100")
    taken = Workload.objects.create(**fields(team, user, gpu))
    draws = iter([taken.uid, taken.uid, "0123456789abcdef"])
    monkeypatch.setattr(workloads_model, "new_uid", lambda: next(draws))
    with transaction.atomic():
        fresh = create_with_fresh_uid(**fields(team, user, gpu))
    assert fresh.uid == "0123456789abcdef"
    assert Workload.objects.count() == 2
