"""How long a workload behind the head of its team's queue waits before it is promised GPUs is the admin's
setting per GPU type (`reserve_deeper_after_seconds`, issue 38), end to end on PostgreSQL through the real
admission pass: at 0 the second of two queued jobs that do not fit is promised GPUs in the same pass as
the first, after the first; at its default (4 h) only the head is, and the second is promised once it
becomes the head. Every promise is kept.

No cluster: the test plays the watch loop as test_bounded_wait does (admitted work starts at once, a run
ends by its time limit). Time is frozen and moved by hand (time-machine)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from jobs.models import GpuType, QueueReservation
from jobs.services.queue.admission import admit_all
from tests.integration.test_bounded_wait import lab, queue, watch_loop  # noqa: F401  (the fixture and the helpers)

pytestmark = pytest.mark.django_db

MORNING = timezone.make_aware(datetime(2026, 3, 11, 8, 0))
HOUR = 3600


def two_behind_a_running_job(lab, *, deeper: int | None) -> dict:  # noqa: F811
    """A 4-GPU job holds the team's 4 GPUs for 2 h; two more 4-GPU jobs of 1 h queue behind it. Then
    admission runs every 10 minutes for 5 hours, the tracker reporting before each pass. Returns the
    promise of each as first made (None: none in the first pass) and the workloads at the end."""
    changes = {"reserve_after_seconds": 0} | ({} if deeper is None else {"reserve_deeper_after_seconds": deeper})
    GpuType.objects.filter(id=lab["gpu"].id).update(**changes)
    with time_machine.travel(MORNING, tick=False):
        queue(lab, "running", 4, 2 * HOUR)
        admit_all()
        watch_loop()
    first: dict[str, object] = {}
    with time_machine.travel(MORNING + timedelta(minutes=1), tick=False):
        jobs = {"first": queue(lab, "first", 4, HOUR), "second": queue(lab, "second", 4, HOUR)}
        admit_all()
        for name, w in jobs.items():
            first[name] = QueueReservation.objects.filter(workload=w).values_list("starts_by", flat=True).first()
    for step in range(1, 31):
        with time_machine.travel(MORNING + timedelta(minutes=1 + 10 * step), tick=False):
            watch_loop()
            admit_all()
            watch_loop()
    for w in jobs.values():
        w.refresh_from_db()
    return {"promised": first, **jobs}


def test_at_zero_a_second_queued_job_is_promised_at_once_and_the_promise_is_kept(lab):  # noqa: F811
    got = two_behind_a_running_job(lab, deeper=0)
    first, second = got["promised"]["first"], got["promised"]["second"]
    assert first is not None
    assert second is not None
    # The first by the running job's limit (2 h, plus the allowances), the second after the first's hour.
    assert MORNING + timedelta(hours=2) < first <= MORNING + timedelta(hours=2, minutes=5)
    assert first + timedelta(hours=1) <= second <= MORNING + timedelta(hours=3, minutes=10)
    for name in ("first", "second"):
        w = got[name]
        assert w.admitted_at is not None
        assert w.admitted_at <= got["promised"][name]


def test_at_its_default_only_the_head_is_promised_at_once_and_the_second_when_it_becomes_the_head(lab):  # noqa: F811
    assert GpuType.objects.get(id=lab["gpu"].id).reserve_deeper_after_seconds == 4 * HOUR  # the default
    got = two_behind_a_running_job(lab, deeper=None)
    assert got["promised"]["first"] is not None
    assert got["promised"]["second"] is None  # behind the head, not waited 4 h: no promise yet
    first, second = got["first"], got["second"]
    assert first.admitted_at is not None
    assert first.admitted_at <= got["promised"]["first"]
    # Promised in the pass that started the first (it became the head), and kept.
    row = QueueReservation.objects.get(workload=second)
    assert row.made_at == first.admitted_at
    assert second.admitted_at is not None
    assert second.admitted_at <= row.starts_by
