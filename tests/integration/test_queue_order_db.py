"""Every reading of a team's queue orders it alike on PostgreSQL (`jobs.queue_order`): for generated queues
(priorities, requeues, people with and without fair-share usage, sizes, submission times with ties, GPU
types that age and that do not), the admission pass's SQL, the queue page's ORM order and the Python key
the plan and forecast sort by give the same order, and the queue positions a page shows follow that
order with fair share and requeues left out, as they say. A disagreement is a page that says one thing
while another starts first."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.models import GpuType, State, Team, Workload
from jobs.selectors import queue_positions, with_queue_position
from jobs.selectors_sharing import _team_head
from jobs.services.queue.admission import _queue_heads
from jobs.services.queue.sharing_plan import QueueEntry, Room, team_queues

pytestmark = pytest.mark.django_db

NOON = timezone.make_aware(datetime(2026, 3, 11, 12, 0))
PEOPLE = 3

# Submission and requeue times on a coarse grid (half hours), so that equal times and equal GPU-seconds
# waited (1 GPU for 2 h = 2 GPUs for 1 h) are common: the ties are where renderings drift apart.
workloads = st.lists(
    st.fixed_dictionaries({
        "owner": st.integers(0, PEOPLE - 1),
        "priority": st.integers(0, 2),
        "gpus": st.integers(0, 4),
        "waited": st.integers(0, 8),  # half hours before noon
        "requeued": st.one_of(st.none(), st.integers(0, 3)),  # half hours before noon
    }),
    min_size=1,
    max_size=14,
)  # fmt: skip
usage = st.one_of(st.none(), st.lists(st.sampled_from([0.0, 0.5, 2.0]), min_size=PEOPLE, max_size=PEOPLE))


def _store(specs: list[dict], *, aging: bool) -> tuple[Team, GpuType, list, list[Workload]]:
    team = Team.objects.create(slug="qo-lab", name="QO Lab")
    gpu = GpuType.objects.create(slug="qo-gpu", display_name="QO", node_label_value="qo-gpu", queue_aging=aging)
    people = [get_user_model().objects.create_user(f"qo-{i}") for i in range(PEOPLE)]
    half_hour = timedelta(minutes=30)
    stored = Workload.objects.bulk_create(
        Workload(
            team=team, owner=people[s["owner"]], name=f"qo-{i}", kind="batch", image="ubuntu", gpu_type=gpu,
            gpu_count=s["gpus"], priority=s["priority"], time_limit_seconds=3600, state=State.QUEUED,
            created_at=NOON - s["waited"] * half_hour,
            requeued_at=None if s["requeued"] is None else NOON - s["requeued"] * half_hour,
        )
        for i, s in enumerate(specs)
    )  # fmt: skip
    return team, gpu, people, stored


def _entry(w: Workload, *, requeued: bool = True) -> QueueEntry:
    return QueueEntry(
        id=w.id, team_id=w.team_id, user_id=w.owner_id, gpus=w.gpu_count, priority=w.priority,
        created=w.created_at.timestamp(),
        requeued=w.requeued_at.timestamp() if requeued and w.requeued_at else None,
    )  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=workloads, aging=st.booleans(), hours=usage)
def test_admission_the_queue_page_and_the_plan_order_a_team_queue_alike(specs, aging, hours):
    with transaction.atomic(), time_machine.travel(NOON, tick=False):
        team, gpu, people, stored = _store(specs, aging=aging)
        share = {} if hours is None else {p.id: h for p, h in zip(people, hours, strict=True)}
        aging_now = NOON.timestamp() if aging else None

        # Python: the key the plan and the forecast sort by.
        python = [e.id for e in team_queues(map(_entry, stored), {team.id: share}, aging_now=aging_now)[team.id]]

        # SQL: the admission pass's heads, with no bound on how deep it reads.
        heads, _ = _queue_heads(
            {(team.id, gpu.id): Room(None)}, {team.id: (team.id,)}, {team.id: share},
            aging_types={gpu.id} if aging else set(), reserving_types=set(),
        )  # fmt: skip
        places = sorted(heads[((team.id,), gpu.id)], key=lambda pair: pair[0])
        assert [place for place, _ in places] == list(range(len(stored)))
        assert [e.id for _, e in places] == python

        # ORM: the queue page's order, whole and for its first few (where it reads candidates only).
        assert [w.id for w in _team_head(team, gpu.id, share, aging=aging, first=len(stored))] == python
        first = min(3, len(stored))
        assert [w.id for w in _team_head(team, gpu.id, share, aging=aging, first=first)[:first]] == python[:first]

        # Positions: the same order with what only the pass knows (fair share, requeues) left out.
        plain = team_queues((_entry(w, requeued=False) for w in stored), {}, aging_now=aging_now)[team.id]
        expected = {e.id: n for n, e in enumerate(plain, start=1)}
        rows = with_queue_position(Workload.objects.filter(team=team)).values_list("id", "queue_position")
        assert dict(rows) == expected
        assert queue_positions(stored) == expected
        transaction.set_rollback(True)
