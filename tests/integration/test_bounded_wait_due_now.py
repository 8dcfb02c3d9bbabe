"""A workload that the admission plan held back in one round and reserved at now in a later round starts
in that same pass (issue 38), end to end on PostgreSQL through the real admission pass: before, it waited
for the next pass with its GPUs idle (the portal's next pass comes within 15 s, but the replay and the
bench pass only at arrivals and ends, where it made a promise late). Every promise is kept.

No cluster: the test plays the watch loop as test_bounded_wait does (admitted work starts at once, a run
ends by its time limit). Time is frozen and moved by hand (time-machine)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from jobs.models import GpuType, QueueReservation, State
from jobs.services.queue.admission import admit_all
from jobs.services.queue.reservation_plan import PROMISE_SLACK_SECONDS
from tests.integration.test_bounded_wait import lab, queue, watch_loop  # noqa: F401  (the fixture and the helpers)

pytestmark = pytest.mark.django_db

MORNING = timezone.make_aware(datetime(2026, 3, 12, 8, 0))
HOUR = 3600
SLACK = timedelta(seconds=PROMISE_SLACK_SECONDS)


def test_a_workload_held_back_and_due_now_starts_in_the_same_pass_and_every_promise_is_kept(lab):  # noqa: F811
    # The team's 4 GPUs are all free (the work ahead ended early). Three 2-GPU jobs in queue order: one
    # not promised (4 h), one promised by 2 h (2 h long), one promised by 1 h (1 h long), as earlier passes
    # left the rows. Admitting the first two would make the 1 h promise late: the plan's first round holds
    # the first back, and a later round finds it fits now beside both promises.
    GpuType.objects.filter(id=lab["gpu"].id).update(reserve_after_seconds=0, reserve_deeper_after_seconds=0)
    with time_machine.travel(MORNING, tick=False):
        first = queue(lab, "first", 2, 4 * HOUR)
        by_two = queue(lab, "by-two", 2, 2 * HOUR)
        by_one = queue(lab, "by-one", 2, HOUR)
        for w, by in ((by_two, 2 * HOUR), (by_one, HOUR)):
            QueueReservation.objects.create(
                workload=w, team=lab["team"], gpu_type=lab["gpu"], gpus=2,
                starts_by=MORNING + timedelta(seconds=by) + SLACK, made_at=MORNING - timedelta(hours=1),
            )  # fmt: skip
        promised = dict(QueueReservation.objects.values_list("workload_id", "starts_by"))
        admit_all()
        for w in (first, by_two, by_one):
            w.refresh_from_db()
        # The first starts now with the 1 h promise, not at the next arrival or end.
        assert first.state == State.SUBMITTING
        assert by_one.state == State.SUBMITTING
        assert by_two.state == State.QUEUED
        assert QueueReservation.objects.get(workload=by_two).starts_by <= promised[by_two.id]
        assert not QueueReservation.objects.filter(workload=first).exists()  # started: never promised
        watch_loop()
    for step in range(1, 31):
        with time_machine.travel(MORNING + timedelta(minutes=10 * step), tick=False):
            watch_loop()
            admit_all()
            watch_loop()
    for w in (by_two, by_one):
        w.refresh_from_db()
        assert w.admitted_at is not None
        assert w.admitted_at <= promised[w.id]
        assert w.admitted_at <= QueueReservation.objects.get(workload=w).starts_by
