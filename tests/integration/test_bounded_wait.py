"""A bounded wait, end to end on PostgreSQL through the real admission pass, estimates and pages: a
4-GPU job behind a stream of 1-GPU jobs starts by the time it was promised where its GPU type reserves,
and starves where it does not; backfill lets a short job pass the reservation and holds a long one
back; the estimates are stored as they are made and shown on the workload's page and in the API.

No cluster: the test plays the watch loop (a workload admitted starts at once, ends by its time limit).
Each test runs inside one transaction that is rolled back, so the suite's running engine never sees
this world. Time is frozen and moved by hand (time-machine)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from identity.models import Membership
from jobs.models import EstimateRevision, GpuType, QueueReservation, Quota, State, Team, Workload
from jobs.services.queue import start_estimates
from jobs.services.queue.admission import admit_all
from jobs.services.queue.reservation_plan import RESERVED

pytestmark = pytest.mark.django_db

MORNING = timezone.make_aware(datetime(2026, 3, 10, 8, 0))
HOUR = 3600


@pytest.fixture
def lab():
    owner = get_user_model().objects.create_user("bw-ann")
    team = Team.objects.create(slug="bw-lab", name="BW Lab")
    Membership.objects.create(team=team, user=owner)
    gpu = GpuType.objects.create(slug="bw-a100", display_name="BW A100", node_label_value="bw-a100")
    Quota.objects.create(team=team, gpu_type=gpu, max_gpus=4)
    return {"owner": owner, "team": team, "gpu": gpu}


def queue(lab, name: str, gpus: int, limit: int) -> Workload:
    return Workload.objects.create(
        team=lab["team"], owner=lab["owner"], name=name, kind="batch", image="ubuntu", gpu_type=lab["gpu"],
        gpu_count=gpus, time_limit_seconds=limit, created_at=timezone.now(),
    )  # fmt: skip


def watch_loop() -> None:
    """What the tracker records: the admitted start at once; a run past its time limit has ended."""
    now = timezone.now()
    Workload.objects.filter(state=State.SUBMITTING).update(state=State.RUNNING, started_at=now)
    for w in Workload.objects.filter(state=State.RUNNING):
        if w.started_at + timedelta(seconds=w.time_limit_seconds) <= now:
            Workload.objects.filter(id=w.id).update(state=State.SUCCEEDED, finished_at=now)


def stream_trace(lab, *, reserve_after: int | None) -> dict:
    """A 1-GPU job every 10 minutes for 8 hours, each running its whole hour; a 4-GPU job submitted a
    second after the first. Every 10 minutes (and at each end) the tracker reports and admission runs."""
    GpuType.objects.filter(id=lab["gpu"].id).update(reserve_after_seconds=reserve_after)
    big = None
    promised = None
    for step in range(8 * 6):
        with time_machine.travel(MORNING + timedelta(minutes=10 * step), tick=False):
            watch_loop()
            queue(lab, f"small-{step}", 1, HOUR)
            if step == 0:
                admit_all()
                watch_loop()
        with time_machine.travel(MORNING + timedelta(minutes=10 * step, seconds=1), tick=False):
            if big is None:
                big = queue(lab, "big", 4, HOUR)
            admit_all()
            if promised is None:
                promised = QueueReservation.objects.filter(workload=big).values_list("starts_by", flat=True).first()
            watch_loop()
    big.refresh_from_db()
    return {"big": big, "promised": promised}


def test_a_large_job_behind_a_stream_of_small_ones_starts_by_its_promise_and_starves_without(lab):
    with_reservation = stream_trace(lab, reserve_after=0)
    big = with_reservation["big"]
    promised = with_reservation["promised"]
    assert promised is not None
    # Promised within the hour the first small job holds a GPU for (plus the allowances), and kept.
    assert promised <= MORNING + timedelta(hours=1, minutes=5)
    assert big.admitted_at is not None
    assert big.admitted_at <= promised
    assert QueueReservation.objects.get(workload=big).admitted_at == big.admitted_at

    Workload.objects.filter(team=lab["team"]).delete()  # the same trace again, with reservations off
    without = stream_trace(lab, reserve_after=None)
    assert without["promised"] is None
    assert without["big"].state == State.QUEUED  # eight hours on, still waiting behind the stream
    assert without["big"].admitted_at is None


def test_backfill_admits_a_short_job_that_ends_before_the_reservation_and_refuses_a_long_one(lab, client):
    GpuType.objects.filter(id=lab["gpu"].id).update(reserve_after_seconds=0)
    with time_machine.travel(MORNING, tick=False):
        running = queue(lab, "running", 3, 2 * HOUR)
        admit_all()
        watch_loop()
    with time_machine.travel(MORNING + timedelta(minutes=1), tick=False):
        big = queue(lab, "big", 4, HOUR)
        long = queue(lab, "long", 1, 5 * HOUR)
        short = queue(lab, "short", 1, 10 * 60)
        start_estimates.estimate(team_id=lab["team"].id, gpu_type_id=lab["gpu"].id)  # the first estimates
        admit_all()
        watch_loop()
        for w in (running, big, long, short):
            w.refresh_from_db()
        assert short.state == State.RUNNING  # ends long before the running job's limit frees the GPUs
        assert long.state == State.QUEUED  # would still hold a GPU when the big one is due
        promise = QueueReservation.objects.get(workload=big).starts_by
        assert MORNING + timedelta(hours=2) < promise <= MORNING + timedelta(hours=2, minutes=5)
        start_estimates.estimate(team_id=lab["team"].id, gpu_type_id=lab["gpu"].id)
        long.refresh_from_db()
        assert long.wait_reason in {RESERVED, "team quota"}

        # The owner sees the promise and the estimate on the big job's page, and the API says the same.
        client.force_login(lab["owner"])
        page = client.get(f"/workloads/{big.uid}/").content.decode()
        assert "Starts no later than" in page
        assert f'datetime="{promise.isoformat()}"' in page or promise.strftime("%H:%M") in page
        assert "at submit" in page  # its first estimate, kept
        api = APIClient()
        api.force_authenticate(lab["owner"])
        body = api.get(f"/api/v1/workloads/{big.uid}/estimates/").json()
        assert body["starts_no_later_than"] is not None
        assert len(body["estimates"]) >= 1
        assert body["started_at"] is None
        queue_page = client.get("/queue/").content.decode()
        assert "no later than" in queue_page

    # The running job ends at its limit: the big one is admitted, and its page tells the whole story.
    with time_machine.travel(MORNING + timedelta(hours=2, seconds=5), tick=False):
        watch_loop()
        admit_all()
        watch_loop()
        big.refresh_from_db()
        assert big.state == State.RUNNING
        assert big.started_at <= promise
        assert EstimateRevision.objects.filter(workload=big).exists()
        page = client.get(f"/workloads/{big.uid}/").content.decode()
        history = page.split('id="estimate-history">', 1)[1].split("</p>", 1)[0]
        assert history.startswith("estimated ")
        assert "at submit" in history
        assert "started " in history
        assert "Starts no later than" not in page  # promise kept, no longer shown


def test_the_estimates_accuracy_is_reported_per_gpu_type_from_the_stored_estimates(lab, client):
    with time_machine.travel(MORNING, tick=False):
        first = queue(lab, "first", 4, HOUR)
        admit_all()
        watch_loop()
        waiting = queue(lab, "second", 4, HOUR)
        start_estimates.estimate(team_id=lab["team"].id, gpu_type_id=lab["gpu"].id)
        estimate = EstimateRevision.objects.get(workload=waiting).estimated_start_at
        assert estimate is not None
    # The first ends 20 minutes before its limit: the second starts early by about that much.
    with time_machine.travel(MORNING + timedelta(minutes=40), tick=False):
        Workload.objects.filter(id=first.id).update(state=State.SUCCEEDED, finished_at=timezone.now())
        admit_all()
        watch_loop()
    with time_machine.travel(MORNING + timedelta(hours=1), tick=False):
        api = APIClient()
        api.force_authenticate(lab["owner"])
        body = api.get("/api/v1/queue/estimate-accuracy/").json()
        row = next(r for r in body["gpu_types"] if r["gpu_type"] == "bw-a100")
        started = MORNING + timedelta(minutes=40)
        assert row["started"] == 1
        assert row["late"] == 0
        assert row["p50_error_seconds"] == pytest.approx(abs((started - estimate).total_seconds()))
        assert api.get("/api/v1/queue/estimate-accuracy/?days=0").status_code == 400
        client.force_login(lab["owner"])
        page = client.get("/queue/").content.decode()
        assert 'id="estimate-accuracy"' in page


def test_a_promised_workload_behind_two_of_its_size_is_admitted_when_its_gpus_free_up(lab):
    # The pass reads only the head of the queue that a plan could reach; a promise is kept even for a
    # workload it did not read (two later 4-GPU jobs of a higher priority came ahead of it).
    with time_machine.travel(MORNING, tick=False):
        running = queue(lab, "running", 4, HOUR)
        admit_all()
        watch_loop()
    with time_machine.travel(MORNING + timedelta(minutes=1), tick=False):
        GpuType.objects.filter(id=lab["gpu"].id).update(reserve_after_seconds=0)
        big = queue(lab, "big", 4, HOUR)
        admit_all()
        promised = QueueReservation.objects.get(workload=big).starts_by
        for name in ("urgent-1", "urgent-2"):
            Workload.objects.filter(id=queue(lab, name, 4, HOUR).id).update(priority=5)
        admit_all()
    with time_machine.travel(MORNING + timedelta(hours=1), tick=False):
        watch_loop()
        assert Workload.objects.get(id=running.id).state == State.SUCCEEDED
        admit_all()
    big.refresh_from_db()
    assert big.state == State.SUBMITTING
    assert big.admitted_at <= promised


def test_a_second_large_job_is_promised_when_the_first_starts_and_promises_move_earlier_when_work_ends_early(lab):
    # 4 of 4 GPUs held until noon by their limit (4 h); two 4-GPU jobs of an hour queue behind.
    GpuType.objects.filter(id=lab["gpu"].id).update(reserve_after_seconds=0)
    with time_machine.travel(MORNING, tick=False):
        running = queue(lab, "running", 4, 4 * HOUR)
        admit_all()
        watch_loop()
    with time_machine.travel(MORNING + timedelta(minutes=1), tick=False):
        first, second = queue(lab, "first", 4, HOUR), queue(lab, "second", 4, HOUR)
        admit_all()
        promised = dict(QueueReservation.objects.values_list("workload_id", "starts_by"))
    # The head is promised GPUs at noon; the second, behind it, not yet (beyond the head, a workload is
    # promised GPUs once it has waited RESERVE_DEEPER_AFTER_SECONDS, or once it is the head).
    assert set(promised) == {first.id}
    assert promised[first.id] >= MORNING + timedelta(hours=4)
    # The running job ends at 9:00, three hours before its limit: the first starts, and in the same pass
    # the second, now the head, is promised GPUs at the end of the first's hour (by its limit), not after
    # noon as the first's promise said.
    with time_machine.travel(MORNING + timedelta(hours=1), tick=False):
        Workload.objects.filter(id=running.id).update(state=State.SUCCEEDED, finished_at=timezone.now())
        admit_all()
        assert Workload.objects.get(id=first.id).state == State.SUBMITTING
        now_promised = QueueReservation.objects.get(workload_id=second.id).starts_by
    assert now_promised <= MORNING + timedelta(hours=2, minutes=10)
    assert now_promised < promised[first.id]
    with time_machine.travel(MORNING + timedelta(hours=1, minutes=30), tick=False):
        watch_loop()
        Workload.objects.filter(id=first.id).update(state=State.SUCCEEDED, finished_at=timezone.now())
        admit_all()
    second.refresh_from_db()
    assert second.state == State.SUBMITTING
    assert second.admitted_at <= now_promised
